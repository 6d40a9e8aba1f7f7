#include "messages/detail/endpoint.hpp"

#include <arpa/inet.h>
#include <cstring>
#include <netdb.h>
#include <netinet/in.h>
#include <stdexcept>
#include <sys/socket.h>

namespace sv {

namespace {

bool loopback_v4(const in_addr& a) {
  return (ntohl(a.s_addr) >> 24) == 127;
}

bool loopback_v6(const in6_addr& a) {
  if (IN6_IS_ADDR_LOOPBACK(&a))
    return true;
  if (!IN6_IS_ADDR_V4MAPPED(&a))
    return false;
  in_addr v4;
  std::memcpy(&v4, a.s6_addr + 12, sizeof v4);
  return loopback_v4(v4);
}

/// True when `host` is an IP literal; `loopback` then says whether it is one.
bool literal(const std::string& host, bool& loopback) {
  in_addr v4;
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    loopback = loopback_v4(v4);
    return true;
  }
  in6_addr v6;
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    loopback = loopback_v6(v6);
    return true;
  }
  return false;
}

} // namespace

endpoint parse_endpoint(const std::string& text, port_zero zero) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    throw std::invalid_argument("expected HOST:PORT");
  endpoint out;
  out.host = text.substr(0, colon);
  if (out.host.front() == '[') {
    if (out.host.size() < 3 || out.host.back() != ']')
      throw std::invalid_argument("expected HOST:PORT");
    out.host = out.host.substr(1, out.host.size() - 2);
  } else if (out.host.find(':') != std::string::npos) {
    throw std::invalid_argument("expected HOST:PORT"); // v6 without brackets
  }
  auto digits = text.substr(colon + 1);
  if (digits.size() > 5 ||
      digits.find_first_not_of("0123456789") != std::string::npos)
    throw std::invalid_argument("bad port");
  auto port = std::stoul(digits);
  if (port > 65535 || (port == 0 && zero == port_zero::refused))
    throw std::invalid_argument("bad port");
  out.port = static_cast<uint16_t>(port);
  return out;
}

bool is_loopback_host(const std::string& host) {
  bool loopback = false;
  if (literal(host, loopback))
    return loopback;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (host.empty() || getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0)
    return false;
  bool all = found != nullptr;
  for (auto* i = found; i != nullptr && all; i = i->ai_next) {
    if (i->ai_family == AF_INET)
      all = loopback_v4(reinterpret_cast<sockaddr_in*>(i->ai_addr)->sin_addr);
    else if (i->ai_family == AF_INET6)
      all = loopback_v6(reinterpret_cast<sockaddr_in6*>(i->ai_addr)->sin6_addr);
    else
      all = false;
  }
  freeaddrinfo(found);
  return all;
}

} // namespace sv
