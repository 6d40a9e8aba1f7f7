#pragma once

// What confines one local sandbox besides its namespaces: its own uid (a
// lease on a lock file, so that no two live sandboxes on the host share
// one), a size-limited tmpfs as its directory, and its cgroups. All calls
// block briefly: use them on an I/O thread or before the actor system runs.

#include "providers/detail/cgroups.hpp"
#include "providers/detail/unique_fd.hpp"

#include <atomic>
#include <cstdint>
#include <string>
#include <sys/types.h>

namespace sv::detail {

/// An unprivileged uid (and gid of the same number) held for one sandbox.
struct uid_lease {
  /// The uid; -1 when none is held.
  int64_t uid = -1;
  /// Holds an flock on `<lock dir>/<uid>.lock` while the lease lives.
  unique_fd lock;
};

/// A range of uids handed to sandboxes, shared by every provider on the
/// host through lock files.
class uid_pool {
public:
  uid_pool(std::string lock_dir, uint32_t base, uint32_t count);

  /// A free uid of the range, or an empty lease when all are taken. Throws
  /// std::runtime_error when the lock directory cannot be used.
  uid_lease lease();

  /// The first uid of the range.
  uint32_t base() const { return base_; }

  /// How many uids the range holds.
  uint32_t count() const { return count_; }

private:
  std::string lock_dir_;
  uint32_t base_;
  uint32_t count_;
  std::atomic<uint32_t> next_{0};
};

/// Mounts a tmpfs of `bytes` on `path`, owned by `uid`/`gid` (-1: root),
/// mode 0700, nosuid and nodev. Throws std::runtime_error on failure.
void mount_sandbox_tmpfs(const std::string& path, uint64_t bytes, int64_t uid);

/// Unmounts every mount at or below `path`, deepest first (detaching what
/// is busy). Returns what failed, or "".
std::string unmount_tree(const std::string& path);

/// Mount points at or below `path`, from /proc/self/mountinfo.
std::vector<std::string> mounts_below(const std::string& path);

/// Removes the directory of a sandbox: its mounts, then the tree. Returns
/// what failed, or "".
std::string remove_sandbox_dir(const std::string& path);

/// The confinement of one sandbox; each part may be absent.
struct sandbox_confinement {
  uid_lease uid;
  /// Whether the sandbox directory is a tmpfs mounted for it.
  bool mounted = false;
  /// Its size in bytes, when mounted.
  uint64_t disk_bytes = 0;
  sandbox_cgroups cgroups;
};

} // namespace sv::detail
