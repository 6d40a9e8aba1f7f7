// The local provider's warm pool with real sandboxes (bwrap, root, cgroup
// v1): a create after the first is served from the pool, `warm_pool: 0`
// prepares nothing, a pooled sandbox found dirty or dead is destroyed, never
// handed out, and shutdown leaves nothing of the pool behind.

#include "isolation_fixture.hpp"

#include <algorithm>
#include <dirent.h>
#include <fstream>
#include <set>
#include <sys/mount.h>

using namespace sv;
using namespace sv::test;

namespace {

/// Entries of directory `path` (not "." and "..").
std::vector<std::string> entries_of(const std::string& path) {
  std::vector<std::string> out;
  if (auto* dir = ::opendir(path.c_str())) {
    while (auto* e = ::readdir(dir)) {
      std::string name = e->d_name;
      if (name != "." && name != "..")
        out.push_back(name);
    }
    ::closedir(dir);
  }
  std::sort(out.begin(), out.end());
  return out;
}

/// Sandbox ids with a directory in `root` (their /tmp and /dev/shm
/// siblings folded in), but for those in `known`.
std::set<std::string> other_ids(const std::string& root,
                                const std::set<std::string>& known) {
  std::set<std::string> out;
  for (auto name : entries_of(root)) {
    for (auto* suffix : {".tmp", ".shm"}) {
      std::string s{suffix};
      if (name.size() > s.size() &&
          name.compare(name.size() - s.size(), s.size(), s) == 0)
        name.resize(name.size() - s.size());
    }
    if (known.count(name) == 0)
      out.insert(name);
  }
  return out;
}

struct pool_fixture : isolated_fixture {
  pool_fixture()
      : isolated_fixture([](local_provider_config& c) {
          c.warm_pool = 2;
          // Filled by the first create, as these tests count.
          c.warm_pool_start = false;
          // Rates decay per tick: with the default 250 ms, a pool whose
          // preparation takes seconds on a busy machine drains before it
          // is ready. An hour's tick keeps what the first create asked for.
          c.warm_pool_tick = std::chrono::hours{1};
        }) {
    // nop
  }

  local_registry_stats stats() { return local_registry_counters(*registry); }

  /// Waits until the pool holds a sandbox; returns its id.
  std::string pooled_id(const std::set<std::string>& live) {
    REQUIRE(eventually([&] { return stats().pooled >= 1; }));
    auto ids = other_ids(provider_cfg.root, live);
    REQUIRE(!ids.empty());
    return *ids.begin();
  }

  /// Nothing of sandbox `id` is left: directory, mounts, cgroups.
  void expect_no_trace(const std::string& id) {
    auto path = provider_cfg.root + "/" + id;
    CHECK(eventually([&] {
      return !path_exists(path) && !path_exists(path + ".tmp") &&
             !path_exists(path + ".shm") &&
             !path_exists(cgroup_dir("pids", id)) &&
             !path_exists(cgroup_dir("memory", id));
    }));
    CHECK(mounts_at_or_below(path).empty());
  }
};

} // namespace

TEST_CASE_METHOD(pool_fixture, "a create after the first is served from the "
                               "warm pool, fresh") {
  auto first = create();
  auto pooled = pooled_id({first.sandbox_id});
  auto second = create();
  CHECK(second.sandbox_id == pooled);
  auto s = stats();
  CHECK(s.pool_hits == 1);
  CHECK(s.pool_misses == 1);
  CHECK(s.created == 2);
  // Exactly as a fresh one: its own uid, empty, confined, and it runs.
  CHECK(uid_of(second) != uid_of(first));
  CHECK(entries_of(dir_of(second)).empty());
  CHECK(path_exists(cgroup_dir("pids", second.sandbox_id)));
  auto r =
    sh(second, "id -u; (ls -A /sandbox; ls -A /tmp) | wc -l; echo hi > f");
  CHECK(r.return_code == 0);
  CHECK(r.stdout_text ==
        std::to_string(uid_of(second)) + "\n" + std::to_string(0) + "\n");
  stop_and_expect_gone(first);
  stop_and_expect_gone(second);
}

TEST_CASE("warm_pool 0 prepares nothing ahead") {
  isolated_fixture f{[](local_provider_config& c) { c.warm_pool = 0; }};
  std::set<std::string> live;
  for (int i = 0; i < 3; ++i)
    live.insert(f.create().sandbox_id);
  auto s = local_registry_counters(*f.registry);
  CHECK(s.pool_hits == 0);
  CHECK(s.pool_misses == 0);
  CHECK(s.pool_prepared == 0);
  CHECK(s.pooled == 0);
  // Only the live sandboxes' directories (each with its /tmp and /dev/shm).
  CHECK(other_ids(f.provider_cfg.root, live).empty());
  CHECK(entries_of(f.provider_cfg.root).size() == 3 * 3);
}

TEST_CASE_METHOD(pool_fixture, "a dirty or dead pooled sandbox is destroyed, "
                               "never handed out") {
  std::set<std::string> live{create().sandbox_id};
  // Three ways to spoil one: a file in its directory, its tmpfs unmounted,
  // its pids cgroup removed.
  std::vector<std::function<void(const std::string&)>> spoil{
    [&](const std::string& id) {
      std::ofstream{provider_cfg.root + "/" + id + "/planted"} << "x";
    },
    [&](const std::string& id) {
      REQUIRE(::umount2((provider_cfg.root + "/" + id).c_str(), MNT_DETACH) ==
              0);
    },
    [&](const std::string& id) {
      REQUIRE(::rmdir(cgroup_dir("pids", id).c_str()) == 0);
    },
  };
  uint64_t discarded = 0;
  for (auto& f : spoil) {
    // Take the pool's whole content, at rest: no preparation in flight (on
    // a busy machine one posted but not started has no directory yet and
    // would be ready, unspoiled, when the create comes), and every
    // directory beside the live ones a pooled sandbox's.
    REQUIRE(eventually([&] {
      auto s = stats();
      return s.pooled >= 1 && s.pool_preparing == 0 &&
             other_ids(provider_cfg.root, live).size() == s.pooled;
    }));
    auto ids = other_ids(provider_cfg.root, live);
    for (auto& id : ids)
      f(id);
    auto h = create();
    CHECK(ids.count(h.sandbox_id) == 0);
    CHECK(entries_of(dir_of(h)).empty());
    discarded += ids.size();
    CHECK(stats().pool_discarded == discarded);
    for (auto& id : ids)
      expect_no_trace(id);
    live.insert(h.sandbox_id);
  }
  CHECK(stats().pool_hits == 0);
}

TEST_CASE_METHOD(pool_fixture, "shutdown destroys every pooled sandbox") {
  auto h = create();
  auto pooled = pooled_id({h.sandbox_id});
  shutdown_provider();
  CHECK(entries_of(provider_cfg.root).empty());
  CHECK(mounts_at_or_below(provider_cfg.root).empty());
  for (auto& id : {h.sandbox_id, pooled}) {
    CHECK(!path_exists(cgroup_dir("pids", id)));
    CHECK(!path_exists(cgroup_dir("memory", id)));
  }
}

TEST_CASE_METHOD(isolated_fixture,
                 "each sandbox has its own prepared network namespace, "
                 "loopback up, kept across its execs") {
  auto a = create();
  auto b = create();
  auto netns = [&](const sandbox_handle& h) {
    auto r = sh(h, "readlink /proc/self/ns/net");
    REQUIRE(r.return_code == 0);
    return r.stdout_text;
  };
  auto a1 = netns(a);
  auto a2 = netns(a);
  auto b1 = netns(b);
  char host[64] = {};
  REQUIRE(::readlink("/proc/self/ns/net", host, sizeof host - 1) > 0);
  CHECK(a1 == a2);
  CHECK(a1 != b1);
  CHECK(a1 != std::string{host} + "\n");
  // The loopback is up, as bwrap's --unshare-net leaves it: a runner may
  // talk to itself over 127.0.0.1.
  auto r =
    exec(a, exec_request{{"python3", "-c",
                          "import socket\n"
                          "s = socket.socket()\n"
                          "s.bind(('127.0.0.1', 0))\n"
                          "s.listen()\n"
                          "c = socket.create_connection(s.getsockname())\n"
                          "print('ok')\n"},
                         "",
                         {},
                         30,
                         ""});
  REQUIRE(r.value);
  INFO(r.value->stderr_text);
  CHECK(r.value->stdout_text == "ok\n");
  stop_and_expect_gone(a);
  stop_and_expect_gone(b);
}
