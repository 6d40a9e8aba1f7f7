#pragma once

// How an exec ended, in terms a person can act on: a normal exit, the
// deadline, the kernel OOM killer at the sandbox's memory limit, another
// signal, or a sandbox that could not start the command at all.

#include "messages/protocol.hpp"

#include <cstdint>
#include <string>

namespace sv::detail {

/// Who killed a command, when the provider did.
enum class kill_cause { none, deadline, stop };

/// What the provider knows when the leader of an exec has been reaped.
struct exec_ending {
  /// `si_code` and `si_status` of the leader (bwrap itself under bwrap).
  int code = 0;
  int status = 0;
  kill_cause killed_by = kill_cause::none;
  double timeout_s = 0;
  /// Under bwrap: what its status fd said.
  bool bwrap = false;
  bool bwrap_ran_command = false;
  int bwrap_exit_code = -1;
  /// Processes the OOM killer killed in the sandbox during the exec.
  uint64_t oom_kills = 0;
  uint64_t memory_bytes = 0;
  uint64_t disk_bytes = 0;
  /// The last line of the output, for a command that never started.
  std::string last_line;
};

/// Parses what bwrap wrote to its `--json-status-fd` into `e`.
void read_bwrap_status(const std::string& text, exec_ending& e);

/// The result for `e` (without output, which the caller adds).
exec_result describe_ending(const exec_ending& e);

/// A failure of the sandbox itself, with `message`.
exec_result sandbox_failure(std::string message);

} // namespace sv::detail
