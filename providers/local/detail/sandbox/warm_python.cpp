#include "providers/local/detail/sandbox/warm_python.hpp"

#include "providers/local/detail/host/pidfd.hpp"
#include "providers/local/detail/host/spawn.hpp"
#include "providers/local/detail/sandbox/launch_plan.hpp"
#include "providers/local/detail/sandbox/sandbox.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

namespace sv::detail {

namespace {

/// How long a discarded interpreter may take to die after SIGKILL.
constexpr int reap_wait_ms = 5000;

/// Pipes: the provider's end non-blocking, the child's blocking, both
/// close-on-exec (spawn places the child's on 0..3).
bool make_pipe(unique_fd& rd, unique_fd& wr, bool read_end_async) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0)
    return false;
  rd.reset(p[0]);
  wr.reset(p[1]);
  auto& mine = read_end_async ? rd : wr;
  ::fcntl(mine.get(), F_SETFL, O_NONBLOCK);
  return true;
}

} // namespace

// The interpreter's `-c`. It reads its instructions (NUL-separated: cwd,
// "1" when stderr joins stdout, the number of arguments, the arguments)
// from stdin until EOF, puts /dev/null on stdin, sets sys.argv,
// sys.orig_argv, sys.path[0] (the script's real directory), the cwd and
// __main__'s __file__, __loader__ and __cached__ as `python script` does,
// then runs the script in __main__ with its own names gone. An uncaught
// exception is printed without the stub's frame (exit 1); a syntax error
// as python prints it. What it cannot mimic (a file it cannot read, a zip
// or a directory as the script, source python refuses to compile) it
// leaves to the interpreter itself: it execs `python script args`.
const char* warm_python_stub() {
  return "def _sv_warm():\n"
         "    import os, sys\n"
         "    b = bytearray()\n"
         "    while True:\n"
         "        c = os.read(0, 65536)\n"
         "        if not c:\n"
         "            break\n"
         "        b += c\n"
         "    if not b:\n"
         "        os._exit(0)\n"
         "    f = [os.fsdecode(x) for x in bytes(b).split(b\"\\0\")]\n"
         "    n = int(f[2])\n"
         "    argv = f[3:3 + n]\n"
         "    fd = os.open(\"/dev/null\", os.O_RDONLY)\n"
         "    os.dup2(fd, 0)\n"
         "    os.close(fd)\n"
         "    if f[1] == \"1\":\n"
         "        os.dup2(1, 2)\n"
         "    os.chdir(f[0])\n"
         "    if \"PWD\" in os.environ:\n"
         "        os.environ[\"PWD\"] = f[0]\n"
         "    path = argv[0]\n"
         "    if not path.startswith(\"/\"):\n"
         "        path = os.getcwd() + \"/\" + path\n"
         "    sys.argv = argv\n"
         "    sys.orig_argv = sys.orig_argv[:1] + argv\n"
         "    d = sys.modules[\"__main__\"].__dict__\n"
         "    del d[\"_sv_warm\"]\n"
         "    try:\n"
         "        with open(path, \"rb\") as fh:\n"
         "            src = fh.read()\n"
         "    except OSError:\n"
         "        os.execv(sys.orig_argv[0], sys.orig_argv)\n"
         "    if b\"PK\\x05\\x06\" in src:\n"
         "        os.execv(sys.orig_argv[0], sys.orig_argv)\n"
         "    sys.path[0] = os.path.dirname(os.path.realpath(path))\n"
         "    d[\"__loader__\"] = "
         "sys.modules[\"_frozen_importlib_external\"].SourceFileLoader(\"__"
         "main__\", path)\n"
         "    d[\"__file__\"] = path\n"
         "    d[\"__cached__\"] = None\n"
         "    try:\n"
         "        code = compile(src, path, \"exec\", dont_inherit=True)\n"
         "    except SyntaxError as e:\n"
         "        e.__traceback__ = None\n"
         "        sys.excepthook(type(e), e, None)\n"
         "        sys.exit(1)\n"
         "    except BaseException:\n"
         "        os.execv(sys.orig_argv[0], sys.orig_argv)\n"
         "    del b, c, f, n, argv, fd, src, fh\n"
         "    try:\n"
         "        exec(code, d)\n"
         "    except SystemExit:\n"
         "        raise\n"
         "    except BaseException as e:\n"
         "        try:\n"
         "            sys.stdout.flush()\n"
         "        except BaseException:\n"
         "            pass\n"
         "        t = e.__traceback__.tb_next\n"
         "        e.__traceback__ = t\n"
         "        sys.excepthook(type(e), e, t)\n"
         "        sys.exit(1)\n"
         "_sv_warm()\n";
}

warm_python::~warm_python() {
  if (pid <= 0)
    return;
  ::kill(-pid, SIGKILL);
  if (pidfd) {
    pollfd p{pidfd.get(), POLLIN, 0};
    ::poll(&p, 1, reap_wait_ms);
    siginfo_t info{};
    ::waitid(static_cast<idtype_t>(P_PIDFD), pidfd.get(), &info,
             WEXITED | WNOHANG);
  }
}

bool warm_python::waiting() const {
  if (pid <= 0 || !pidfd)
    return false;
  pollfd p{pidfd.get(), POLLIN, 0};
  return ::poll(&p, 1, 0) == 0;
}

bool warm_python::hand_over(const std::string& cwd,
                            const std::vector<std::string>& argv,
                            bool merge_stderr) {
  std::string text = cwd;
  text.push_back('\0');
  text += merge_stderr ? "1" : "0";
  text.push_back('\0');
  text += std::to_string(argv.size());
  for (auto& a : argv) {
    if (a.find('\0') != std::string::npos ||
        cwd.find('\0') != std::string::npos)
      return false;
    text.push_back('\0');
    text += a;
  }
  // All of it at once into the pipe (non-blocking): what does not fit runs
  // cold. A dead reader must not kill the service with SIGPIPE.
  sigset_t pipe_set;
  sigset_t old;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
  auto n = ::write(control.get(), text.data(), text.size());
  int err = errno;
  if (n < 0 && err == EPIPE) {
    timespec zero{};
    ::sigtimedwait(&pipe_set, nullptr, &zero);
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (n != static_cast<ssize_t>(text.size()))
    return false;
  control.reset(); // EOF: it runs
  return true;
}

std::unique_ptr<warm_python> start_warm_python(local_sandbox& sb,
                                               const exec_settings& cfg,
                                               const std::string& workdir) {
  exec_request req;
  req.argv = {cfg.python_name, "-c", warm_python_stub()};
  auto saved = sb.workdir;
  sb.workdir = workdir;
  launch_plan plan;
  try {
    plan = make_launch_plan(sb, req, cfg);
  } catch (const std::exception& e) {
    plan.error = e.what();
  }
  sb.workdir = saved;
  if (!plan.error.empty() || !plan.bwrap || !plan.warm_key_set) {
    spdlog::warn("local provider: no warm interpreter in {}: {}", sb.id,
                 plan.error.empty() ? "not a python under bwrap" : plan.error);
    return nullptr;
  }
  auto w = std::make_unique<warm_python>();
  w->key = plan.warm_key;
  unique_fd out_wr, err_wr, status_wr, control_rd;
  if (!make_pipe(w->out, out_wr, true) || !make_pipe(w->err, err_wr, true) ||
      !make_pipe(w->status, status_wr, true) ||
      !make_pipe(control_rd, w->control, false)) {
    spdlog::warn("local provider: no warm interpreter in {}: pipes: {}", sb.id,
                 std::strerror(errno));
    return nullptr;
  }
  ::fcntl(w->out.get(), F_SETPIPE_SZ, 1024 * 1024);
  ::fcntl(w->control.get(), F_SETPIPE_SZ, 1024 * 1024);
  spawn_spec spec;
  spec.program = plan.program;
  spec.argv = plan.argv;
  spec.env = plan.env;
  spec.cwd_fd = plan.cwd.get();
  spec.stdin_fd = control_rd.get();
  spec.stdout_fd = out_wr.get();
  spec.stderr_fd = err_wr.get();
  spec.extra_fd = status_wr.get();
  spec.seccomp_fd = plan.seccomp.get();
  spec.args_fd = plan.args.get();
  spec.cgroup_procs_fds = sb.confinement.cgroups.join_fds();
  spec.rlimits = plan.rlimits;
  spec.nice = plan.nice;
  spec.netns_fd = sb.confinement.netns.get();
  int err = 0;
  int pidfd = -1;
  auto pid = spawn_process(spec, err, &pidfd);
  if (pid < 0) {
    spdlog::warn("local provider: no warm interpreter in {}: {}", sb.id,
                 std::strerror(err));
    return nullptr;
  }
  w->pid = pid;
  w->pidfd.reset(pidfd);
  return w;
}

} // namespace sv::detail
