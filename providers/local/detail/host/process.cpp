#include "providers/local/detail/host/process.hpp"

#include "providers/local/detail/host/pidfd.hpp"
#include "providers/local/detail/host/unique_fd.hpp"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sstream>
#include <stdexcept>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace sv::detail {

namespace {

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

std::string env_value(pid_t pid, std::string_view name) {
  auto text = read_proc_file("/proc/" + std::to_string(pid) + "/environ");
  for (size_t pos = 0; pos < text.size();) {
    auto end = text.find('\0', pos);
    if (end == std::string::npos)
      end = text.size();
    std::string_view entry{text.data() + pos, end - pos};
    if (entry.size() > name.size() && entry[name.size()] == '=' &&
        entry.compare(0, name.size(), name) == 0)
      return std::string{entry.substr(name.size() + 1)};
    pos = end + 1;
  }
  return {};
}

uint64_t process_start_time(pid_t pid) {
  auto text = read_proc_file("/proc/" + std::to_string(pid) + "/stat");
  auto pos = text.rfind(')');
  if (pos == std::string::npos)
    return 0;
  // Fields 3 (state) to 21 come first, then 22 (starttime).
  std::istringstream in{text.substr(pos + 2)};
  std::string field;
  for (int i = 3; i <= 21 && in >> field; ++i) {
    // skip state .. itrealvalue
  }
  uint64_t start = 0;
  in >> start;
  return start;
}

const std::string& instance_tag() {
  static const std::string tag = std::to_string(::getpid()) + "-" +
                                 std::to_string(process_start_time(::getpid()));
  return tag;
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

size_t kill_matching(const std::function<bool(pid_t)>& pred, int rounds) {
  for (int round = 0;; ++round) {
    auto pids = find_processes(pred);
    if (pids.empty() || round == rounds)
      return pids.size();
    kill_and_wait(pids, pred, std::chrono::seconds{2});
  }
}

std::string describe_signal(int sig) {
  std::string out = std::to_string(sig);
  if (auto* abbrev = ::sigabbrev_np(sig))
    out += std::string{" (SIG"} + abbrev + ")";
  return out;
}

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

python_install resolve_python_install(const std::string& python) {
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
  spec.argv = {path, "-c",
               "import os, sys; print(sys.executable); "
               "print(os.path.dirname(os.path.realpath(sys.executable))); "
               "print(sys.prefix); print(sys.base_prefix); "
               "print(sys.version.replace('\\n', ' '))"};
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
  std::vector<std::string> lines;
  for (size_t pos = 0; pos < out.size();) {
    auto end = out.find('\n', pos);
    if (end == std::string::npos)
      end = out.size();
    lines.push_back(out.substr(pos, end - pos));
    pos = end + 1;
  }
  auto exe = lines.empty() ? std::string{} : lines.front();
  if (exe.empty() || exe.front() != '/' || ::access(exe.c_str(), X_OK) != 0)
    throw std::runtime_error("local provider: python \"" + python +
                             "\" reports sys.executable \"" + exe +
                             "\", which is not an executable absolute path");
  python_install out_install{exe, {}, {}};
  auto slash = exe.rfind('/');
  out_install.roots.push_back(slash == 0 ? "/" : exe.substr(0, slash));
  for (size_t i = 1; i < lines.size() && i < 4; ++i)
    if (!lines[i].empty() && lines[i].front() == '/')
      out_install.roots.push_back(lines[i]);
  if (lines.size() > 4)
    out_install.version = lines[4];
  return out_install;
}

std::string resolve_python(const std::string& python) {
  return resolve_python_install(python).executable;
}

} // namespace sv::detail
