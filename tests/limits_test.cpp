// Adversarial tests of the per-sandbox limits (processes, memory, output,
// disk, TTL) and of the start-up reaper, with real processes in bwrap mode.

#include "isolation_fixture.hpp"
#include "providers/local/detail/host/cgroups.hpp"
#include "providers/local/detail/host/pidfd.hpp"

#include <caf/send.hpp>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/mount.h>

using namespace sv;
using namespace sv::test;

namespace {

uint64_t read_number(const std::string& path) {
  std::istringstream in{read_text(path)};
  uint64_t n = 0;
  in >> n;
  return n;
}

/// Waits (inotify, no polling) until `name` in directory `dir` exists (or,
/// with `gone`, no longer exists).
bool wait_for_file(const std::string& dir, const std::string& name,
                   bool gone = false) {
  detail::unique_fd fd{::inotify_init1(IN_CLOEXEC | IN_NONBLOCK)};
  REQUIRE(fd);
  REQUIRE(::inotify_add_watch(fd.get(), dir.c_str(),
                              IN_CLOSE_WRITE | IN_MOVED_TO | IN_DELETE) >= 0);
  auto until = std::chrono::steady_clock::now() + deadline;
  while (path_exists(dir + "/" + name) == gone) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      until - std::chrono::steady_clock::now());
    pollfd p{fd.get(), POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0)
      return false;
    char buf[4096];
    while (::read(fd.get(), buf, sizeof buf) > 0) {
      // drained; the loop checks the file itself
    }
  }
  return true;
}

constexpr const char* fork_flood = R"(import os, time
n = 0
try:
    while True:
        if os.fork() == 0:
            time.sleep(1000)
            os._exit(0)
        n += 1
except OSError as e:
    with open('flood.tmp', 'w') as f:
        f.write('%d %d' % (n, e.errno))
    os.rename('flood.tmp', 'flooded')
time.sleep(1000)
)";

} // namespace

TEST_CASE("a fork flood stops at the process limit and hurts no one else") {
  auto f =
    make_isolated([](local_provider_config& c) { c.max_processes = 64; });
  auto flood = f->create();
  auto bystander = f->create();
  REQUIRE(f->upload(flood, "", {{"flood.py", fork_flood}}).value);
  auto pending = f->self->request(
    f->provider, deadline, exec_atom::value, flood,
    exec_request{{"python3", "flood.py"}, "", {}, 60, "runner.log"});
  REQUIRE(wait_for_file(f->dir_of(flood), "flooded"));
  auto report = f->download(flood, "flooded");
  REQUIRE(report.value);
  std::istringstream in{*report.value};
  int forked = 0;
  int err = 0;
  in >> forked >> err;
  CHECK(err == EAGAIN);
  CHECK(forked > 32);
  CHECK(forked < 64);
  auto pids = cgroup_dir("pids", flood.sandbox_id);
  CHECK(read_number(pids + "/pids.current") <= 64);
  if (path_exists(pids + "/pids.peak"))
    CHECK(read_number(pids + "/pids.peak") <= 64);
  // Others still start processes: the other sandbox and the host.
  CHECK(f->sh(bystander, "sh -c 'echo ok'").stdout_text == "ok\n");
  CHECK(std::system("true") == 0);
  f->stop_and_expect_gone(flood);
  exec_result r;
  pending.receive([&](exec_result& x) { r = std::move(x); },
                  [&](caf::error& e) { FAIL(describe(e)); });
  CHECK(r.error_type == exec_error_type::killed);
  CHECK(r.message == "killed by signal 9 (SIGKILL) when its sandbox was "
                     "stopped");
  f->stop_and_expect_gone(bystander);
}

TEST_CASE("a memory hog is killed by the OOM killer at its limit") {
  auto f = make_isolated();
  sandbox_spec spec;
  spec.resources.memory_mib = 256;
  auto h = f->create_with(spec);
  // 4 GiB in 64 MiB steps, every page written.
  auto r = f->exec(h, exec_request{{"python3", "-c",
                                    "chunks = []\n"
                                    "for i in range(64):\n"
                                    "    chunks.append(b'x' * (64 << 20))\n"
                                    "print('ALLOCATED')\n"},
                                   "",
                                   {},
                                   60,
                                   "runner.log"});
  REQUIRE(r.value);
  CHECK(r.value->error_type == exec_error_type::oom);
  CHECK(r.value->return_code == 137);
  CHECK(r.value->message ==
        "killed by the kernel OOM killer at its 256 MiB memory limit");
  CHECK(r.value->log_tail.find("ALLOCATED") == std::string::npos);
  auto memory = cgroup_dir("memory", h.sandbox_id);
  CHECK(read_number(memory + "/memory.max_usage_in_bytes") <= uint64_t{256}
                                                                << 20);
  f->stop_and_expect_gone(h);
}

TEST_CASE("a child killed for memory is reported beside a normal exit") {
  auto f = make_isolated();
  sandbox_spec spec;
  spec.resources.memory_mib = 128;
  auto h = f->create_with(spec);
  auto r = f->sh(h, "python3 -c \"x = b'x' * (1 << 30)\"; echo status $?");
  CHECK(r.error_type == exec_error_type::none);
  CHECK(r.stdout_text == "status 137\n");
  CHECK(r.message == "exited with status 0; the kernel OOM killer killed 1 "
                     "process of the sandbox at its 128 MiB memory limit");
  f->stop_and_expect_gone(h);
}

TEST_CASE("an output flood of gigabytes finishes and the log keeps the cap") {
  auto f = make_isolated();
  auto h = f->create();
  auto started = std::chrono::steady_clock::now();
  auto r = f->exec(h, exec_request{{"python3", "-c",
                                    "import sys\n"
                                    "b = b'y' * (1 << 20)\n"
                                    "for i in range(2048):\n"
                                    "    sys.stdout.buffer.write(b)\n"
                                    "sys.stdout.buffer.flush()\n"
                                    "print('THE END')\n"},
                                   "",
                                   {},
                                   120,
                                   "runner.log"});
  auto seconds =
    std::chrono::duration<double>(std::chrono::steady_clock::now() - started)
      .count();
  WARN("2 GiB of output in " << seconds << " s ("
                             << 2048 / std::max(seconds, 1e-3) << " MiB/s)");
  REQUIRE(r.value);
  CHECK(r.value->error_type == exec_error_type::none);
  CHECK(r.value->return_code == 0);
  auto total = (uint64_t{2048} << 20) + 8;
  CHECK(r.value->message ==
        "exited with status 0; output truncated: " +
          std::to_string(total - (1024 * 1024 - 2256) - 2000) + " of " +
          std::to_string(total) + " bytes dropped");
  CHECK(r.value->log_tail.size() == log_tail_bytes);
  CHECK(r.value->log_tail.substr(log_tail_bytes - 8) == "THE END\n");
  auto log = f->download(h, "runner.log");
  REQUIRE(log.value);
  CHECK(log.value->size() <= 1024 * 1024);
  CHECK(log.value->find("bytes of output dropped here") != std::string::npos);
  f->stop_and_expect_gone(h);
}

TEST_CASE("captured output is capped and a flood past the deadline stops") {
  auto f = make_isolated(
    [](local_provider_config& c) { c.max_log_bytes = 64 * 1024; });
  auto h = f->create();
  auto r = f->sh(h, "head -c 10000000 /dev/zero; echo err >&2");
  CHECK(r.error_type == exec_error_type::none);
  CHECK(r.stdout_text.size() == 64 * 1024);
  CHECK(r.stderr_text == "err\n");
  CHECK(r.message == "exited with status 0; stdout truncated: " +
                       std::to_string(10000000 - 64 * 1024) +
                       " of 10000000 bytes dropped");
  auto flood = f->exec(h, exec_request{{"yes"}, "", {}, 1, "yes.log"});
  REQUIRE(flood.value);
  CHECK(flood.value->error_type == exec_error_type::timeout);
  CHECK(read_text(f->dir_of(h) + "/yes.log").size() <= 64 * 1024);
  f->stop_and_expect_gone(h);
}

TEST_CASE("a sandbox cannot write past its disk limit") {
  auto f = make_isolated();
  sandbox_spec spec;
  spec.resources.disk_gib = 1.0 / 16; // 64 MiB
  auto h = f->create_with(spec);
  auto r = f->sh(h, "dd if=/dev/zero of=big bs=1M count=200 2>&1 | head -1");
  INFO(r.message << ": " << r.stdout_text << r.stderr_text);
  CHECK(r.stdout_text.find("No space left on device") != std::string::npos);
  struct stat st;
  REQUIRE(::stat((f->dir_of(h) + "/big").c_str(), &st) == 0);
  CHECK(static_cast<uint64_t>(st.st_size) <= uint64_t{64} << 20);
  f->stop_and_expect_gone(h);
}

TEST_CASE("a sandbox past its TTL is killed and removed, cgroups and all") {
  auto f = make_isolated();
  sandbox_spec spec;
  spec.ttl_s = 1;
  auto h = f->create_with(spec);
  auto uid = f->uid_of(h);
  auto r = f->exec(h, exec_request{{"sleep", "1000"}, "", {}, 30, ""});
  if (r.value)
    CHECK(r.value->message ==
          "killed by signal 9 (SIGKILL) when its sandbox was stopped");
  else
    CHECK(r.code() == code(provider_errc::no_such_sandbox));
  // A later call finds no sandbox; the directory goes last.
  CHECK(f->stop(h).code() == code(provider_errc::no_such_sandbox));
  REQUIRE(wait_for_file(f->root.path, h.sandbox_id, true));
  f->expect_gone(h.sandbox_id, uid);
}

TEST_CASE("a stop that really fails is retried until the sandbox is gone") {
  // A cgroup below the sandbox's own makes its removal fail (EBUSY), as a
  // busy host resource would.
  auto f = make_isolated([](local_provider_config& c) {
    c.stop_attempts = 50;
    c.stop_retry_delay = std::chrono::milliseconds{10};
  });
  auto h = f->create();
  auto uid = f->uid_of(h);
  auto blocker = cgroup_dir("pids", h.sandbox_id) + "/blocker";
  REQUIRE(::mkdir(blocker.c_str(), 0755) == 0);
  auto r = f->stop(h);
  CHECK(r.code() == code(provider_errc::io_error));
  CHECK(r.message().find("cannot remove cgroup") != std::string::npos);
  // Still known, its uid still held: nothing reuses it while a cgroup is
  // left; the registry tries again by itself.
  auto st = local_registry_counters(*f->registry);
  CHECK(st.known == 1);
  CHECK(f->exec(h, exec_request{{"true"}, "", {}, 30, ""}).code() ==
        code(provider_errc::no_such_sandbox));
  REQUIRE(eventually(
    [&] { return local_registry_counters(*f->registry).failed_stops >= 2; }));
  REQUIRE(::rmdir(blocker.c_str()) == 0);
  REQUIRE(eventually(
    [&] { return local_registry_counters(*f->registry).stopped == 1; }));
  st = local_registry_counters(*f->registry);
  CHECK(st.known == 0);
  CHECK(st.stop_failed == 0);
  f->expect_gone(h.sandbox_id, uid);
  CHECK(f->stop(h).code() == code(provider_errc::no_such_sandbox));
}
