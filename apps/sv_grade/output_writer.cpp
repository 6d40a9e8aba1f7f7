#include "apps/sv_grade/output_writer.hpp"

#include <cstdio>
#include <string>

namespace sv::grade {

namespace {

// At most ~10 redraws a second, and one at least that often while idle, so
// the rate and ETA keep moving when lines take long.
constexpr auto redraw_interval = std::chrono::milliseconds{100};

} // namespace

output_writer::output_writer(std::ostream& out, size_t window,
                             progress_options progress)
    : out_(out), window_(window == 0 ? 1 : window), progress_(progress),
      start_(std::chrono::steady_clock::now()), last_draw_(start_) {
  thread_ = std::thread{[this] { run(); }};
}

output_writer::~output_writer() {
  if (thread_.joinable()) {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      stopping_ = true;
    }
    queue_cv_.notify_one();
    thread_.join();
  }
}

void output_writer::acquire() {
  std::unique_lock<std::mutex> guard{mtx_};
  slot_cv_.wait(guard, [this] { return outstanding_ < window_; });
  ++outstanding_;
}

void output_writer::push(batch_entry entry) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    queue_.push_back(std::move(entry));
  }
  queue_cv_.notify_one();
}

bool output_writer::finish() {
  {
    std::unique_lock<std::mutex> guard{mtx_};
    slot_cv_.wait(guard, [this] { return outstanding_ == 0; });
    stopping_ = true;
  }
  queue_cv_.notify_one();
  thread_.join();
  if (progress_.enabled)
    draw_progress(true);
  return !write_failed_;
}

double output_writer::elapsed_s() const {
  std::chrono::duration<double> d = std::chrono::steady_clock::now() - start_;
  return d.count();
}

void output_writer::run() {
  std::deque<batch_entry> batch;
  for (;;) {
    {
      std::unique_lock<std::mutex> guard{mtx_};
      auto ready = [this] { return !queue_.empty() || stopping_; };
      if (progress_.enabled)
        queue_cv_.wait_for(guard, redraw_interval, ready);
      else
        queue_cv_.wait(guard, ready);
      if (queue_.empty() && stopping_)
        return;
      batch.swap(queue_);
    }
    for (auto& entry : batch)
      write(entry);
    auto written = batch.size();
    batch.clear();
    if (progress_.enabled)
      draw_progress(false);
    if (written > 0) {
      {
        std::lock_guard<std::mutex> guard{mtx_};
        outstanding_ -= written;
      }
      slot_cv_.notify_all();
    }
  }
}

void output_writer::write(const batch_entry& entry) {
  summary_.add(entry);
  if (write_failed_)
    return; // keep counting, so that finish() still returns
  auto parts = render_output_parts(entry);
  out_ << parts.head;
  if (parts.result_text != nullptr)
    out_.write(reinterpret_cast<const char*>(parts.result_text->data()),
               static_cast<std::streamsize>(parts.result_text->size()));
  out_ << parts.tail << '\n';
  out_.flush();
  write_failed_ = !out_;
}

void output_writer::draw_progress(bool final_draw) {
  auto now = std::chrono::steady_clock::now();
  if (!final_draw && now - last_draw_ < redraw_interval)
    return;
  last_draw_ = now;
  auto line = render_progress(summary_.lines(), progress_.total, elapsed_s());
  // \r and "erase to end of line": the bar overwrites itself.
  std::fprintf(stderr, "\r%s\033[K%s", line.c_str(), final_draw ? "\n" : "");
  std::fflush(stderr);
}

} // namespace sv::grade
