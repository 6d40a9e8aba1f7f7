#pragma once

// The local provider: a sandbox is a private directory under a root and the
// process group(s) started in it. Child processes are awaited on an I/O
// thread (pidfd + epoll via Boost.Asio); results come back as messages, so no
// CAF scheduler thread ever blocks.

#include "messages/provider.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

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
  /// Threads that run file I/O and await child processes.
  size_t io_threads = 2;
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
