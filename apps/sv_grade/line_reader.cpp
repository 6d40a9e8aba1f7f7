#include "apps/sv_grade/line_reader.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <poll.h>
#include <unistd.h>

namespace sv::grade {

namespace {

constexpr size_t chunk_bytes = 1 << 16;

} // namespace

line_reader::line_reader(int fd, int wake_fd, size_t max_bytes)
    : fd_(fd), wake_fd_(wake_fd), max_bytes_(max_bytes == 0 ? 1 : max_bytes) {}

line_reader::status line_reader::next(std::string& text) {
  for (;;) {
    auto nl = buf_.find('\n', std::max(pos_, scan_));
    if (nl != std::string::npos) {
      auto len = nl - pos_;
      if (discarding_) {
        skipped_ += len;
        discarding_ = false;
        pos_ = nl + 1;
        return status::too_long;
      }
      if (len > max_bytes_) {
        skipped_ = len;
        pos_ = nl + 1;
        return status::too_long;
      }
      text.assign(buf_, pos_, len);
      pos_ = nl + 1;
      return status::line;
    }
    // No newline in what is buffered: drop what was consumed, and what
    // cannot be part of an acceptable line.
    buf_.erase(0, pos_);
    pos_ = 0;
    scan_ = buf_.size(); // searched already: no newline there
    if (!discarding_ && buf_.size() > max_bytes_) {
      discarding_ = true;
      skipped_ = 0;
    }
    if (discarding_) {
      skipped_ += buf_.size();
      buf_.clear();
      scan_ = 0;
    }
    if (eof_) {
      if (discarding_) {
        discarding_ = false;
        return status::too_long;
      }
      if (buf_.empty())
        return status::end;
      text.swap(buf_);
      buf_.clear();
      scan_ = 0;
      return status::line;
    }
    if (auto st = fill(); st != status::line)
      return st;
  }
}

line_reader::status line_reader::fill() {
  for (;;) {
    pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    auto n = ::poll(fds, wake_fd_ >= 0 ? 2 : 1, -1);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      error_ = std::strerror(errno);
      return status::error;
    }
    if (wake_fd_ >= 0 && fds[1].revents != 0)
      return status::stopped;
    if (fds[0].revents == 0)
      continue;
    auto old = buf_.size();
    buf_.resize(old + chunk_bytes);
    auto got = ::read(fd_, buf_.data() + old, chunk_bytes);
    if (got < 0) {
      buf_.resize(old);
      if (errno == EINTR || errno == EAGAIN)
        continue;
      error_ = std::strerror(errno);
      return status::error;
    }
    buf_.resize(old + static_cast<size_t>(got));
    if (got == 0)
      eof_ = true;
    return status::line;
  }
}

} // namespace sv::grade
