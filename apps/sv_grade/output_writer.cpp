#include "apps/sv_grade/output_writer.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

namespace sv::grade {

namespace {

// At most ~10 redraws a second, and one at least that often while idle, so
// the rate and ETA keep moving when lines take long.
constexpr auto redraw_interval = std::chrono::milliseconds{100};

void write_stderr(const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    auto n = ::write(STDERR_FILENO, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return;
    done += static_cast<size_t>(n);
  }
}

} // namespace

// -- terminal_bar -------------------------------------------------------------

void terminal_bar::draw(const std::string& text, bool final_draw) {
  std::lock_guard<std::mutex> guard{mtx_};
  if (!enabled_ || done_)
    return;
  bar_ = text;
  // \r and "erase to end of line": the bar overwrites itself.
  write_stderr("\r" + bar_ + "\033[K" + (final_draw ? "\n" : ""));
  done_ = final_draw;
}

void terminal_bar::print(const std::string& text) {
  std::lock_guard<std::mutex> guard{mtx_};
  if (!enabled_ || done_ || bar_.empty()) {
    write_stderr(text);
    return;
  }
  write_stderr("\r\033[K" + text + "\r" + bar_ + "\033[K");
}

// -- output_writer ------------------------------------------------------------

output_writer::output_writer(int fd, size_t window, progress_options progress,
                             std::function<void()> on_abort)
    : fd_(fd), window_(window == 0 ? 1 : window), progress_(progress),
      on_abort_(std::move(on_abort)), start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {
  struct stat st;
  if (::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode))
    offset_ = ::lseek(fd_, 0, SEEK_CUR);
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

bool output_writer::acquire() {
  std::unique_lock<std::mutex> guard{mtx_};
  slot_cv_.wait(
    guard, [this] { return outstanding_ < window_ || closed_ || aborted_; });
  if (closed_ || aborted_)
    return false;
  ++outstanding_;
  return true;
}

void output_writer::push(batch_entry entry) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (aborted_)
      return;
    queue_.push_back(std::move(entry));
  }
  queue_cv_.notify_one();
}

void output_writer::close() {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    closed_ = true;
  }
  slot_cv_.notify_all();
}

void output_writer::abort() {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    aborted_ = true;
    queue_.clear();
  }
  slot_cv_.notify_all();
  queue_cv_.notify_one();
}

bool output_writer::finish() {
  {
    std::unique_lock<std::mutex> guard{mtx_};
    slot_cv_.wait(guard, [this] { return outstanding_ == 0 || aborted_; });
    stopping_ = true;
  }
  queue_cv_.notify_one();
  if (thread_.joinable())
    thread_.join();
  if (progress_.bar != nullptr)
    draw_progress(true);
  return failure().empty();
}

std::string output_writer::failure() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return failure_;
}

uint64_t output_writer::written() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return written_;
}

uint64_t output_writer::unwritten() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return outstanding_;
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
      auto ready = [this] { return !queue_.empty() || stopping_ || aborted_; };
      if (progress_.bar != nullptr)
        queue_cv_.wait_for(guard, redraw_interval, ready);
      else
        queue_cv_.wait(guard, ready);
      if (aborted_ || (queue_.empty() && stopping_))
        return;
      batch.swap(queue_);
    }
    uint64_t n_written = 0;
    for (auto& entry : batch) {
      write(entry);
      std::lock_guard<std::mutex> guard{mtx_};
      if (aborted_)
        return;
      ++n_written;
    }
    batch.clear();
    if (progress_.bar != nullptr)
      draw_progress(false);
    if (n_written > 0) {
      {
        std::lock_guard<std::mutex> guard{mtx_};
        outstanding_ -= n_written;
        written_ += n_written;
      }
      slot_cv_.notify_all();
    }
  }
}

void output_writer::write(const batch_entry& entry) {
  auto parts = render_output_parts(entry);
  parts.tail += '\n';
  bool ok = write_all(parts.head.data(), parts.head.size());
  if (ok && parts.result_text != nullptr)
    ok = write_all(reinterpret_cast<const char*>(parts.result_text->data()),
                   parts.result_text->size());
  if (ok)
    ok = write_all(parts.tail.data(), parts.tail.size());
  if (!ok)
    return;
  summary_.add(entry);
  if (offset_ >= 0)
    offset_ += static_cast<int64_t>(
      parts.head.size() + parts.tail.size() +
      (parts.result_text != nullptr ? parts.result_text->size() : 0));
}

bool output_writer::write_all(const char* data, size_t n) {
  while (n > 0) {
    auto got = ::write(fd_, data, n);
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0) {
      fail(got < 0 ? errno : EIO);
      return false;
    }
    data += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

void output_writer::fail(int err) {
  // Cut a torn line off a regular file: the output ends with a whole line.
  if (offset_ >= 0 && ::ftruncate(fd_, offset_) != 0) {
    // Nothing more to do: the failure below is what the user needs.
  }
  {
    std::lock_guard<std::mutex> guard{mtx_};
    failure_ = std::strerror(err);
    aborted_ = true;
    queue_.clear();
  }
  slot_cv_.notify_all();
  if (on_abort_)
    on_abort_();
}

void output_writer::draw_progress(bool final_draw) {
  auto now = std::chrono::steady_clock::now();
  if (!final_draw && now - last_draw_ < redraw_interval)
    return;
  last_draw_ = now;
  progress_.bar->draw(
    render_progress(summary_.lines(), progress_.total, elapsed_s()),
    final_draw);
}

} // namespace sv::grade
