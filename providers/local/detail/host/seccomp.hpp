#pragma once

// The seccomp filter of every bwrap sandbox: system calls that reach kernel
// surface a runner never needs, or that cross the namespaces the sandbox
// lives in (keyrings, AF_VSOCK), fail with EPERM (ENOSYS for clone3, so
// glibc falls back to clone, whose flags the filter can see). Built once per
// provider with libseccomp; bwrap loads it (`--seccomp FD`) right before it
// runs the command.

#include "providers/local/detail/host/unique_fd.hpp"

#include <string>
#include <vector>

namespace sv::detail {

/// A compiled filter, kept in a sealed memfd.
class seccomp_filter {
public:
  /// Compiles the filter; `allow_user_namespaces` leaves unshare/clone with
  /// CLONE_NEWUSER (and clone3) open. Throws std::runtime_error.
  explicit seccomp_filter(bool allow_user_namespaces);

  /// A new read-only descriptor of the program, at offset 0 (bwrap reads
  /// it to its end), close-on-exec. -1 with errno on failure.
  int open_program() const;

  /// What the filter denies, one entry a rule group, for the start log.
  const std::vector<std::string>& denied() const { return denied_; }

private:
  unique_fd memfd_;
  std::vector<std::string> denied_;
};

} // namespace sv::detail
