#pragma once

// Making and tearing down one local sandbox with everything that confines
// it (directory or tmpfs, uid, cgroups). Both block: call them on an I/O
// thread.

#include "messages/protocol.hpp"
#include "providers/local/sandbox/sandbox.hpp"

#include <caf/error.hpp>
#include <memory>
#include <string>

namespace sv::detail {

struct isolation_settings;

/// Makes sandbox `id` in the directory `root` (open as `root_fd`). Throws
/// std::runtime_error naming what failed, after undoing what it made.
std::shared_ptr<local_sandbox>
make_local_sandbox(const isolation_settings& iso, int root_fd,
                   const std::string& root, const std::string& id,
                   const sandbox_spec& spec, io_strand strand);

/// Kills every process of `sb`, removes its directory, mounts and cgroups
/// and gives its uid back. Returns what failed; then what is left stays
/// (the uid too), and calling it again tries the rest.
caf::error teardown_local_sandbox(local_sandbox& sb);

} // namespace sv::detail
