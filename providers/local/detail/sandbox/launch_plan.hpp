#pragma once

// What an exec runs: the program resolved, the environment built, the
// descriptors open, the limits chosen and, under bwrap, the whole command
// wrapped. Runs on the sandbox's strand.

#include "messages/protocol.hpp"
#include "providers/local/detail/host/unique_fd.hpp"
#include "providers/local/detail/sandbox/warm_python.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <sys/resource.h>
#include <utility>
#include <vector>

namespace sv::detail {

struct local_sandbox;
struct isolation_settings;

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
  /// The isolation mode and limits.
  std::shared_ptr<const isolation_settings> isolation;
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
  /// Resource limits of the command's processes.
  std::vector<std::pair<int, rlim_t>> rlimits;
  /// Niceness of the command's processes.
  int nice = 0;
  /// Whether `program` is bubblewrap, with a status fd.
  bool bwrap = false;
  /// bwrap's seccomp program (its fd 4), when it has a filter.
  unique_fd seccomp;
  /// bwrap's arguments (its fd 5, `--args 5`), NUL-separated: they hold
  /// the command's environment, which /proc/PID/cmdline would show anyone.
  unique_fd args;
  /// Most bytes of output kept (the log, or each captured stream).
  uint64_t max_output = 0;
  /// Why the program cannot run at all.
  std::string error;
  /// Whether it runs the provider's python under bwrap as root on the
  /// host's view: then `warm_key` is what a warm interpreter that serves it
  /// must have been started with (sandbox/warm_python.hpp).
  bool warm_key_set = false;
  warm_python_key warm_key;
  /// Whether a warm interpreter may serve it (`python script args`): then
  /// the cwd it is handed (as the sandbox shows it) and the argv after the
  /// interpreter.
  bool warm_candidate = false;
  std::string warm_cwd;
  std::vector<std::string> warm_argv;
};

/// Builds the plan of `req` in `sb`. Throws `fs_error` for a cwd or log path
/// that is missing or leads through a symlink.
launch_plan make_launch_plan(const local_sandbox& sb, const exec_request& req,
                             const exec_settings& cfg);

} // namespace sv::detail
