#pragma once

// The writer thread of sv-grade and its window. The reader thread takes a
// slot per input line (blocking while `window` lines are outstanding); any
// thread pushes finished entries; the writer thread writes and flushes each
// line at once, counts it in the summary, draws the progress bar and frees
// the slot. Writing off the actor threads keeps a slow output from ever
// blocking a CAF scheduler thread.

#include "apps/sv_grade/batch_line.hpp"
#include "apps/sv_grade/summary.hpp"

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <ostream>
#include <thread>

namespace sv::grade {

struct progress_options {
  /// Draw the bar (on a terminal only).
  bool enabled = false;
  /// Lines in the input, when known.
  std::optional<uint64_t> total;
};

class output_writer {
public:
  /// Starts the thread. `out` must outlive `finish()`.
  output_writer(std::ostream& out, size_t window, progress_options progress);

  output_writer(const output_writer&) = delete;
  output_writer& operator=(const output_writer&) = delete;

  /// Joins the thread if `finish` was not called.
  ~output_writer();

  /// Takes a slot; blocks while `window` lines are outstanding.
  void acquire();

  /// Queues the entry of a slot taken with `acquire`; never blocks for long.
  void push(batch_entry entry);

  /// Waits until every slot's line is written, then stops the thread.
  /// Returns false when writing the output failed.
  bool finish();

  /// Valid after `finish`.
  const batch_summary& summary() const noexcept { return summary_; }

  /// After `finish`, for adding what only the caller knows (stats, memory).
  batch_summary& summary_for_update() noexcept { return summary_; }

  /// Seconds since construction.
  double elapsed_s() const;

private:
  void run();
  void write(const batch_entry& entry);
  void draw_progress(bool final_draw);

  std::ostream& out_;
  const size_t window_;
  const progress_options progress_;
  const std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
  batch_summary summary_;
  bool write_failed_ = false;

  std::mutex mtx_;
  std::condition_variable queue_cv_;
  std::condition_variable slot_cv_;
  std::deque<batch_entry> queue_;
  size_t outstanding_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

} // namespace sv::grade
