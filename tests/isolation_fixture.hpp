#pragma once

// A local provider in bwrap mode with its cgroups, for the adversarial
// tests. Where bubblewrap, root or cgroup v1 are unavailable the suites do
// not run at all: their main (isolation_main.cpp) exits with
// `skip_return_code`, which ctest reports as skipped. On a machine set up by
// scripts/setup.sh as root they run.

#include "local_provider_fixture.hpp"
#include "providers/local/detail/host/cgroups.hpp"
#include "providers/local/detail/host/process.hpp"
#include "providers/local/detail/host/unique_fd.hpp"

#include <fstream>
#include <memory>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace sv::test {

/// Where the provider puts its cgroups (the default `cgroup_parent`).
inline std::string cgroup_dir(const std::string& controller,
                              const std::string& id) {
  return "/sys/fs/cgroup/" + controller + "/sv-sandboxes/" + id;
}

inline bool path_exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

/// What a test binary returns when it cannot run here (ctest's
/// SKIP_RETURN_CODE).
inline constexpr int skip_return_code = 77;

/// Why the bwrap tests cannot run here, or "".
inline std::string isolation_unavailable() {
  if (::geteuid() != 0)
    return "not running as root (per-sandbox uids, tmpfs and cgroups need "
           "root)";
  if (detail::find_program("bwrap", "/usr/local/bin:/usr/bin:/bin").empty())
    return "bwrap not installed (scripts/setup.sh installs bubblewrap)";
  for (auto controller : {"pids", "memory"})
    if (!path_exists(std::string{"/sys/fs/cgroup/"} + controller +
                     "/cgroup.procs"))
      return std::string{"no cgroup v1 "} + controller + " hierarchy";
  return {};
}

/// Mount points at or below `path`.
inline std::vector<std::string> mounts_at_or_below(const std::string& path) {
  std::vector<std::string> out;
  std::ifstream in{"/proc/self/mountinfo"};
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields{line};
    std::string skip, point;
    fields >> skip >> skip >> skip >> skip >> point;
    if (point == path || point.rfind(path + "/", 0) == 0)
      out.push_back(point);
  }
  return out;
}

/// Pids of processes whose real uid is `uid`.
inline std::vector<pid_t> processes_of_uid(uid_t uid) {
  return detail::find_processes([uid](pid_t p) {
    std::istringstream in{read_text("/proc/" + std::to_string(p) + "/status")};
    std::string key;
    while (in >> key)
      if (key == "Uid:") {
        long real = -1;
        in >> real;
        return real == static_cast<long>(uid);
      }
    return false;
  });
}

struct isolated_fixture : fixture {
  explicit isolated_fixture(
    std::function<void(local_provider_config&)> tweak = {})
      : fixture([&](local_provider_config& c) {
          c.isolation = "bwrap";
          // A uid range of this test process's own: tests run in parallel
          // (ctest -j) would otherwise reuse a uid another test just
          // released, and "no process of the sandbox's uid is left" would
          // see that other test's processes.
          c.uid_base = 1000000 + static_cast<uint64_t>(::getpid()) * 16;
          c.uid_count = 16;
          if (tweak)
            tweak(c);
        }) {
    // nop
  }

  /// Creates a sandbox from `spec`.
  sandbox_handle create_with(sandbox_spec spec) {
    auto r = ask<sandbox_handle>(create_atom::value, spec);
    INFO(r.message());
    REQUIRE(r.value);
    return *r.value;
  }

  /// The uid the sandbox's processes run as (its directory's owner).
  uid_t uid_of(const sandbox_handle& h) const {
    struct stat st;
    REQUIRE(::stat(dir_of(h).c_str(), &st) == 0);
    return st.st_uid;
  }

  /// Stops `h` and checks that nothing of it is left: no process (by
  /// cgroup, marker or uid), no directory, mount or cgroup.
  void stop_and_expect_gone(const sandbox_handle& h) {
    auto uid = uid_of(h);
    auto r = stop(h);
    INFO(r.message());
    CHECK(r.value);
    expect_gone(h.sandbox_id, uid);
  }

  void expect_gone(const std::string& id, uid_t uid) const {
    for (auto* suffix : {"", ".tmp", ".shm"}) {
      CHECK(!path_exists(provider_cfg.root + "/" + id + suffix));
      CHECK(mounts_at_or_below(provider_cfg.root + "/" + id + suffix).empty());
    }
    for (auto controller : {"pids", "memory", "cpu"})
      CHECK(!path_exists(cgroup_dir(controller, id)));
    CHECK(processes_with_env_prefix("SV_SANDBOX_ID=" + id).empty());
    CHECK(processes_of_uid(uid).empty());
  }
};

/// A provider in bwrap mode. The binary's main has checked that it can run.
inline std::unique_ptr<isolated_fixture>
make_isolated(std::function<void(local_provider_config&)> tweak = {}) {
  auto why = isolation_unavailable();
  INFO(why);
  REQUIRE(why.empty());
  return std::make_unique<isolated_fixture>(std::move(tweak));
}

} // namespace sv::test
