#pragma once

// The middleman set-up fronts and nodes share: BASP heartbeats so that a
// peer that stops answering without closing its connection (SIGSTOP, a
// partition) is noticed within seconds, and optionally TLS through
// libcaf_openssl with the peer verified against a CA.

#include <string>

namespace caf {
class actor_system_config;
class actor_system;
} // namespace caf

namespace sv {

struct tls_files {
  std::string cert;
  std::string key;
  std::string ca;
  bool enabled() const { return !cert.empty(); }
};

/// Heartbeat interval and connection timeout of every middleman we start.
inline constexpr int heartbeat_interval_ms = 500;
inline constexpr int connection_timeout_ms = 3000;

/// Loads the middleman (and the openssl manager when `tls` is enabled) into
/// `cfg`. Throws std::runtime_error when a TLS file is unreadable.
void configure_middleman(caf::actor_system_config& cfg, const tls_files& tls);

} // namespace sv
