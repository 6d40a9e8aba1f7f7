#pragma once

// The middleman set-up fronts and nodes share: BASP heartbeats so that a
// peer that stops answering without closing its connection (SIGSTOP, a
// partition) is noticed within seconds, and the BASP gate
// (transport/basp_gate.hpp): mutual TLS with identities from certificates,
// frame checks, CAF itself on no TCP port.

#include <cstdint>
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

/// What a front or node says when it has neither TLS files nor insecure.
std::string tls_missing_hint(const std::string& role);

/// Loads the middleman and the BASP gate into `cfg` for a process of
/// `role` ("sv-node" or "sv-front"): TLS with `tls`, or plaintext when
/// `insecure` (logged as a warning). Throws std::runtime_error when neither
/// or both are given or a TLS file is unusable.
/// `max_frame_bytes` bounds one BASP frame from a peer (0: the default,
/// 80 MiB).
void configure_middleman(caf::actor_system_config& cfg, const tls_files& tls,
                         bool insecure, const std::string& role,
                         uint32_t max_frame_bytes = 0);

} // namespace sv
