#pragma once

// Input lines of sv-grade, read from a file descriptor with a bound on a
// line's length (a longer line is skipped, never buffered whole) and a wake
// descriptor that stops a read blocked on a quiet pipe (a signal's way to
// say "stop reading").

#include <cstddef>
#include <cstdint>
#include <string>

namespace sv::grade {

class line_reader {
public:
  enum class status {
    line,     ///< `text` holds the next line, without its newline.
    too_long, ///< the next line had more than `max_bytes`; `skipped` says
              ///< how many bytes it had; nothing of it is kept.
    end,      ///< no more input.
    error,    ///< reading failed; `error()` says why.
    stopped,  ///< the wake descriptor became readable.
  };

  /// Reads `fd` (not owned); `wake_fd` (or -1) interrupts a blocked read.
  line_reader(int fd, int wake_fd, size_t max_bytes);

  status next(std::string& text);

  /// The size of the line skipped by the last `too_long`.
  uint64_t skipped() const noexcept { return skipped_; }

  /// Why the last `error` happened (strerror).
  const std::string& error() const noexcept { return error_; }

private:
  /// Reads more into `buf_`; returns `line` when something was read.
  status fill();

  int fd_;
  int wake_fd_;
  size_t max_bytes_;
  std::string buf_;
  size_t pos_ = 0;
  /// Where to look for the next newline (bytes before it have none).
  size_t scan_ = 0;
  bool eof_ = false;
  bool discarding_ = false;
  uint64_t skipped_ = 0;
  std::string error_;
};

} // namespace sv::grade
