#pragma once

// Uids for sandboxes: each live sandbox on the host runs as its own uid, a
// lease on a lock file (flock), so no two sandboxes share one, even of two
// providers. Calls block briefly: use them on an I/O thread.

#include "providers/local/host/unique_fd.hpp"

#include <atomic>
#include <cstdint>
#include <string>

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

} // namespace sv::detail
