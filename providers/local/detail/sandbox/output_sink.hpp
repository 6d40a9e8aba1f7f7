#pragma once

// Where the output of an exec goes. Runners write into pipes that the
// provider drains on its I/O threads, so a runner is never blocked or
// killed for writing: what exceeds the cap is read and dropped, and no disk
// fills up however much it writes.

#include <cstdint>
#include <string>

namespace sv::detail {

/// One output stream of an exec: captured in memory (stdout or stderr of a
/// command without a log) or appended to the runner log. Either way at most
/// `cap` bytes are kept.
class output_sink {
public:
  /// Keeps the first `cap` bytes in memory.
  static output_sink capture(uint64_t cap);

  /// Appends to the log `fd` (not owned): the stream's first bytes up to
  /// the cap less a reserve, then, at `finish`, a note on what was dropped
  /// and the stream's last `log_tail_bytes`, so the log's tail is always
  /// the end of the output.
  static output_sink log(int fd, uint64_t cap);

  /// Takes `n` bytes of the stream.
  void write(const char* data, size_t n);

  /// Ends the stream: writes what a log held back.
  void finish();

  /// Bytes of the stream seen so far.
  uint64_t total() const { return total_; }

  /// Bytes not kept.
  uint64_t dropped() const { return dropped_; }

  /// The captured text (capture mode).
  std::string& text() { return text_; }

  /// Why writing to the log failed, or "".
  const std::string& write_error() const { return write_error_; }

private:
  output_sink(int fd, uint64_t cap);

  void append_log(const char* data, size_t n);
  /// Writes all of `data` to the log, unless a write failed before.
  void write_all(const char* data, size_t n);

  int fd_;
  uint64_t cap_;
  /// Bytes a log takes before holding back the tail.
  uint64_t head_;
  /// Bytes of the head taken so far.
  uint64_t in_head_ = 0;
  uint64_t total_ = 0;
  uint64_t dropped_ = 0;
  /// Captured text, or a log's held-back tail.
  std::string text_;
  std::string write_error_;
};

} // namespace sv::detail
