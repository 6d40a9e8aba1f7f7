#pragma once

// Child processes of the local provider: finding processes through /proc,
// killing them via pidfds (a recycled pid is never hit) and resolving the
// python interpreter (spawning itself is in spawn.hpp). Calls may block
// briefly: use them on an I/O thread, or before the actor system runs.

#include "providers/local/detail/host/spawn.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

namespace sv::detail {

/// The first executable regular file `name` in the colon-separated
/// `path_list`, or an empty string.
std::string find_program(std::string_view name, std::string_view path_list);

/// Whether `pid` is alive (not a zombie) and has `entry` ("NAME=value") in
/// its initial environment.
bool has_env_entry(pid_t pid, std::string_view entry);

/// The value of variable `name` in the initial environment of `pid`, or "".
std::string env_value(pid_t pid, std::string_view name);

/// When `pid` started, in clock ticks since boot (0 if it does not exist):
/// with the pid, it names a process across pid reuse.
uint64_t process_start_time(pid_t pid);

/// "<pid>-<start time>" of this process: part of every sandbox id, so the
/// reaper can tell whether the provider that made a sandbox still runs.
const std::string& instance_tag();

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

/// Runs `spec` with stdout and stderr into one pipe and returns the
/// output; throws std::runtime_error (with the output) when it cannot run,
/// times out or exits non-zero.
std::string run_and_capture(spawn_spec spec, std::chrono::seconds timeout);

/// Kills what `pred` finds in /proc, again until a scan finds nothing or
/// `rounds` ran out (a fork bomb may need several). Returns how many
/// survived.
size_t kill_matching(const std::function<bool(pid_t)>& pred, int rounds = 20);

/// A signal in words: "9 (SIGKILL)".
std::string describe_signal(int sig);

/// Finds `python` on the service's PATH (or takes it as is when it contains
/// a '/') and asks it for `sys.executable`, so that a slow launcher (a pyenv
/// shim) is replaced by the real binary. Throws std::runtime_error with an
/// actionable message on failure.
std::string resolve_python(const std::string& python);

/// An interpreter and the directories it loads from.
struct python_install {
  /// `sys.executable`.
  std::string executable;
  /// Its directory (before and after resolving symlinks), `sys.prefix` and
  /// `sys.base_prefix`: what a sandbox must see to run it.
  std::vector<std::string> roots;
  /// `sys.version` (one line).
  std::string version;
};

/// Like `resolve_python`, with the directories the interpreter needs.
python_install resolve_python_install(const std::string& python);

} // namespace sv::detail
