#pragma once

// An owned file descriptor, closed on destruction.

#include <unistd.h>
#include <utility>

namespace sv::detail {

class unique_fd {
public:
  unique_fd() = default;

  explicit unique_fd(int fd) noexcept : fd_(fd) {}

  unique_fd(unique_fd&& other) noexcept : fd_(other.release()) {}

  unique_fd& operator=(unique_fd&& other) noexcept {
    if (this != &other)
      reset(other.release());
    return *this;
  }

  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;

  ~unique_fd() { reset(); }

  /// The descriptor, or -1.
  int get() const noexcept { return fd_; }

  /// Whether a descriptor is held.
  explicit operator bool() const noexcept { return fd_ >= 0; }

  /// Gives up ownership.
  int release() noexcept { return std::exchange(fd_, -1); }

  /// Closes the held descriptor and takes `fd`.
  void reset(int fd = -1) noexcept {
    if (fd_ >= 0)
      ::close(fd_);
    fd_ = fd;
  }

private:
  int fd_ = -1;
};

} // namespace sv::detail
