#pragma once

// sv-grade's files: the input, the output (truncated, or kept and appended
// to with --resume) and the summary file, opened once before grading starts,
// so that every usage error is found before anything is written.

#include "apps/common/cli.hpp"
#include "apps/sv_grade/resume.hpp"

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <unistd.h>

namespace sv::grade {

/// A problem with how sv-grade was called: message, exit status 2.
using usage_error = cli::usage_error;

/// An owned file descriptor.
struct fd_guard {
  int fd = -1;
  fd_guard() = default;
  explicit fd_guard(int x) : fd(x) {}
  fd_guard(const fd_guard&) = delete;
  fd_guard& operator=(const fd_guard&) = delete;
  ~fd_guard() {
    if (fd >= 0)
      ::close(fd);
  }
};

struct batch_io {
  int in = STDIN_FILENO;
  int out = STDOUT_FILENO;
  fd_guard in_file;
  fd_guard out_file;
  fd_guard summary_file;
  /// Lines in the input, when it is a file.
  std::optional<uint64_t> total;
  answered_lines answered;
  /// Wakes the reader (a signal or a write error says stop).
  fd_guard wake;
};

/// What to open: paths as given on the command line ("-" for stdin/out).
struct io_request {
  std::string input;
  std::string output;
  std::string summary_json;
  bool resume = false;
};

/// Opens input, output and summary; refuses an output that is the input
/// (any path to the same inode) before anything is opened for writing.
/// Throws usage_error, or std::runtime_error for an I/O failure.
void open_io(const io_request& opts, batch_io& io);

/// Lines in the regular file open at `fd` (a last line without newline
/// counts), read by offset: the descriptor's own offset does not move.
uint64_t count_lines(int fd);

} // namespace sv::grade
