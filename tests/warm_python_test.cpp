// The warm interpreter (`warm_python`) with real sandboxes (bwrap, root,
// cgroup v1): a warm exec answers exactly what a cold one of the same
// script answers (argv, cwd, environment, sys.path, modules, descriptors,
// exit status, stdout and stderr, a log, a deadline), one interpreter serves
// one exec of one sandbox, an exec started otherwise runs cold, and nothing
// of one submission reaches another.
//
// Whether an exec ran warm is read from /proc/self/cmdline, the one thing a
// runner can see that differs: the warm interpreter was started with `-c`
// and its stub (docs/isolation.md, "Warm interpreter").

#include "isolation_fixture.hpp"

#include <string>
#include <thread>

using namespace sv;
using namespace sv::test;

namespace {

/// Prints what a runner can see of how it was started (minus how the
/// interpreter was started, written to the file named by argv[1]: "warm"
/// or "cold"), writes to stderr, exits with argv[2].
constexpr const char* probe_py = R"(import os, sys
cmd = open("/proc/self/cmdline", "rb").read()
with open(sys.argv[1], "w") as f:
    f.write("warm" if b"_sv_warm" in cmd else "cold")
print("argv", sys.argv)
print("orig_argv", sys.orig_argv)
print("executable", sys.executable)
print("cwd", os.getcwd())
print("path", sys.path)
print("env", sorted(os.environ.items()))
print("main", sorted(k for k in globals() if k not in ("cmd", "f")))
print("file", __file__, __cached__, type(__loader__).__name__, __spec__)
print("modules", sorted(sys.modules))
def target(fd):
    try:
        return os.readlink("/proc/self/fd/" + fd)[:5]
    except OSError:
        return "gone"
print("fds", sorted((fd, target(fd)) for fd in os.listdir("/proc/self/fd")))
print("uid", os.getuid(), os.getgid(), os.getgroups())
print("flags", sys.flags)
print("stdin", os.read(0, 10))
sys.stderr.write("to stderr\n")
if sys.argv[2] == "raise":
    raise ValueError("from the runner")
sys.exit(int(sys.argv[2]))
)";

struct warm_fixture : isolated_fixture {
  warm_fixture()
      : isolated_fixture([](local_provider_config& c) {
          c.warm_python = true;
          c.warm_pool = 3;
          c.warm_pool_start = true;
          // The pool must not drain while a busy machine runs the test.
          c.warm_pool_tick = std::chrono::hours{1};
        }) {
    // nop
  }

  sandbox_handle create_with_probe() {
    auto h = create();
    REQUIRE(upload(h, "calls/c1", {{"probe.py", probe_py}}).value);
    return h;
  }

  /// Runs the probe in calls/c1 (relative path), optionally with a log.
  exec_result probe(const sandbox_handle& h, const std::string& mode_file,
                    const std::string& exit_as, bool log = false,
                    env_map env = {}, const std::string& python = "python3") {
    auto r = exec(h, exec_request{{python, "probe.py", mode_file, exit_as},
                                  "calls/c1",
                                  std::move(env),
                                  30,
                                  log ? "calls/c1/" + mode_file + ".log" : ""});
    INFO(r.message());
    REQUIRE(r.value);
    return *r.value;
  }

  std::string mode(const sandbox_handle& h, const std::string& mode_file) {
    auto r = download(h, "calls/c1/" + mode_file);
    INFO(r.message());
    REQUIRE(r.value);
    return *r.value;
  }
};

std::unique_ptr<warm_fixture> make_warm() {
  auto why = isolation_unavailable();
  INFO(why);
  REQUIRE(why.empty());
  return std::make_unique<warm_fixture>();
}

/// The lines of `text` but those that name `a` or `b` (the mode files).
std::string without(const std::string& text, const std::string& a,
                    const std::string& b) {
  std::string out;
  size_t start = 0;
  while (start < text.size()) {
    auto end = text.find('\n', start);
    if (end == std::string::npos)
      end = text.size();
    auto line = text.substr(start, end - start);
    for (auto* name : {&a, &b}) {
      size_t pos = 0;
      while ((pos = line.find(*name, pos)) != std::string::npos)
        line.replace(pos, name->size(), "MODE");
    }
    out += line + "\n";
    start = end + 1;
  }
  return out;
}

} // namespace

TEST_CASE("a warm exec answers what a cold exec of the same script answers") {
  auto f = make_warm();
  for (auto exit_as : {"3", "0", "raise"}) {
    for (bool log : {false, true}) {
      INFO("exit as " << exit_as << ", log " << log);
      auto h = f->create_with_probe();
      auto warm = f->probe(h, "w", exit_as, log);
      auto cold = f->probe(h, "c", exit_as, log);
      INFO("warm: " << warm.stdout_text << warm.stderr_text << warm.message);
      INFO("cold: " << cold.stdout_text << cold.stderr_text << cold.message);
      CHECK(f->mode(h, "w") == "warm");
      CHECK(f->mode(h, "c") == "cold");
      CHECK(warm.error_type == cold.error_type);
      CHECK(warm.return_code == cold.return_code);
      CHECK(warm.return_code == (exit_as == std::string{"raise"} ? 1
                                 : exit_as == std::string{"0"}   ? 0
                                                                 : 3));
      CHECK(warm.stderr_text == cold.stderr_text);
      // With a log, all of it is in the log; else in stdout and stderr.
      auto out = log ? f->mode(h, "w.log") : warm.stdout_text;
      auto cold_out = log ? f->mode(h, "c.log") : cold.stdout_text;
      CHECK(without(out, "'w'", "'c'") == without(cold_out, "'w'", "'c'"));
      CHECK(out.find("cwd /sandbox/calls/c1\n") != std::string::npos);
      CHECK(out.find("path ['/sandbox/calls/c1', ") != std::string::npos);
      CHECK(out.find("('PWD', '/sandbox/calls/c1')") != std::string::npos);
      CHECK(out.find("stdin b''\n") != std::string::npos);
      auto err = log ? out : warm.stderr_text;
      CHECK(err.find("to stderr\n") != std::string::npos);
      if (exit_as == std::string{"raise"})
        CHECK(err.find("Traceback (most recent call last):\n  File "
                       "\"/sandbox/calls/c1/probe.py\", line ") !=
              std::string::npos);
      CHECK(err.find("_sv_warm") == std::string::npos);
      f->stop_and_expect_gone(h);
    }
  }
}

TEST_CASE("a warm exec over its deadline is killed as a cold one is") {
  auto f = make_warm();
  auto h = f->create();
  REQUIRE(f->upload(h, "",
                    {{"spin.py", "import os, subprocess, sys\n"
                                 "subprocess.Popen(['sleep', '60'])\n"
                                 "print(b'_sv_warm' in open("
                                 "'/proc/self/cmdline', 'rb').read(),"
                                 " flush=True)\n"
                                 "while True: pass\n"}})
            .value);
  auto started = std::chrono::steady_clock::now();
  auto r = f->exec(h, exec_request{{"python3", "spin.py"}, "", {}, 1, ""});
  auto took = std::chrono::steady_clock::now() - started;
  REQUIRE(r.value);
  CHECK(r.value->error_type == exec_error_type::timeout);
  CHECK(r.value->stdout_text == "True\n");
  CHECK(took < std::chrono::seconds{10});
  // Nothing of it is left: the sandbox's cgroups are empty.
  auto procs = read_text(cgroup_dir("pids", h.sandbox_id) + "/cgroup.procs");
  CHECK(procs.empty());
  f->stop_and_expect_gone(h);
}

TEST_CASE("a warm interpreter serves one exec; the next ones run cold") {
  auto f = make_warm();
  auto a = f->create_with_probe();
  auto b = f->create_with_probe();
  CHECK(f->probe(a, "1", "0").return_code == 0);
  CHECK(f->probe(a, "2", "0").return_code == 0);
  CHECK(f->probe(a, "3", "0").return_code == 0);
  CHECK(f->probe(b, "1", "0").return_code == 0);
  CHECK(f->mode(a, "1") == "warm");
  CHECK(f->mode(a, "2") == "cold");
  CHECK(f->mode(a, "3") == "cold");
  // Another sandbox has its own.
  CHECK(f->mode(b, "1") == "warm");
  // No python of `a` is left but what an exec runs.
  CHECK(read_text(cgroup_dir("pids", a.sandbox_id) + "/cgroup.procs").empty());
  f->stop_and_expect_gone(a);
  f->stop_and_expect_gone(b);
}

TEST_CASE("an exec whose environment or python differs runs cold, and the "
          "warm interpreter is gone") {
  auto f = make_warm();
  SECTION("a variable of the exec") {
    auto h = f->create_with_probe();
    auto r = f->probe(h, "1", "0", false, {{"PYTHONHASHSEED", "0"}});
    CHECK(r.return_code == 0);
    CHECK(r.stdout_text.find("('PYTHONHASHSEED', '0')") != std::string::npos);
    CHECK(f->mode(h, "1") == "cold");
    CHECK(f->probe(h, "2", "0").return_code == 0);
    CHECK(f->mode(h, "2") == "cold");
    f->stop_and_expect_gone(h);
  }
  SECTION("a variable of the spec") {
    sandbox_spec spec;
    spec.env = {{"PYTHONOPTIMIZE", "1"}};
    auto h = f->create_with(spec);
    REQUIRE(f->upload(h, "calls/c1", {{"probe.py", probe_py}}).value);
    auto r = f->probe(h, "1", "0");
    CHECK(r.stdout_text.find("optimize=1") != std::string::npos);
    CHECK(f->mode(h, "1") == "cold");
    f->stop_and_expect_gone(h);
  }
  SECTION("another workdir") {
    sandbox_spec spec;
    spec.workdir = "/tmp/w";
    auto h = f->create_with(spec);
    REQUIRE(f->upload(h, "calls/c1", {{"probe.py", probe_py}}).value);
    auto r = f->probe(h, "1", "0");
    CHECK(r.stdout_text.find("cwd /tmp/w/calls/c1\n") != std::string::npos);
    CHECK(f->mode(h, "1") == "cold");
    f->stop_and_expect_gone(h);
  }
  SECTION("the interpreter's own options") {
    auto h = f->create_with_probe();
    auto r = f->exec(
      h, exec_request{
           {"python3", "-S", "probe.py", "1", "0"}, "calls/c1", {}, 30, ""});
    REQUIRE(r.value);
    CHECK(r.value->return_code == 0);
    CHECK(f->mode(h, "1") == "cold");
    f->stop_and_expect_gone(h);
  }
  SECTION("another program named by path") {
    auto h = f->create_with_probe();
    auto r = f->probe(h, "1", "0", false, {}, "/bin/sh");
    (void)r;
    // sh runs probe.py as a shell script: whatever it says, no python of
    // the sandbox answered it; the warm one is still there for python.
    CHECK(f->probe(h, "2", "0").return_code == 0);
    CHECK(f->mode(h, "2") == "warm");
    f->stop_and_expect_gone(h);
  }
  SECTION("a user site in the workdir") {
    auto h = f->create_with_probe();
    REQUIRE(f->upload(h, ".local", {{"x", ""}}).value);
    CHECK(f->probe(h, "1", "0").return_code == 0);
    CHECK(f->mode(h, "1") == "cold");
    f->stop_and_expect_gone(h);
  }
}

TEST_CASE("nothing of one submission reaches another's warm interpreter") {
  auto f = make_warm();
  constexpr const char* leak_py = R"(import os, sys
cmd = open("/proc/self/cmdline", "rb").read()
print("warm" if b"_sv_warm" in cmd else "cold")
print(sorted(os.listdir("/tmp")), sorted(os.listdir("/dev/shm")),
      sorted(os.listdir(".")))
print(len([p for p in os.listdir("/proc") if p.isdigit()]))
print(hash("sv-warm"), os.urandom(8).hex())
print(sorted(k for k in globals() if not k.startswith("__")))
print(sys.modules.get("secret_mod"), os.environ.get("SECRET"))
open("/tmp/secret-" + sys.argv[1], "w").write("x")
open("/dev/shm/secret-" + sys.argv[1], "w").write("x")
os.environ["SECRET"] = "1"
import types
sys.modules["secret_mod"] = types.ModuleType("secret_mod")
SECRET = 1
)";
  auto a = f->create();
  auto b = f->create();
  REQUIRE(f->upload(a, "", {{"leak.py", leak_py}}).value);
  REQUIRE(f->upload(b, "", {{"leak.py", leak_py}}).value);
  auto ra =
    f->exec(a, exec_request{{"python3", "leak.py", "a"}, "", {}, 30, ""});
  auto rb =
    f->exec(b, exec_request{{"python3", "leak.py", "b"}, "", {}, 30, ""});
  REQUIRE(ra.value);
  REQUIRE(rb.value);
  INFO(ra.value->stdout_text << ra.value->stderr_text);
  INFO(rb.value->stdout_text << rb.value->stderr_text);
  auto expect_clean = [](const std::string& out) {
    auto lines = std::vector<std::string>{};
    size_t start = 0;
    while (start < out.size()) {
      auto end = out.find('\n', start);
      lines.push_back(out.substr(start, end - start));
      start = end + 1;
    }
    REQUIRE(lines.size() == 6);
    CHECK(lines[0] == "warm");
    CHECK(lines[1] == "[] [] ['leak.py']");
    // bwrap's init, the runner: nothing of another sandbox.
    CHECK(lines[2] == "2");
    CHECK(lines[4] == "['cmd', 'os', 'sys']");
    CHECK(lines[5] == "None None");
    return lines[3];
  };
  CHECK(ra.value->return_code == 0);
  CHECK(rb.value->return_code == 0);
  // Each its own hash seed and random source: not one process's state.
  CHECK(expect_clean(ra.value->stdout_text) !=
        expect_clean(rb.value->stdout_text));
  f->stop_and_expect_gone(a);
  f->stop_and_expect_gone(b);
}

TEST_CASE("interpreters started with the provider outlive the thread that "
          "made it") {
  // bwrap's --die-with-parent follows the spawning thread.
  REQUIRE(isolation_unavailable().empty());
  std::unique_ptr<warm_fixture> f;
  std::thread{[&f] { f = std::make_unique<warm_fixture>(); }}.join();
  // Served from the pool filled at start, its interpreter still waiting.
  auto h = f->create_with_probe();
  CHECK(f->probe(h, "1", "0").return_code == 0);
  CHECK(f->mode(h, "1") == "warm");
  f->stop_and_expect_gone(h);
}
