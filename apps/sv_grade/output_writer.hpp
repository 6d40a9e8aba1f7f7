#pragma once

// The writer thread of sv-grade and its window. The reader thread takes a
// slot per input line (blocking while `window` lines are outstanding); any
// thread pushes finished entries; the writer thread writes each line with
// one write loop straight to the descriptor, counts it in the summary, draws
// the progress bar and frees the slot. Writing off the actor threads keeps a
// slow output from ever blocking a CAF scheduler thread.
//
// A write error (EPIPE, ENOSPC, EIO) is noticed at the line it hits: the
// line is cut back off a regular file (no torn last line), the writer
// aborts (nothing more is written, `acquire` and `finish` return at once)
// and `on_abort` tells the batch to stop.

#include "apps/sv_grade/batch_line.hpp"
#include "apps/sv_grade/summary.hpp"

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace sv::grade {

/// The terminal (stderr) shared by the progress bar and the log: a log line
/// clears the bar, prints, and redraws it, so the two never interleave.
class terminal_bar {
public:
  /// Whether a bar is drawn at all.
  explicit terminal_bar(bool enabled) : enabled_(enabled) {}

  bool enabled() const noexcept { return enabled_; }

  /// Replaces the bar's text and draws it; `final_draw` ends its line.
  void draw(const std::string& text, bool final_draw);

  /// Writes `text` (ending in a newline) above the bar.
  void print(const std::string& text);

private:
  const bool enabled_;
  std::mutex mtx_;
  std::string bar_;
  bool done_ = false;
};

struct progress_options {
  /// Where to draw the bar (on a terminal only); null for none.
  terminal_bar* bar = nullptr;
  /// Lines in the input, when known.
  std::optional<uint64_t> total;
};

class output_writer {
public:
  /// Starts the thread. `fd` (not owned) must stay open until `finish()`.
  output_writer(int fd, size_t window, progress_options progress,
                std::function<void()> on_abort = {});

  output_writer(const output_writer&) = delete;
  output_writer& operator=(const output_writer&) = delete;

  /// Joins the thread if `finish` was not called.
  ~output_writer();

  /// Takes a slot; blocks while `window` lines are outstanding. Returns
  /// false (taking none) once `close` or `abort` was called.
  bool acquire();

  /// Queues the entry of a slot taken with `acquire`; never blocks for long.
  void push(batch_entry entry);

  /// No more slots: wakes a reader blocked in `acquire`.
  void close();

  /// Stops at once: nothing more is written, `finish` returns.
  void abort();

  /// Waits until every slot's line is written (or `abort`), then stops the
  /// thread. Returns false when writing the output failed.
  bool finish();

  /// Why writing failed ("No space left on device"); empty if it did not.
  std::string failure() const;

  /// Lines written so far... after `finish`, all of them.
  uint64_t written() const;

  /// Lines taken with `acquire` but never written (after `finish`).
  uint64_t unwritten() const;

  /// Valid after `finish`.
  const batch_summary& summary() const noexcept { return summary_; }

  /// After `finish`, for adding what only the caller knows (stats, memory).
  batch_summary& summary_for_update() noexcept { return summary_; }

  /// Seconds since construction.
  double elapsed_s() const;

private:
  void run();
  void write(const batch_entry& entry);
  /// Writes all of `data`; false (and `failure_` set) on an error.
  bool write_all(const char* data, size_t n);
  void fail(int err);
  void draw_progress(bool final_draw);

  const int fd_;
  const size_t window_;
  const progress_options progress_;
  const std::function<void()> on_abort_;
  const std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
  batch_summary summary_;
  /// Where the next line starts, on a regular file (-1 otherwise).
  int64_t offset_ = -1;

  mutable std::mutex mtx_;
  std::condition_variable queue_cv_;
  std::condition_variable slot_cv_;
  std::deque<batch_entry> queue_;
  size_t outstanding_ = 0;
  uint64_t written_ = 0;
  bool closed_ = false;
  bool aborted_ = false;
  bool stopping_ = false;
  std::string failure_;
  std::thread thread_;
};

} // namespace sv::grade
