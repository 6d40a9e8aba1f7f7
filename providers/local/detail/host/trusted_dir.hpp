#pragma once

// The sandbox root as a directory root may trust, and trees below it
// removed without ever following a symlink or crossing a mount: every step
// is relative to a directory descriptor (openat/unlinkat), never a path
// walked again. Calls block: use them on an I/O thread or at start.

#include "providers/local/detail/host/unique_fd.hpp"

#include <string>

namespace sv::detail {

/// Opens the absolute directory `path` one component at a time, never
/// following a symlink, and checks that the service may trust it: `path`
/// itself owned by the service's uid and writable by nobody else, each
/// ancestor owned by root or the service and writable by nobody else unless
/// sticky (like /tmp). Throws std::runtime_error saying what is wrong and
/// what to do.
unique_fd open_trusted_dir(const std::string& path);

/// Removes `name` in the directory `dirfd` and, for a directory, all below
/// it, relative to descriptors: a symlink is unlinked, never followed; a
/// mount point (another device) is not entered and fails the removal.
/// Returns what failed, or "" (also when `name` does not exist).
std::string remove_tree_at(int dirfd, const std::string& name);

} // namespace sv::detail
