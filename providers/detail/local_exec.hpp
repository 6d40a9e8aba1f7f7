#pragma once

// One command running in a local sandbox: spawned in its own process group,
// its leader awaited through a pidfd on the sandbox's strand, killed as a
// group at its deadline. Everything here runs on the sandbox's strand.

#include "messages/protocol.hpp"
#include "providers/detail/unique_fd.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace sv::detail {

struct local_sandbox;
class running_exec;

/// The PATH of every sandbox command, also where bare program names are
/// looked up.
inline constexpr const char* sandbox_path = "/usr/local/bin:/usr/bin:/bin";

/// The environment entry that marks every process of a sandbox.
std::string sandbox_marker(const std::string& sandbox_id);

/// Settings every exec of a provider shares.
struct exec_settings {
  /// The configured interpreter name; argv[0] equal to it (or to "python3"
  /// or "python") runs `python_path`.
  std::string python_name;
  /// The interpreter resolved when the provider started.
  std::string python_path;
};

/// A command ready to spawn: environment built, descriptors open.
struct launch_plan {
  /// Path for execve; empty when the program was not found (see `error`).
  std::string program;
  std::vector<std::string> argv;
  std::vector<std::string> env;
  unique_fd cwd;
  /// The log stdout and stderr append to; without one, both are captured.
  unique_fd log;
  double timeout_s = 0;
  /// Why the program cannot run at all.
  std::string error;
};

/// Builds the plan of `req` in `sb`. Throws `fs_error` for a cwd or log path
/// that is missing or leads through a symlink.
launch_plan make_launch_plan(const local_sandbox& sb, const exec_request& req,
                             const exec_settings& cfg);

/// Receives the result of a command, exactly once, on the sandbox's strand.
using exec_callback = std::function<void(exec_result)>;

/// Spawns `plan` and registers it in `sb.execs` under `id` until its leader
/// is reaped. A command that cannot be spawned reports an `exec_result`
/// with `error_type` sandbox at once.
void start_exec(const std::shared_ptr<local_sandbox>& sb, uint64_t id,
                launch_plan plan, exec_callback done);

/// Kills the process group of `x` because its sandbox stops; its result
/// then says so.
void kill_for_stop(running_exec& x);

} // namespace sv::detail
