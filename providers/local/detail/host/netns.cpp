#include "providers/local/detail/host/netns.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <stdexcept>
#include <string>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

namespace sv::detail {

unique_fd make_empty_netns() {
  // A thread of its own enters the new namespace and ends: the calling
  // thread (an I/O thread of the provider) keeps the host's.
  unique_fd out;
  std::string failed;
  std::thread worker{[&] {
    if (::unshare(CLONE_NEWNET) != 0) {
      failed = std::string{"unshare(CLONE_NEWNET): "} + std::strerror(errno);
      return;
    }
    unique_fd sock{::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)};
    struct ifreq ifr {};
    std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
    if (!sock || ::ioctl(sock.get(), SIOCGIFFLAGS, &ifr) != 0) {
      failed = std::string{"cannot read the loopback's flags: "} +
               std::strerror(errno);
      return;
    }
    ifr.ifr_flags |= IFF_UP;
    if (::ioctl(sock.get(), SIOCSIFFLAGS, &ifr) != 0) {
      failed =
        std::string{"cannot bring the loopback up: "} + std::strerror(errno);
      return;
    }
    out.reset(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
    if (!out)
      failed = std::string{"cannot open /proc/thread-self/ns/net: "} +
               std::strerror(errno);
  }};
  worker.join();
  if (!failed.empty())
    throw std::runtime_error("cannot make a network namespace: " + failed);
  return out;
}

} // namespace sv::detail
