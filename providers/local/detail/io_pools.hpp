#pragma once

// The local registry's three thread pools: the caller path (creates, uploads,
// execs, downloads, stops a caller waits for), the images (a create's pull
// and unpack, and its wait for another create's pull of the same image:
// a slow registry never holds a caller-path thread) and the background
// (teardowns behind their reply, the warm pool), on threads below the
// caller path's priority. A private header of the local provider (Asio).

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <thread>
#include <vector>

namespace sv::detail {

class io_pools {
public:
  io_pools();
  ~io_pools();

  io_pools(const io_pools&) = delete;
  io_pools& operator=(const io_pools&) = delete;

  /// The caller path.
  boost::asio::io_context& io() { return io_; }

  /// The images' pulls and unpacks (then a create goes on on io()).
  boost::asio::io_context& images() { return img_; }

  /// The background.
  boost::asio::io_context& bg() { return bg_; }

  /// Starts `io_threads` caller-path threads, `image_threads` image threads
  /// and the background's, niced half-way from the caller's niceness to
  /// `sandbox_nice` (absolute).
  void start(size_t io_threads, size_t image_threads, int sandbox_nice);

  /// Lets the pools finish what they hold, the images first (a create
  /// goes on on the caller path), then the caller path (its stops may
  /// still hand teardowns to the background), for up to `wait`;
  /// then abandons what is left and joins every thread. False if work had
  /// to be abandoned.
  bool finish(std::chrono::steady_clock::duration wait);

private:
  using guard_type =
    boost::asio::executor_work_guard<boost::asio::io_context::executor_type>;

  void run(boost::asio::io_context& ctx, size_t& running);

  boost::asio::io_context io_;
  guard_type io_work_;
  boost::asio::io_context img_;
  guard_type img_work_;
  boost::asio::io_context bg_;
  guard_type bg_work_;
  std::vector<std::thread> threads_;
  std::mutex mtx_;
  std::condition_variable idle_;
  size_t running_io_ = 0;
  size_t running_img_ = 0;
  size_t running_bg_ = 0;
};

} // namespace sv::detail
