#pragma once

// Child processes of the local provider: spawning with posix_spawn (no fork
// of a large service process), finding processes through /proc, killing
// them via pidfds (a recycled pid is never hit) and resolving the python
// interpreter. Calls may block briefly: use them on an I/O thread, or before
// the actor system runs.

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <sys/types.h>
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
  /// Where stdout and stderr go; -1 means /dev/null. stdin is /dev/null.
  int stdout_fd = -1;
  int stderr_fd = -1;
  /// Whether the child leads a new process group (pgid = its pid).
  bool new_process_group = true;
};

/// Spawns `spec`; returns the pid, or -1 with the errno value in `err`.
pid_t spawn_process(const spawn_spec& spec, int& err);

/// The first executable regular file `name` in the colon-separated
/// `path_list`, or an empty string.
std::string find_program(std::string_view name, std::string_view path_list);

/// Whether `pid` is alive (not a zombie) and has `entry` ("NAME=value") in
/// its initial environment.
bool has_env_entry(pid_t pid, std::string_view entry);

/// Whether `pid` is alive (not a zombie) and in process group `pgid`.
bool in_process_group(pid_t pid, pid_t pgid);

/// Pids in /proc for which `pred` holds (our own process excluded).
std::vector<pid_t> find_processes(const std::function<bool(pid_t)>& pred);

/// SIGKILLs each of `pids` that still satisfies `pred` once pinned by a
/// pidfd, then waits until they all died or `timeout` passed. Returns how
/// many are still alive.
size_t kill_and_wait(const std::vector<pid_t>& pids,
                     const std::function<bool(pid_t)>& pred,
                     std::chrono::milliseconds timeout);

/// A signal in words: "9 (SIGKILL)".
std::string describe_signal(int sig);

/// Finds `python` on the service's PATH (or takes it as is when it contains
/// a '/') and asks it for `sys.executable`, so that a slow launcher (a pyenv
/// shim) is replaced by the real binary. Throws std::runtime_error with an
/// actionable message on failure.
std::string resolve_python(const std::string& python);

} // namespace sv::detail
