#pragma once

// The local provider: a sandbox is a private directory under a root and the
// process group(s) started in it. Child processes are awaited on an I/O
// thread (pidfd + epoll via Boost.Asio); results come back as messages, so no
// CAF scheduler thread ever blocks.

#include "messages/provider.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace caf {
class actor_system;
} // namespace caf

namespace sv {

struct local_provider_config {
  /// Directory under which each sandbox gets its own directory. Empty means
  /// `$TMPDIR/sv-sandboxes` (or `/tmp/sv-sandboxes`).
  std::string root;
  /// Interpreter for argv[0] == "python3" / "python" (and for this very
  /// name); resolved to an absolute path once, when the provider starts.
  std::string python = "python3";
  /// Largest file `download` returns.
  uint64_t max_download_bytes = 16 * 1024 * 1024;
  /// Threads that run file I/O and await child processes. Their work blocks
  /// (a stop unmounts and removes cgroups for milliseconds), so a create
  /// should always find one free.
  size_t io_threads = 4;

  // -- isolation and limits (README: "Isolation and limits") ---------------

  /// "bwrap", "none", or empty: bwrap when it is on PATH and works here.
  std::string isolation;
  /// Host paths a bwrap sandbox sees as empty directories.
  std::vector<std::string> hide_paths = {"/root", "/home", "/run"};
  /// Most processes and threads a sandbox may run at once.
  uint64_t max_processes = 256;
  /// Most bytes of output an exec keeps (its log, or each captured stream).
  uint64_t max_log_bytes = 1024 * 1024;
  /// Memory limit of a sandbox whose spec sets none; 0 for no limit.
  uint64_t default_memory_mib = 2048;
  /// Disk space of a sandbox whose spec sets none.
  uint64_t default_disk_mib = 1024;
  /// Niceness of every sandbox process (0 to 19). Above 0, the runtime's own
  /// short bursts of work (create, stop, the actors) never wait behind
  /// CPU-bound runners for a core; a runner alone on a core loses nothing.
  uint64_t sandbox_nice = 10;
  /// Sandboxes run as uids uid_base .. uid_base + uid_count - 1 (bwrap, as
  /// root), each its own while it lives.
  uint64_t uid_base = 100000;
  uint64_t uid_count = 4096;
  /// The cgroup, below each v1 hierarchy's root, that holds the sandboxes'.
  std::string cgroup_parent = "sv-sandboxes";
};

/// Reads the settings of a `{"local": {...}}` provider block (the inner
/// object). Throws `json_error` naming the field on bad input or unknown
/// keys.
local_provider_config parse_local_provider_config(const json& settings);

/// Creates the root, resolves the interpreter and spawns the provider.
/// Throws std::runtime_error with a message a person can act on when the
/// root cannot be created or the interpreter cannot be found.
provider_actor spawn_local_provider(caf::actor_system& sys,
                                    local_provider_config cfg);

} // namespace sv
