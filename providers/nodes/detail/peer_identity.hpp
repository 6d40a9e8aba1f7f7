#pragma once

// Who is at the other end of a BASP connection. The transport (the BASP
// gate: TLS termination and frame checks in front of CAF's middleman) learns
// a peer's CAF node id from the handshake on an authenticated connection and
// binds it here; the node actor and the nodes provider ask it about
// `current_sender()->node()`. A node id that is not bound is nobody: its
// calls are refused.

#include <caf/node_id.hpp>
#include <optional>
#include <string>

namespace sv {

/// A peer's identity: with TLS, its certificate's subject CN (the name) and O
/// (the role: "sv-node" or "sv-front"); in insecure mode, name
/// "insecure/<node id>" and the role of the side that accepted it.
struct peer_identity {
  std::string name;
  std::string role;

  friend bool operator==(const peer_identity& a, const peer_identity& b) {
    return a.name == b.name && a.role == b.role;
  }
  friend bool operator!=(const peer_identity& a, const peer_identity& b) {
    return !(a == b);
  }
};

inline constexpr const char* node_role = "sv-node";
inline constexpr const char* front_role = "sv-front";

/// The process's table of authenticated peers (thread-safe: the transport
/// writes it from its I/O threads, actors read it).
class peer_registry {
public:
  /// Binds `id` to `who`; false (and no change) when `id` is already bound
  /// to another identity (a second connection cannot claim a node id).
  static bool bind(const caf::node_id& id, const peer_identity& who);

  /// Forgets `id` (its connection closed).
  static void unbind(const caf::node_id& id);

  /// The identity bound to `id`, if any.
  static std::optional<peer_identity> find(const caf::node_id& id);
};

} // namespace sv
