#pragma once

// The BASP gate: our own TLS (Boost.Asio over OpenSSL, on the gate's own
// I/O thread) in front of CAF 0.17.6's BASP broker, which only ever sees
// the plaintext end of a socketpair; CAF opens no TCP port. Each side
// verifies the other's certificate against the cluster's CA and reads its
// identity from the subject (CN = name, O = role: docs/nodes.md); a peer
// must hold the other role (a node accepts only sv-front, a front only
// sv-node). Frames are checked before CAF parses them (frame_check.hpp),
// and each connection binds the peer's CAF node id, learned from its BASP
// handshake, to its identity in peer_registry until it closes.
//
// To CAF code the gate is an actor that answers the middleman actor's
// `connect` and `publish` requests:
//   (connect_atom, std::string host, uint16_t port)
//     -> (caf::node_id, caf::strong_actor_ptr, std::set<std::string>)
//   (publish_atom, uint16_t port, caf::strong_actor_ptr whom,
//    std::set<std::string> sigs, std::string host, bool reuse) -> uint16_t

#include "providers/nodes/detail/middleman_setup.hpp"
#include "providers/nodes/detail/transport/frame_check.hpp"

#include <caf/actor.hpp>
#include <string>

namespace caf {
class actor_system;
class actor_system_config;
} // namespace caf

namespace sv::transport {

struct gate_settings {
  tls_files tls;
  /// Plaintext BASP: no certificates; peers are "insecure/<node id>".
  bool insecure = false;
  /// This process's role ("sv-node" or "sv-front"); peers hold the other.
  std::string role;
  frame_limits limits;
  /// Seconds for TCP connect plus the TLS handshake.
  double handshake_timeout_s = 10;
  /// Connections accepted and not yet through TLS, at most.
  size_t max_pending_handshakes = 64;
};

/// Checks `settings` (the TLS files load, the key matches the certificate,
/// the certificate chains to the CA and holds this side's role; throws
/// std::runtime_error naming what is wrong) and loads the gate into `cfg`.
void load_gate(caf::actor_system_config& cfg, const gate_settings& settings);

/// The gate actor of `sys` (invalid when no gate was loaded).
caf::actor gate_actor(caf::actor_system& sys);

} // namespace sv::transport
