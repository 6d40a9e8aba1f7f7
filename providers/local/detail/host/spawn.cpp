#include "providers/local/detail/host/spawn.hpp"

#include "providers/local/detail/host/unique_fd.hpp"

#include <cerrno>
#include <csignal>
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace sv::detail {

namespace {

/// Everything the child needs, prepared by the parent: the child shares the
/// parent's memory and may only make system calls (no allocation, no locks).
struct child_args {
  const char* program = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  int cwd_fd = -1;
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  int extra_fd = -1;
  int seccomp_fd = -1;
  int args_fd = -1;
  bool new_process_group = true;
  const int* cgroup_fds = nullptr;
  size_t cgroup_count = 0;
  const std::pair<int, rlim_t>* limits = nullptr;
  size_t limit_count = 0;
  int nice = 0;
  int netns_fd = -1;
  /// Written by the child when it fails before or at its exec.
  int err = 0;
};

[[noreturn]] void child_fail(child_args* a) {
  a->err = errno != 0 ? errno : EINVAL;
  _exit(127);
}

/// Puts `fd` (or /dev/null) on `target`, clearing close-on-exec.
bool place_fd(int fd, int target, int null_flags) {
  if (fd < 0) {
    int null_fd = ::open("/dev/null", null_flags);
    if (null_fd < 0)
      return false;
    if (null_fd == target)
      return true;
    bool ok = ::dup2(null_fd, target) == target;
    ::close(null_fd);
    return ok;
  }
  return ::dup2(fd, target) == target;
}

int child_main(void* p) {
  auto* a = static_cast<child_args*>(p);
  // The service's handlers must never run here: this child shares its
  // memory until the exec.
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction sa {};
    sa.sa_handler = SIG_DFL;
    ::sigaction(sig, &sa, nullptr);
  }
  if (a->new_process_group && ::setpgid(0, 0) != 0)
    child_fail(a);
  if (a->netns_fd >= 0 && ::setns(a->netns_fd, CLONE_NEWNET) != 0)
    child_fail(a);
  // "0" is the writing process: the child joins before it can fork.
  for (size_t i = 0; i < a->cgroup_count; ++i)
    if (::write(a->cgroup_fds[i], "0", 1) != 1)
      child_fail(a);
  for (size_t i = 0; i < a->limit_count; ++i) {
    struct rlimit rl {
      a->limits[i].second, a->limits[i].second
    };
    if (::setrlimit(a->limits[i].first, &rl) != 0)
      child_fail(a);
  }
  if (a->nice != 0 && ::setpriority(PRIO_PROCESS, 0, a->nice) != 0)
    child_fail(a);
  if (!place_fd(a->stdin_fd, 0, O_RDONLY) ||
      !place_fd(a->stdout_fd, 1, O_WRONLY) ||
      !place_fd(a->stderr_fd, 2, O_WRONLY))
    child_fail(a);
  if (a->extra_fd >= 0 && ::dup2(a->extra_fd, 3) != 3)
    child_fail(a);
  if (a->seccomp_fd >= 0 && ::dup2(a->seccomp_fd, 4) != 4)
    child_fail(a);
  if (a->args_fd >= 0 && ::dup2(a->args_fd, 5) != 5)
    child_fail(a);
  if (a->cwd_fd >= 0 && ::fchdir(a->cwd_fd) != 0)
    child_fail(a);
  // Whatever else the service holds stays out of the child.
  if (a->extra_fd < 0)
    ::close(3);
  if (a->seccomp_fd < 0)
    ::close(4);
  if (a->args_fd < 0)
    ::close(5);
  ::close_range(6, ~0U, 0);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execve(a->program, a->argv, a->envp);
  child_fail(a);
}

std::vector<char*> c_strings(const std::vector<std::string>& xs) {
  std::vector<char*> out;
  out.reserve(xs.size() + 1);
  for (auto& x : xs)
    out.push_back(const_cast<char*>(x.c_str()));
  out.push_back(nullptr);
  return out;
}

/// A descriptor the child can dup2 from safely: never one of 0..5, which
/// the child overwrites before it reads them all.
int safe_fd(int fd, std::vector<unique_fd>& holders) {
  if (fd < 0 || fd > 5)
    return fd;
  holders.emplace_back(::fcntl(fd, F_DUPFD_CLOEXEC, 6));
  return holders.back().get();
}

/// A stack for the child, unmapped when the spawn returns.
struct child_stack {
  static constexpr size_t size = 64 * 1024;
  void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);

  child_stack() = default;
  child_stack(const child_stack&) = delete;
  child_stack& operator=(const child_stack&) = delete;
  ~child_stack() {
    if (base != MAP_FAILED)
      ::munmap(base, size);
  }

  void* top() const { return static_cast<char*>(base) + size; }
};

} // namespace

pid_t spawn_process(const spawn_spec& spec, int& err, int* pidfd) {
  if (pidfd != nullptr)
    *pidfd = -1;
  std::vector<unique_fd> holders;
  auto argv = c_strings(spec.argv);
  auto envp = c_strings(spec.env);
  child_args a;
  a.program = spec.program.c_str();
  a.argv = argv.data();
  a.envp = spec.inherit_env ? environ : envp.data();
  a.cwd_fd = safe_fd(spec.cwd_fd, holders);
  a.stdin_fd = safe_fd(spec.stdin_fd, holders);
  a.stdout_fd = safe_fd(spec.stdout_fd, holders);
  a.stderr_fd = safe_fd(spec.stderr_fd, holders);
  a.extra_fd = safe_fd(spec.extra_fd, holders);
  a.seccomp_fd = safe_fd(spec.seccomp_fd, holders);
  a.args_fd = safe_fd(spec.args_fd, holders);
  a.new_process_group = spec.new_process_group;
  a.cgroup_fds = spec.cgroup_procs_fds.data();
  a.cgroup_count = spec.cgroup_procs_fds.size();
  a.limits = spec.rlimits.data();
  a.limit_count = spec.rlimits.size();
  a.nice = spec.nice;
  a.netns_fd = spec.netns_fd;
  child_stack stack;
  if (stack.base == MAP_FAILED) {
    err = errno;
    return -1;
  }
  // Blocked until the child has reset its handlers: no signal may run a
  // handler of the service on the child's shared memory.
  sigset_t all;
  sigset_t old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  int flags = CLONE_VM | CLONE_VFORK | SIGCHLD;
  if (pidfd != nullptr)
    flags |= CLONE_PIDFD;
  pid_t pid = ::clone(child_main, stack.top(), flags, &a, pidfd);
  int clone_err = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) {
    err = clone_err;
    return -1;
  }
  // CLONE_VFORK: the child has exec'd or exited by now.
  if (a.err != 0) {
    err = a.err;
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      // retry
    }
    if (pidfd != nullptr && *pidfd >= 0) {
      ::close(*pidfd);
      *pidfd = -1;
    }
    return -1;
  }
  err = 0;
  return pid;
}

} // namespace sv::detail
