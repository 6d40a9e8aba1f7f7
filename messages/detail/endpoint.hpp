#pragma once

// HOST:PORT as every program takes it (sv-serve's --listen and
// --metrics-listen, sv-node's --listen and --join, a nodes block's
// `endpoints` and `listen`), and the one loopback rule.

#include <cstdint>
#include <string>

namespace sv {

/// A parsed HOST:PORT; `host` without the brackets of `[V6]:PORT`.
struct endpoint {
  std::string host;
  uint16_t port = 0;
};

/// Whether port 0 ("any free one", to listen) is accepted.
enum class port_zero { refused, allowed };

/// Parses "HOST:PORT" or "[V6]:PORT" (the port: digits only, 1..65535, or 0
/// when `zero` allows it). Throws std::invalid_argument whose message is
/// "expected HOST:PORT" or "bad port" (callers prefix the option or key).
endpoint parse_endpoint(const std::string& text,
                        port_zero zero = port_zero::refused);

/// Whether `host` is loopback, by address: an IP literal as it is
/// (127.0.0.0/8, ::1, ::ffff:127.x.y.z), a name by what it resolves to
/// (every address loopback; a name that does not resolve is not loopback,
/// `127.example.com` no more than any other name). A name blocks on the
/// resolver: call it where blocking is fine (start-up, the main thread).
bool is_loopback_host(const std::string& host);

} // namespace sv
