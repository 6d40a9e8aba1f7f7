#pragma once

// Where a path of the provider interface lives on the host. A path is
// relative to the sandbox's workdir, or absolute as the sandbox's commands
// see it; an absolute one must be in a place the sandbox can write and the
// provider can reach from a descriptor (confined_fs walks from there):
//
//   - its workdir (under bwrap the spec's `workdir`, e.g. /sandbox; without
//     isolation the sandbox's host directory, with the spec's workdir as an
//     alias for the provider's calls);
//   - under bwrap with per-sandbox scratch (root): /tmp and /dev/shm, its own
//     tmpfs, which outlive each command.
//
// Anything else is on the read-only root (or the host's): `invalid_path`
// naming the path and what the sandbox can write.

#include "providers/local/detail/host/unique_fd.hpp"

#include <string>
#include <string_view>

namespace sv::detail {

struct local_sandbox;

/// A directory descriptor to walk from and the confined path below it
/// (empty: the directory itself).
struct sandbox_place {
  /// Holds `base` when it was opened for this place.
  unique_fd held;
  int base = -1;
  std::string rel;
  /// How messages name `base`: the place's absolute path ("/tmp"), or
  /// empty for a relative path (confined_fs's `shown`).
  std::string shown;
};

/// Where `path` (relative, or absolute in the sandbox; is_path_in_sandbox
/// holds) lives. Throws fs_error (`invalid_path`) for an absolute path
/// outside the sandbox's writable places, or `io_error`.
sandbox_place locate(const local_sandbox& sb, std::string_view path);

/// As `locate`, for a file: also refuses a path that names a place's
/// directory itself.
sandbox_place locate_file(const local_sandbox& sb, std::string_view path);

} // namespace sv::detail
