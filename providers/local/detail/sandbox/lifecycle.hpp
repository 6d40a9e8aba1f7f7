#pragma once

// Making and tearing down one local sandbox with everything that confines
// it (directory or tmpfs, uid, cgroups). Both block: call them on an I/O
// thread.

#include "messages/protocol.hpp"
#include "providers/local/detail/sandbox/sandbox.hpp"

#include <caf/error.hpp>
#include <memory>
#include <string>

namespace sv::detail {

struct isolation_settings;
struct image_tree;

/// What of a sandbox's confinement its spec decides: two specs of one shape
/// get interchangeable sandboxes (the warm pool's key).
struct sandbox_shape {
  uint64_t disk_bytes = 0;
  uint64_t memory_bytes = 0;
  double cpus = 0;

  bool operator<(const sandbox_shape& other) const {
    if (disk_bytes != other.disk_bytes)
      return disk_bytes < other.disk_bytes;
    if (memory_bytes != other.memory_bytes)
      return memory_bytes < other.memory_bytes;
    return cpus < other.cpus;
  }
};

/// The shape of a sandbox for `spec`.
sandbox_shape shape_of(const isolation_settings& iso, const sandbox_spec& spec);

/// Makes sandbox `id` of `shape` in the directory `root` (open as
/// `root_fd`): its directory (a tmpfs), /tmp and /dev/shm, cgroups and uid,
/// but no spec yet (assign_spec). Throws std::runtime_error naming what
/// failed, after undoing what it made.
std::shared_ptr<local_sandbox>
prepare_local_sandbox(const isolation_settings& iso, int root_fd,
                      const std::string& root, const std::string& id,
                      const sandbox_shape& shape, io_strand strand);

/// Makes `image` the root of sandbox `sb`: an overlay of its tree and a
/// writable upper layer on a tmpfs of the sandbox's disk size
/// (`<id>.root`, removed at teardown). Needs bwrap as root: else fs_error
/// (invalid_argument). Throws std::runtime_error naming what failed.
void attach_image(const isolation_settings& iso, local_sandbox& sb,
                  std::shared_ptr<const image_tree> image);

/// Gives a prepared sandbox the parts of `spec` it only keeps (its
/// environment and workdir); check_workdir() passed for the spec.
void assign_spec(const isolation_settings& iso, local_sandbox& sb,
                 const sandbox_spec& spec);

/// Makes sandbox `id` for `spec`: prepare_local_sandbox and assign_spec.
/// Throws fs_error for a bad workdir, std::runtime_error naming what failed
/// (after undoing what it made).
std::shared_ptr<local_sandbox>
make_local_sandbox(const isolation_settings& iso, int root_fd,
                   const std::string& root, const std::string& id,
                   const sandbox_spec& spec, io_strand strand);

/// Why a prepared sandbox that was never handed out may not be (its
/// directory, /tmp or /dev/shm not empty or no longer its tmpfs, a cgroup
/// gone or holding a process, its uid lost), or "" when it is as prepared.
std::string check_unused(const isolation_settings& iso,
                         const local_sandbox& sb);

/// Kills every process of `sb`, removes its directory, mounts and cgroups
/// and gives its uid back. Returns what failed; then what is left stays
/// (the uid too), and calling it again tries the rest.
caf::error teardown_local_sandbox(local_sandbox& sb);

} // namespace sv::detail
