#include "providers/local/detail/io_pools.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace sv::detail {

namespace {

/// Threads of the background context: teardowns and the warm pool.
constexpr size_t background_threads = 2;

/// Half-way between this thread's niceness and the sandboxes' (absolute):
/// a teardown still wins a core from a runner. Lowering one's own priority
/// needs no privilege; Linux applies it to this thread only.
void lower_own_priority(int sandbox_nice) {
  auto tid = static_cast<id_t>(::syscall(SYS_gettid));
  errno = 0;
  auto now = ::getpriority(PRIO_PROCESS, tid);
  auto target = std::min((now + sandbox_nice + 1) / 2, 19);
  if (errno == 0 && target > now &&
      ::setpriority(PRIO_PROCESS, tid, target) != 0)
    spdlog::warn("local provider: cannot lower the priority of a "
                 "background thread: {}",
                 std::strerror(errno));
}

} // namespace

io_pools::io_pools()
    : io_work_(boost::asio::make_work_guard(io_)),
      img_work_(boost::asio::make_work_guard(img_)),
      bg_work_(boost::asio::make_work_guard(bg_)) {
  // nop
}

io_pools::~io_pools() {
  finish(std::chrono::seconds{0});
}

void io_pools::start(size_t io_threads, size_t image_threads,
                     int sandbox_nice) {
  std::lock_guard<std::mutex> guard{mtx_};
  for (size_t i = 0; i < io_threads; ++i) {
    ++running_io_;
    threads_.emplace_back([this] { run(io_, running_io_); });
  }
  for (size_t i = 0; i < image_threads; ++i) {
    ++running_img_;
    threads_.emplace_back([this] { run(img_, running_img_); });
  }
  for (size_t i = 0; i < background_threads; ++i) {
    ++running_bg_;
    threads_.emplace_back([this, sandbox_nice] {
      lower_own_priority(sandbox_nice);
      run(bg_, running_bg_);
    });
  }
}

void io_pools::run(boost::asio::io_context& ctx, size_t& running) {
  for (;;) {
    try {
      ctx.run();
      break;
    } catch (const std::exception& e) {
      spdlog::error("local provider: I/O handler failed: {}", e.what());
    }
  }
  std::lock_guard<std::mutex> guard{mtx_};
  --running;
  idle_.notify_all();
}

bool io_pools::finish(std::chrono::steady_clock::duration wait) {
  // Without its guard, run() returns once the work posted is done. The
  // caller path's guard goes only after the image threads are gone (a
  // create goes on there), the background's only after the caller path's:
  // a stop on a strand may still hand its teardown over.
  img_work_.reset();
  bool done = false;
  {
    auto until = std::chrono::steady_clock::now() + wait;
    std::unique_lock<std::mutex> guard{mtx_};
    done = idle_.wait_until(guard, until, [this] { return running_img_ == 0; });
    if (done) {
      guard.unlock();
      io_work_.reset();
      guard.lock();
      done =
        idle_.wait_until(guard, until, [this] { return running_io_ == 0; });
    }
    if (done) {
      guard.unlock();
      bg_work_.reset();
      guard.lock();
      done =
        idle_.wait_until(guard, until, [this] { return running_bg_ == 0; });
    }
  }
  if (!done) {
    io_work_.reset();
    bg_work_.reset();
    img_.stop();
    io_.stop();
    bg_.stop();
  }
  for (auto& t : threads_)
    if (t.joinable())
      t.join();
  threads_.clear();
  return done;
}

} // namespace sv::detail
