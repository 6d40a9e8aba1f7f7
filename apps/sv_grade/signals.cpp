#include "apps/sv_grade/signals.hpp"

#include <cerrno>
#include <csignal>
#include <fcntl.h>
#include <stdexcept>
#include <unistd.h>

namespace sv::grade {

namespace {

volatile std::sig_atomic_t signal_fd = -1;

constexpr int watched[] = {SIGINT, SIGTERM, SIGHUP};

extern "C" void on_signal(int sig) {
  auto saved = errno;
  auto c = static_cast<unsigned char>(sig);
  if (signal_fd >= 0 && ::write(signal_fd, &c, 1) < 0) {
    // A full pipe already holds enough signals to act on.
  }
  errno = saved;
}

extern "C" void on_sigpipe(int) {
  // Nothing: the failed write's EPIPE says it.
}

void install(int sig, void (*handler)(int)) {
  struct sigaction sa {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(sig, &sa, nullptr);
}

} // namespace

signal_watch::signal_watch(std::function<void(int)> on_first,
                           std::function<void(int)> on_again)
    : on_first_(std::move(on_first)), on_again_(std::move(on_again)) {
  if (::pipe2(pipe_, O_CLOEXEC | O_NONBLOCK) != 0)
    throw std::runtime_error("cannot create the signal pipe");
  // The reading end blocks; the handler's end must never block.
  ::fcntl(pipe_[0], F_SETFL, 0);
  signal_fd = pipe_[1];
  for (int sig : watched)
    install(sig, on_signal);
  install(SIGPIPE, on_sigpipe);
  thread_ = std::thread{[this] { run(); }};
}

signal_watch::~signal_watch() {
  for (int sig : watched)
    install(sig, SIG_DFL);
  unsigned char stop = 0;
  while (::write(pipe_[1], &stop, 1) < 0 && errno == EINTR) {
  }
  thread_.join();
  signal_fd = -1;
  ::close(pipe_[0]);
  ::close(pipe_[1]);
}

const char* signal_watch::name(int sig) {
  switch (sig) {
  case SIGINT:
    return "SIGINT";
  case SIGTERM:
    return "SIGTERM";
  case SIGHUP:
    return "SIGHUP";
  default:
    return "a signal";
  }
}

void signal_watch::run() {
  for (;;) {
    unsigned char c = 0;
    auto n = ::read(pipe_[0], &c, 1);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0 || c == 0)
      return;
    int expected = 0;
    if (first_.compare_exchange_strong(expected, c))
      on_first_(c);
    else
      on_again_(c);
  }
}

} // namespace sv::grade
