#pragma once

// Which compatible routes take calls without a bearer token, and from where
// (`--open-routes run_code,execute --open-from 10.0.0.0/8`): SandboxFusion's
// and NeMo-Skills' clients send no token, so an operator may serve them to
// a trusted network, declared explicitly. Loopback is always among the
// networks; nothing else is unless listed. No sockets, no actors.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sv::serve {

/// One network: an address prefix (IPv4 addresses as IPv4-mapped IPv6).
struct ip_network {
  std::array<uint8_t, 16> prefix{};
  unsigned bits = 0; // of the 128
  std::string text;  // as the operator wrote it

  bool contains(const std::array<uint8_t, 16>& address) const;
};

class open_routes {
public:
  /// `routes`: comma-separated names among run_code and execute;
  /// `networks`: comma-separated CIDRs (ADDRESS or ADDRESS/BITS). Throws
  /// std::invalid_argument naming the flag and the value.
  open_routes(const std::string& routes, const std::string& networks);
  open_routes() = default;

  /// No route is open.
  bool none() const { return !run_code_ && !execute_; }

  /// Whether a call to `path` from `peer` (an IP address as text) needs no
  /// token.
  bool open_to(std::string_view path, const std::string& peer) const;

  /// The warning logged at start: what is open and to whom.
  std::string describe() const;

private:
  bool run_code_ = false;
  bool execute_ = false;
  std::vector<ip_network> networks_;
};

} // namespace sv::serve
