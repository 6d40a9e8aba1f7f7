#pragma once

// Uids for sandboxes: each live sandbox on the host runs as its own uid, a
// lease on a lock file (flock), so no two sandboxes share one, even of two
// providers. A uid is never leased while any process of it is alive, and
// its kernel keyrings are cleared when it is leased. Calls block briefly:
// use them on an I/O thread.

#include "providers/local/detail/host/unique_fd.hpp"

#include <atomic>
#include <cstdint>
#include <string>

namespace sv::detail {

/// An unprivileged uid (and gid of the same number) held for one sandbox;
/// its lock file is removed when the lease ends.
class uid_lease {
public:
  uid_lease() = default;
  uid_lease(int64_t uid, unique_fd lock, std::string path);
  uid_lease(uid_lease&& other) noexcept;
  uid_lease& operator=(uid_lease&& other) noexcept;
  ~uid_lease() { release(); }

  /// The uid; -1 when none is held.
  int64_t uid = -1;

  /// Gives the uid back: removes the lock file, then unlocks.
  void release() noexcept;

private:
  unique_fd lock_;
  std::string path_;
};

/// A range of uids handed to sandboxes, shared by every provider on the
/// host through lock files.
class uid_pool {
public:
  uid_pool(std::string lock_dir, uint32_t base, uint32_t count);

  /// A free uid of the range (no lease on it, no process of it alive), its
  /// keyrings cleared, or an empty lease when all are taken. Throws
  /// std::runtime_error when the lock directory cannot be used.
  uid_lease lease();

  /// Removes lock files nobody holds (left by providers before leases
  /// removed theirs, or by a crash); returns how many.
  size_t remove_stale_locks();

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

/// The lowest base at or above 65536 of `count` uids (and gids) that
/// overlaps no subordinate id range of the host (/etc/subuid, /etc/subgid,
/// and the range login.defs lets useradd hand out: SUB_UID_MIN ..
/// SUB_UID_MAX + SUB_UID_COUNT, the same for gids) and no user or group of
/// /etc/passwd, /etc/group. `etc` is the directory read (tests).
uint32_t free_uid_base(uint32_t count, const std::string& etc = "/etc");

/// Whether any process (any of its real, effective, saved or fs uids) runs
/// as `uid`.
bool uid_in_use(int64_t uid);

/// Whether process `pid` runs as `uid` (any of its uids).
bool process_has_uid(int pid, int64_t uid);

/// Clears the user and user-session keyrings of `uid` (a helper process
/// that becomes `uid`, as root). Returns what failed, or "".
std::string clear_keyrings(int64_t uid);

} // namespace sv::detail
