#include "providers/local/detail/host/cgroups.hpp"

#include "providers/local/detail/host/process.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>

namespace sv::detail {

namespace {

/// How long one kill round waits for the killed to die.
constexpr std::chrono::seconds kill_wait{2};

std::string read_small_file(const std::string& path) {
  std::ifstream in{path};
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

/// Writes `value` to the control file `path`; false with errno set on
/// failure.
bool write_control(const std::string& path, const std::string& value) {
  unique_fd fd{::open(path.c_str(), O_WRONLY | O_CLOEXEC)};
  if (!fd)
    return false;
  return ::write(fd.get(), value.data(), value.size()) ==
         static_cast<ssize_t>(value.size());
}

void write_or_throw(const std::string& path, const std::string& value) {
  if (!write_control(path, value))
    throw std::runtime_error("cannot write " + value + " to " + path + ": " +
                             std::strerror(errno));
}

bool has_token(const std::string& list, const std::string& token) {
  std::istringstream in{list};
  std::string item;
  while (std::getline(in, item, ','))
    if (item == token)
      return true;
  return false;
}

/// Mount points of the v1 hierarchies by controller name.
std::string find_mount(const std::string& controller) {
  std::ifstream in{"/proc/self/mountinfo"};
  std::string line;
  while (std::getline(in, line)) {
    auto sep = line.find(" - ");
    if (sep == std::string::npos)
      continue;
    std::istringstream head{line.substr(0, sep)};
    std::istringstream tail{line.substr(sep + 3)};
    std::string id, parent, dev, root, point, fstype, source, options;
    head >> id >> parent >> dev >> root >> point;
    tail >> fstype >> source >> options;
    // A hierarchy mounted at a sub-cgroup (root != "/") is not ours to use.
    if (fstype == "cgroup" && root == "/" && has_token(options, controller))
      return point;
  }
  return {};
}

/// `<mount>/<parent>` made and writable, or "" with a problem noted.
std::string prepare(const std::string& controller, const std::string& parent,
                    std::vector<std::string>& problems) {
  auto mount = find_mount(controller);
  if (mount.empty()) {
    problems.push_back("no cgroup v1 " + controller + " hierarchy");
    return {};
  }
  auto dir = mount + "/" + parent;
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    problems.push_back("cannot create " + dir + ": " + std::strerror(errno));
    return {};
  }
  if (::access(dir.c_str(), W_OK) != 0) {
    problems.push_back("cannot write to " + dir + ": " + std::strerror(errno));
    return {};
  }
  return dir;
}

/// The kill loop shared by stop and the reaper.
size_t kill_members(const std::string& dir, int rounds) {
  // Listed again once pinned by a pidfd: the pidfd then names a member,
  // whatever the pid is reused for later. (/proc/<pid>/cgroup will not do:
  // an exiting process no longer shows its cgroup there.)
  auto member = [&dir](pid_t p) {
    auto members = cgroup_processes(dir);
    return std::find(members.begin(), members.end(), p) != members.end();
  };
  for (int round = 0; round < rounds; ++round) {
    auto pids = cgroup_processes(dir);
    if (pids.empty())
      return 0;
    kill_and_wait(pids, member, kill_wait);
  }
  return cgroup_processes(dir).size();
}

} // namespace

cgroup_layout detect_cgroups(const std::string& parent) {
  cgroup_layout out;
  out.pids = prepare("pids", parent, out.problems);
  out.memory = prepare("memory", parent, out.problems);
  out.cpu = prepare("cpu", parent, out.problems);
  out.memsw =
    !out.memory.empty() &&
    ::access((out.memory + "/memory.memsw.limit_in_bytes").c_str(), W_OK) == 0;
  return out;
}

std::vector<pid_t> cgroup_processes(const std::string& dir) {
  std::vector<pid_t> out;
  std::istringstream in{read_small_file(dir + "/cgroup.procs")};
  long pid = 0;
  while (in >> pid)
    if (pid > 0)
      out.push_back(static_cast<pid_t>(pid));
  return out;
}

sandbox_cgroups::sandbox_cgroups(const cgroup_layout& layout,
                                 const std::string& id,
                                 const cgroup_limits& limits)
    : limits_(limits) {
  auto make = [&](const std::string& base) {
    auto dir = base + "/" + id;
    if (::mkdir(dir.c_str(), 0755) != 0)
      throw std::runtime_error("cannot create cgroup " + dir + ": " +
                               std::strerror(errno));
    dirs_.push_back(dir);
    procs_.emplace_back(
      ::open((dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
    if (!procs_.back())
      throw std::runtime_error("cannot open " + dir +
                               "/cgroup.procs: " + std::strerror(errno));
    return dir;
  };
  try {
    if (!layout.pids.empty() && limits.max_processes > 0) {
      pids_dir_ = make(layout.pids);
      write_or_throw(pids_dir_ + "/pids.max",
                     std::to_string(limits.max_processes));
    }
    if (!layout.memory.empty()) {
      memory_dir_ = make(layout.memory);
      if (limits.memory_bytes > 0) {
        auto bytes = std::to_string(limits.memory_bytes);
        write_or_throw(memory_dir_ + "/memory.limit_in_bytes", bytes);
        if (layout.memsw)
          write_or_throw(memory_dir_ + "/memory.memsw.limit_in_bytes", bytes);
      }
    }
    if (!layout.cpu.empty() && limits.cpus > 0) {
      auto dir = make(layout.cpu);
      auto quota = std::llround(limits.cpus * 100000);
      write_or_throw(dir + "/cpu.cfs_period_us", "100000");
      write_or_throw(dir + "/cpu.cfs_quota_us",
                     std::to_string(std::max<long long>(quota, 1000)));
    }
  } catch (...) {
    procs_.clear();
    for (auto& dir : dirs_)
      ::rmdir(dir.c_str());
    throw;
  }
}

std::vector<int> sandbox_cgroups::join_fds() const {
  std::vector<int> out;
  for (auto& fd : procs_)
    out.push_back(fd.get());
  return out;
}

uint64_t sandbox_cgroups::oom_kills() const {
  if (memory_dir_.empty())
    return 0;
  std::istringstream in{read_small_file(memory_dir_ + "/memory.oom_control")};
  std::string key;
  uint64_t value = 0;
  while (in >> key >> value)
    if (key == "oom_kill")
      return value;
  return 0;
}

size_t sandbox_cgroups::kill_all(bool reopen, int rounds) {
  // Every process of the sandbox is in each of its cgroups: one suffices.
  auto dir = !pids_dir_.empty() ? pids_dir_ : memory_dir_;
  if (dir.empty())
    return 0;
  if (!pids_dir_.empty())
    write_control(pids_dir_ + "/pids.max", "0");
  auto left = kill_members(dir, rounds);
  if (reopen && !pids_dir_.empty())
    write_control(pids_dir_ + "/pids.max",
                  std::to_string(limits_.max_processes));
  return left;
}

std::string sandbox_cgroups::remove() {
  procs_.clear();
  std::string failed;
  std::vector<std::string> left;
  for (auto& dir : dirs_)
    if (::rmdir(dir.c_str()) != 0 && errno != ENOENT) {
      failed += (failed.empty() ? "cannot remove cgroup " : ", ") + dir + ": " +
                std::strerror(errno);
      left.push_back(dir);
    }
  // What could not be removed stays, for the next try.
  dirs_.swap(left);
  return failed;
}

std::string sandbox_cgroups::check_unused(bool may_hold_processes) const {
  for (auto& dir : dirs_) {
    if (::access((dir + "/cgroup.procs").c_str(), R_OK) != 0)
      return "cgroup " + dir + " is gone";
    if (!may_hold_processes && !cgroup_processes(dir).empty())
      return "cgroup " + dir + " holds a process";
  }
  return {};
}

std::string reap_cgroup(const std::string& dir) {
  write_control(dir + "/pids.max", "0");
  if (auto left = kill_members(dir, 20); left > 0)
    return std::to_string(left) + " processes in " + dir + " survived SIGKILL";
  if (::rmdir(dir.c_str()) != 0 && errno != ENOENT)
    return "cannot remove cgroup " + dir + ": " + std::strerror(errno);
  return {};
}

} // namespace sv::detail
