#pragma once

// How sv-grade hears SIGINT, SIGTERM and SIGHUP: the handlers only write the
// signal's number to a pipe (async-signal-safe, SA_RESTART so no other
// thread's call fails with EINTR); a watcher thread reads it and calls
// `on_first` for the first signal and `on_again` for any later one. SIGPIPE
// gets an empty handler: a write to a closed pipe fails with EPIPE, which
// the writer reports. Handlers (unlike SIG_IGN) are reset by exec, so
// sandboxed processes start with the default dispositions.

#include <atomic>
#include <functional>
#include <thread>

namespace sv::grade {

class signal_watch {
public:
  /// Installs the handlers and starts the watcher.
  signal_watch(std::function<void(int)> on_first,
               std::function<void(int)> on_again);

  signal_watch(const signal_watch&) = delete;
  signal_watch& operator=(const signal_watch&) = delete;

  /// Restores the default handlers and joins the watcher.
  ~signal_watch();

  /// The first signal received, or 0.
  int first() const noexcept { return first_.load(); }

  /// "SIGINT" for SIGINT, and so on.
  static const char* name(int sig);

private:
  void run();

  std::function<void(int)> on_first_;
  std::function<void(int)> on_again_;
  std::atomic<int> first_{0};
  int pipe_[2] = {-1, -1};
  std::thread thread_;
};

} // namespace sv::grade
