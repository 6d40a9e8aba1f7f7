#include "providers/local/detail/reaper.hpp"

#include "providers/local/detail/host/cgroups.hpp"
#include "providers/local/detail/host/mounts.hpp"
#include "providers/local/detail/host/process.hpp"

#include <cstdio>
#include <dirent.h>
#include <set>
#include <spdlog/spdlog.h>

namespace sv::detail {

namespace {

/// The pid and start time in "sb-<pid>-<start>-...", or false.
bool parse_owner(const std::string& id, pid_t& pid, uint64_t& start) {
  unsigned long long p = 0;
  unsigned long long s = 0;
  int used = 0;
  if (std::sscanf(id.c_str(), "sb-%llu-%llu-%n", &p, &s, &used) != 2 ||
      used == 0)
    return false;
  pid = static_cast<pid_t>(p);
  start = s;
  return true;
}

bool owner_alive(const std::string& id) {
  pid_t pid = 0;
  uint64_t start = 0;
  if (!parse_owner(id, pid, start))
    return true; // not named by a provider of this version: leave it
  return pid > 0 && process_start_time(pid) == start;
}

void list_sandboxes(const std::string& dir, std::set<std::string>& out) {
  if (dir.empty())
    return;
  if (auto* d = ::opendir(dir.c_str())) {
    while (auto* e = ::readdir(d)) {
      std::string name = e->d_name;
      // "<id>.tmp" and "<id>.shm" are the /tmp and /dev/shm of <id>,
      // "<id>.root" its writable root over an image.
      if (name.compare(0, 3, "sb-") == 0)
        out.insert(name.substr(0, name.find('.')));
    }
    ::closedir(d);
  }
}

} // namespace

size_t reap_orphans(int root_fd, const std::string& root,
                    const cgroup_layout& cgroups) {
  std::set<std::string> names;
  list_sandboxes(root, names);
  for (auto* dir : {&cgroups.pids, &cgroups.memory, &cgroups.cpu})
    list_sandboxes(*dir, names);
  std::set<std::string> orphans;
  for (auto& name : names)
    if (!owner_alive(name))
      orphans.insert(name);
  if (orphans.empty())
    return 0;
  for (auto& name : orphans)
    for (auto* dir : {&cgroups.pids, &cgroups.memory, &cgroups.cpu})
      if (!dir->empty())
        if (auto err = reap_cgroup(*dir + "/" + name); !err.empty())
          spdlog::warn("local provider: reaping {}: {}", name, err);
  // One scan for the processes of every orphan, with or without cgroups.
  auto orphan = [&orphans](pid_t p) {
    return orphans.count(env_value(p, "SV_SANDBOX_ID")) > 0;
  };
  if (auto left = kill_matching(orphan); left > 0)
    spdlog::warn("local provider: {} processes of earlier sandboxes "
                 "survived SIGKILL",
                 left);
  for (auto& name : orphans)
    for (auto* suffix : {"", ".tmp", ".shm", ".root"})
      if (auto err = remove_sandbox_dir(root_fd, root, name + suffix);
          !err.empty())
        spdlog::warn("local provider: reaping {}: {}", name, err);
  return orphans.size();
}

} // namespace sv::detail
