#pragma once

// Spawning child processes without forking the service: the child shares
// the parent's memory (CLONE_VM | CLONE_VFORK, as posix_spawn does) but,
// unlike posix_spawn, it may join cgroups and set resource limits between
// the clone and the exec, so a sandboxed process is confined before it can
// fork. Blocks only until the child has called execve.

#include <string>
#include <sys/resource.h>
#include <sys/types.h>
#include <utility>
#include <vector>

namespace sv::detail {

/// What to spawn. Descriptors belong to the caller and stay open.
struct spawn_spec {
  /// Path handed to execve (absolute, or relative to the new cwd).
  std::string program;
  std::vector<std::string> argv;
  /// "NAME=value" entries; ignored with `inherit_env`.
  std::vector<std::string> env;
  /// Whether the child gets the service's own environment.
  bool inherit_env = false;
  /// The child's working directory; -1 keeps the caller's.
  int cwd_fd = -1;
  /// Where stdin, stdout and stderr come from and go; -1 means /dev/null.
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  /// A descriptor the child gets as fd 3 (e.g. bwrap's status), or -1.
  int extra_fd = -1;
  /// A descriptor the child gets as fd 4 (bwrap's seccomp program), or -1.
  int seccomp_fd = -1;
  /// A descriptor the child gets as fd 5 (bwrap's --args), or -1.
  int args_fd = -1;
  /// Whether the child leads a new process group (pgid = its pid).
  bool new_process_group = true;
  /// Open `cgroup.procs` files the child joins before its exec.
  std::vector<int> cgroup_procs_fds;
  /// Resource limits (soft = hard) the child sets before its exec.
  std::vector<std::pair<int, rlim_t>> rlimits;
  /// Niceness the child sets before its exec (0: unchanged).
  int nice = 0;
  /// A network namespace the child enters (setns) before its exec, or -1.
  int netns_fd = -1;
};

/// Spawns `spec`; returns the pid, or -1 with the errno value in `err` (also
/// when the child could not join a cgroup, set a limit or exec). With
/// `pidfd`, a pidfd of the child is stored there (-1 on failure).
pid_t spawn_process(const spawn_spec& spec, int& err, int* pidfd = nullptr);

} // namespace sv::detail
