#pragma once

// Per-sandbox cgroups (v1 hierarchies: pids, memory, cpu). A sandbox's
// processes join them before they can fork (see spawn.hpp); stop kills
// whatever the cgroup holds, however it was started, and removes it. All
// calls block briefly: use them on an I/O thread or before the actor
// system runs.

#include "providers/local/detail/host/unique_fd.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <sys/types.h>
#include <vector>

namespace sv::detail {

/// Where the sandbox cgroups of this provider live, found once at start.
/// An empty directory means the controller is not usable here.
struct cgroup_layout {
  /// `<pids mount>/<parent>`.
  std::string pids;
  /// `<memory mount>/<parent>`.
  std::string memory;
  /// `<cpu mount>/<parent>`.
  std::string cpu;
  /// Whether memory+swap can be limited too.
  bool memsw = false;
  /// Why a controller is missing, for the start-up log.
  std::vector<std::string> problems;
};

/// Finds the v1 hierarchies in /proc/self/mountinfo and makes `parent` in
/// each (a relative path such as "sv-sandboxes").
cgroup_layout detect_cgroups(const std::string& parent);

/// What one sandbox's cgroups enforce. Zero means no limit.
struct cgroup_limits {
  uint64_t max_processes = 0;
  uint64_t memory_bytes = 0;
  double cpus = 0;
};

/// The cgroups of one sandbox, named by the sandbox id.
class sandbox_cgroups {
public:
  sandbox_cgroups() = default;

  /// Makes the cgroups of `id` under `layout` with `limits`. Throws
  /// std::runtime_error naming the file that failed (and removes what it
  /// made).
  sandbox_cgroups(const cgroup_layout& layout, const std::string& id,
                  const cgroup_limits& limits);

  sandbox_cgroups(sandbox_cgroups&&) = default;
  sandbox_cgroups& operator=(sandbox_cgroups&&) = default;

  /// Whether any cgroup exists.
  bool active() const { return !dirs_.empty(); }

  /// Open `cgroup.procs` files a new process writes "0" to.
  std::vector<int> join_fds() const;

  /// How many processes the kernel OOM killer has killed in the memory
  /// cgroup so far (0 without one).
  uint64_t oom_kills() const;

  /// The memory limit in bytes (0: none).
  uint64_t memory_bytes() const { return limits_.memory_bytes; }

  /// SIGKILLs every process, again until none is left or `rounds` ran out;
  /// forks are refused meanwhile (pids.max 0). With `reopen`, the process
  /// limit is restored afterwards. Returns how many processes survived.
  size_t kill_all(bool reopen, int rounds = 20);

  /// Removes the cgroups (they must be empty). Returns what failed, or "".
  std::string remove();

  /// Why the cgroups are not as made (one is gone or, unless
  /// `may_hold_processes`, holds a process), or "".
  std::string check_unused(bool may_hold_processes = false) const;

private:
  std::vector<std::string> dirs_;
  std::vector<unique_fd> procs_;
  std::string pids_dir_;
  std::string memory_dir_;
  cgroup_limits limits_;
};

/// Kills every process in cgroup directory `dir` (pids.max set to 0 first
/// when it has one) and removes it; for the start-up reaper. Returns what
/// failed, or "".
std::string reap_cgroup(const std::string& dir);

/// Processes listed in `dir/cgroup.procs`.
std::vector<pid_t> cgroup_processes(const std::string& dir);

} // namespace sv::detail
