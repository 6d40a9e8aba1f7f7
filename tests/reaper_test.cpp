// The start-up reaper with real leftovers, and a (hidden) measurement of
// what bwrap adds to the start of a command.

#include "isolation_fixture.hpp"
#include "providers/local/detail/host/pidfd.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/mount.h>
#include <sys/wait.h>

using namespace sv;
using namespace sv::test;

namespace {

/// A process left behind by a "dead provider": marked, in `cgroup_dirs`.
struct leftover_process {
  pid_t pid = -1;
  detail::unique_fd pidfd;

  leftover_process(const std::string& id,
                   const std::vector<std::string>& cgroup_dirs) {
    std::vector<detail::unique_fd> procs;
    detail::spawn_spec spec;
    spec.program = "/bin/sleep";
    spec.argv = {"sleep", "1000"};
    spec.env = {"SV_SANDBOX_ID=" + id};
    for (auto& dir : cgroup_dirs) {
      procs.emplace_back(
        ::open((dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
      REQUIRE(procs.back());
      spec.cgroup_procs_fds.push_back(procs.back().get());
    }
    int err = 0;
    int fd = -1;
    pid = detail::spawn_process(spec, err, &fd);
    REQUIRE(pid > 0);
    pidfd.reset(fd);
  }

  ~leftover_process() {
    if (pid > 0 && process_alive(pid))
      ::kill(pid, SIGKILL);
    if (pid > 0)
      ::waitpid(pid, nullptr, 0);
  }

  /// Whether it died within the test deadline (a pidfd turns readable).
  bool died() const {
    pollfd p{pidfd.get(), POLLIN, 0};
    return ::poll(&p, 1, 30000) == 1;
  }
};

} // namespace

TEST_CASE("start-up reaps what a dead provider left, and only that") {
  temp_dir shared_root;
  auto use_root = [&](local_provider_config& c) { c.root = shared_root.path; };
  // A live provider with a sandbox in the shared root.
  isolated_fixture live{use_root};
  auto kept = live.create();
  // What a crashed provider left: its id has this pid but another start
  // time, as after a restart that reused the pid.
  auto id = "sb-" + std::to_string(::getpid()) + "-1-1-deadbeef";
  auto dir = shared_root.path + "/" + id;
  REQUIRE(::mkdir(dir.c_str(), 0700) == 0);
  REQUIRE(::mount("sv-test", dir.c_str(), "tmpfs", 0, "size=1m") == 0);
  std::vector<std::string> cgroups;
  for (auto controller : {"pids", "memory"}) {
    cgroups.push_back(cgroup_dir(controller, id));
    REQUIRE(::mkdir(cgroups.back().c_str(), 0755) == 0);
  }
  leftover_process in_cgroup{id, cgroups};
  leftover_process marked_only{id, {}};
  // A new provider on the same root reaps the leftovers.
  isolated_fixture restarted{use_root};
  CHECK(in_cgroup.died());
  CHECK(marked_only.died());
  CHECK(!path_exists(dir));
  CHECK(mounts_at_or_below(dir).empty());
  for (auto& cg : cgroups)
    CHECK(!path_exists(cg));
  // The live provider's sandbox is untouched and works.
  CHECK(path_exists(live.dir_of(kept)));
  CHECK(path_exists(cgroup_dir("pids", kept.sandbox_id)));
  CHECK(live.sh(kept, "echo alive").stdout_text == "alive\n");
  live.stop_and_expect_gone(kept);
}

TEST_CASE("what bwrap adds to the start of a command", "[.][bench]") {
  constexpr int runs = 50;
  auto measure = [](const char* mode, std::vector<std::string> argv) {
    fixture f{[mode](local_provider_config& c) { c.isolation = mode; }};
    auto h = f.create();
    f.exec(h, exec_request{argv, "", {}, 30, ""}); // warm up
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < runs; ++i)
      REQUIRE(f.exec(h, exec_request{argv, "", {}, 30, ""}).value);
    auto ms = std::chrono::duration<double, std::milli>(
                std::chrono::steady_clock::now() - start)
                .count() /
              runs;
    REQUIRE(f.stop(h).value);
    return ms;
  };
  for (auto argv : {std::vector<std::string>{"/bin/true"},
                    std::vector<std::string>{"python3", "-c", "pass"}}) {
    auto none = measure("none", argv);
    auto bwrap = measure("bwrap", argv);
    WARN(argv.front() << ": none " << none << " ms, bwrap " << bwrap
                      << " ms per exec over " << runs << " runs (ratio "
                      << bwrap / none << ")");
  }
}
