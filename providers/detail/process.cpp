#include "providers/detail/process.hpp"

#include "providers/detail/pidfd.hpp"
#include "providers/detail/unique_fd.hpp"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <stdexcept>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace sv::detail {

namespace {

/// Owns the attribute objects of one posix_spawn call.
struct spawn_setup {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;

  spawn_setup() {
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attr);
  }

  ~spawn_setup() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
  }

  spawn_setup(const spawn_setup&) = delete;
  spawn_setup& operator=(const spawn_setup&) = delete;
};

void redirect(posix_spawn_file_actions_t& fa, int fd, int target) {
  if (fd >= 0)
    posix_spawn_file_actions_adddup2(&fa, fd, target);
  else
    posix_spawn_file_actions_addopen(&fa, target, "/dev/null", O_WRONLY, 0);
}

std::vector<char*> c_strings(const std::vector<std::string>& xs) {
  std::vector<char*> out;
  out.reserve(xs.size() + 1);
  for (auto& x : xs)
    out.push_back(const_cast<char*>(x.c_str()));
  out.push_back(nullptr);
  return out;
}

/// Reads a whole (small) file of /proc; empty when it cannot.
std::string read_proc_file(const std::string& path) {
  unique_fd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  std::string out;
  if (!fd)
    return out;
  char buf[8192];
  for (;;) {
    auto n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return out;
    out.append(buf, static_cast<size_t>(n));
  }
}

/// The state letter and process group of `pid` from /proc/<pid>/stat.
bool read_stat(pid_t pid, char& state, pid_t& pgid) {
  auto text = read_proc_file("/proc/" + std::to_string(pid) + "/stat");
  // The command name may contain anything, so parse after its last ')'.
  auto pos = text.rfind(')');
  if (pos == std::string::npos)
    return false;
  int ppid = 0;
  int pgrp = 0;
  if (std::sscanf(text.c_str() + pos + 1, " %c %d %d", &state, &ppid, &pgrp) !=
      3)
    return false;
  pgid = pgrp;
  return true;
}

bool is_alive_state(char state) {
  return state != 'Z' && state != 'X' && state != 'x';
}

} // namespace

pid_t spawn_process(const spawn_spec& spec, int& err) {
  spawn_setup s;
  posix_spawn_file_actions_addopen(&s.actions, 0, "/dev/null", O_RDONLY, 0);
  redirect(s.actions, spec.stdout_fd, 1);
  redirect(s.actions, spec.stderr_fd, 2);
  if (spec.cwd_fd >= 0)
    posix_spawn_file_actions_addfchdir_np(&s.actions, spec.cwd_fd);
  // Whatever other descriptors the service holds without O_CLOEXEC stay
  // out of the sandbox.
  posix_spawn_file_actions_addclosefrom_np(&s.actions, 3);
  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  if (spec.new_process_group) {
    flags |= POSIX_SPAWN_SETPGROUP;
    posix_spawnattr_setpgroup(&s.attr, 0);
  }
  // The service may block or ignore signals (SIGPIPE, ...); a runner
  // starts with the defaults.
  sigset_t none;
  sigset_t all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&s.attr, &none);
  posix_spawnattr_setsigdefault(&s.attr, &all);
  posix_spawnattr_setflags(&s.attr, flags);
  auto argv = c_strings(spec.argv);
  auto envp = c_strings(spec.env);
  pid_t pid = -1;
  err = ::posix_spawn(&pid, spec.program.c_str(), &s.actions, &s.attr,
                      argv.data(), spec.inherit_env ? environ : envp.data());
  return err == 0 ? pid : -1;
}

std::string find_program(std::string_view name, std::string_view path_list) {
  if (name.empty() || name.find('/') != std::string_view::npos)
    return {};
  size_t start = 0;
  while (start <= path_list.size()) {
    auto end = path_list.find(':', start);
    if (end == std::string_view::npos)
      end = path_list.size();
    auto dir = path_list.substr(start, end - start);
    if (!dir.empty()) {
      std::string candidate{dir};
      candidate += '/';
      candidate += name;
      struct stat st;
      if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
          ::access(candidate.c_str(), X_OK) == 0)
        return candidate;
    }
    start = end + 1;
  }
  return {};
}

bool has_env_entry(pid_t pid, std::string_view entry) {
  // A zombie's environ reads empty, so dead processes never match.
  auto text = read_proc_file("/proc/" + std::to_string(pid) + "/environ");
  if (text.empty())
    return false;
  std::string needle;
  needle.reserve(entry.size() + 2);
  needle += '\0';
  needle += entry;
  needle += '\0';
  text.insert(text.begin(), '\0');
  if (text.back() != '\0')
    text += '\0';
  return text.find(needle) != std::string::npos;
}

bool in_process_group(pid_t pid, pid_t pgid) {
  char state = 0;
  pid_t pg = 0;
  return read_stat(pid, state, pg) && pg == pgid && is_alive_state(state);
}

std::vector<pid_t> find_processes(const std::function<bool(pid_t)>& pred) {
  std::vector<pid_t> out;
  auto* dir = ::opendir("/proc");
  if (dir == nullptr)
    return out;
  auto self = ::getpid();
  while (auto* entry = ::readdir(dir)) {
    char* end = nullptr;
    auto pid = static_cast<pid_t>(std::strtol(entry->d_name, &end, 10));
    if (end == entry->d_name || *end != '\0' || pid <= 0 || pid == self)
      continue;
    if (pred(pid))
      out.push_back(pid);
  }
  ::closedir(dir);
  return out;
}

size_t kill_and_wait(const std::vector<pid_t>& pids,
                     const std::function<bool(pid_t)>& pred,
                     std::chrono::milliseconds timeout) {
  std::vector<unique_fd> pinned;
  for (auto pid : pids) {
    unique_fd fd{::pidfd_open(pid, 0)};
    // Checking again after pidfd_open: the pidfd names the process we
    // checked, whatever the pid is reused for later.
    if (!fd || !pred(pid))
      continue;
    if (::pidfd_send_signal(fd.get(), SIGKILL, nullptr, 0) == 0)
      pinned.push_back(std::move(fd));
  }
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pinned.empty()) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      break;
    std::vector<pollfd> fds;
    for (auto& fd : pinned)
      fds.push_back(pollfd{fd.get(), POLLIN, 0});
    auto n = ::poll(fds.data(), fds.size(), static_cast<int>(left.count()));
    if (n < 0 && errno != EINTR)
      break;
    // A pidfd turns readable when its process has exited.
    std::vector<unique_fd> alive;
    for (size_t i = 0; i < fds.size(); ++i)
      if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0)
        alive.push_back(std::move(pinned[i]));
    pinned = std::move(alive);
  }
  return pinned.size();
}

std::string describe_signal(int sig) {
  std::string out = std::to_string(sig);
  if (auto* abbrev = ::sigabbrev_np(sig))
    out += std::string{" (SIG"} + abbrev + ")";
  return out;
}

namespace {

/// Runs `spec` with stdout and stderr into one pipe; returns the output,
/// or throws when it cannot run, times out or fails.
std::string run_and_capture(spawn_spec spec, std::chrono::seconds timeout) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string{"pipe: "} + std::strerror(errno));
  unique_fd rd{p[0]};
  unique_fd wr{p[1]};
  spec.stdout_fd = spec.stderr_fd = wr.get();
  int err = 0;
  auto pid = spawn_process(spec, err);
  wr.reset();
  if (pid < 0)
    throw std::runtime_error("cannot run " + spec.program + ": " +
                             std::strerror(err));
  std::string out;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd pfd{rd.get(), POLLIN, 0};
    if (left.count() <= 0 ||
        ::poll(&pfd, 1, static_cast<int>(left.count())) == 0)
      break;
    char buf[4096];
    auto n = ::read(rd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    out.append(buf, static_cast<size_t>(n));
  }
  bool late = std::chrono::steady_clock::now() >= deadline;
  if (late)
    ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    // retry
  }
  if (late)
    throw std::runtime_error(spec.program + " did not answer within " +
                             std::to_string(timeout.count()) + " s");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw std::runtime_error(spec.program + " failed: " + out);
  return out;
}

} // namespace

std::string resolve_python(const std::string& python) {
  std::string path = python;
  if (python.find('/') == std::string::npos) {
    const char* env_path = std::getenv("PATH");
    path = find_program(python, env_path ? env_path : "/usr/bin:/bin");
    if (path.empty())
      throw std::runtime_error(
          "local provider: python interpreter \"" + python +
          "\" not found on PATH; install python3 or set the provider's "
          "\"python\" setting to an interpreter's absolute path");
  }
  spawn_spec spec;
  spec.program = path;
  spec.argv = {path, "-c", "import sys; print(sys.executable)"};
  // A pyenv shim needs the service's own environment to find its version.
  spec.inherit_env = true;
  spec.new_process_group = false;
  std::string out;
  try {
    out = run_and_capture(spec, std::chrono::seconds{30});
  } catch (const std::exception& e) {
    throw std::runtime_error("local provider: cannot ask python \"" + python +
                             "\" for sys.executable: " + e.what());
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r'))
    out.pop_back();
  if (out.empty() || out.front() != '/' || ::access(out.c_str(), X_OK) != 0)
    throw std::runtime_error("local provider: python \"" + python +
                             "\" reports sys.executable \"" + out +
                             "\", which is not an executable absolute path");
  return out;
}

} // namespace sv::detail
