#include "providers/nodes/middleman_setup.hpp"

#include "providers/nodes/openssl_error_queue.hpp"

#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/openssl/manager.hpp>
#include <caf/timespan.hpp>
#include <chrono>
#include <fstream>
#include <stdexcept>

namespace sv {

namespace {

void require_readable(const std::string& what, const std::string& path) {
  std::ifstream in{path};
  if (!in)
    throw std::runtime_error("TLS " + what + " " + path + ": cannot be read");
}

} // namespace

void configure_middleman(caf::actor_system_config& cfg, const tls_files& tls) {
  using std::chrono::milliseconds;
  cfg.load<caf::io::middleman>();
  cfg.set("middleman.heartbeat-interval",
          caf::timespan{milliseconds{heartbeat_interval_ms}});
  cfg.set("middleman.connection-timeout",
          caf::timespan{milliseconds{connection_timeout_ms}});
  if (!tls.enabled())
    return;
  if (tls.key.empty() || tls.ca.empty())
    throw std::runtime_error("TLS needs a certificate, a key and a CA");
  require_readable("certificate", tls.cert);
  require_readable("key", tls.key);
  require_readable("CA", tls.ca);
  // Without it one peer's failed handshake closes every other TLS
  // connection of this process (openssl_error_queue.cpp).
  if (!openssl_error_queue_fix_active())
    throw std::runtime_error(
      "TLS: the OpenSSL error-queue fix is not linked into this program "
      "(providers/nodes/openssl_error_queue.cpp)");
  cfg.openssl_certificate = tls.cert;
  cfg.openssl_key = tls.key;
  cfg.openssl_cafile = tls.ca;
  cfg.load<caf::openssl::manager>();
}

} // namespace sv
