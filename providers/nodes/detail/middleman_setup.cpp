#include "providers/nodes/detail/middleman_setup.hpp"

#include "providers/nodes/detail/transport/basp_gate.hpp"

#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/timespan.hpp>
#include <chrono>
#include <spdlog/spdlog.h>
#include <stdexcept>

namespace sv {

std::string tls_missing_hint(const std::string& role) {
  return "BASP needs TLS: make the cluster's certificates with sv-certs "
         "(sv-certs init DIR; sv-certs issue DIR --role " +
         role +
         " --name NAME) and give this side's certificate, key and the CA; "
         "or plaintext without authentication with insecure, on both ends";
}

void configure_middleman(caf::actor_system_config& cfg, const tls_files& tls,
                         bool insecure, const std::string& role,
                         uint32_t max_frame_bytes) {
  using std::chrono::milliseconds;
  if (tls.enabled() && insecure)
    throw std::runtime_error("TLS files and insecure exclude each other");
  if (!tls.enabled() && !insecure)
    throw std::runtime_error(tls_missing_hint(role));
  if (tls.enabled() && (tls.key.empty() || tls.ca.empty()))
    throw std::runtime_error("TLS needs a certificate, a key and a CA");
  cfg.load<caf::io::middleman>();
  cfg.set("middleman.heartbeat-interval",
          caf::timespan{milliseconds{heartbeat_interval_ms}});
  cfg.set("middleman.connection-timeout",
          caf::timespan{milliseconds{connection_timeout_ms}});
  transport::gate_settings gs;
  gs.tls = tls;
  gs.insecure = insecure;
  gs.role = role;
  if (max_frame_bytes > 0)
    gs.limits.max_payload = max_frame_bytes;
  transport::load_gate(cfg, gs);
  if (insecure)
    spdlog::warn("insecure: BASP in plaintext, without certificates: any "
                 "process that reaches this {}'s connections can act as "
                 "a{} (use TLS made by sv-certs)",
                 role, role == "sv-node" ? " front" : " node");
}

} // namespace sv
