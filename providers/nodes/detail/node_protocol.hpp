#pragma once

// What an sv-node publishes on CAF's middleman: the provider interface plus
// a question about its capacity (a drain comes only from the node's own
// process, node_drainer_actor). Both sides register
// the protocol types under the same names (messages/registry.cpp), so a
// front's `remote_actor<node_actor>` matches the published interface.

#include "messages/provider.hpp"

#include <caf/atom.hpp>
#include <caf/timespan.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace sv {

using node_info_atom = caf::atom_constant<caf::atom("node_info")>;
using drain_atom = caf::atom_constant<caf::atom("drain")>;
/// node -> a front's registrar (a `nodes` block with `listen`): `(join,
/// name, node)` offers the node (an untyped handle to its node_actor) under
/// a name that stays the same across its reconnects; replies ok.
using join_atom = caf::atom_constant<caf::atom("join")>;

/// front -> node: `(grade_identity, python)` is answered with what the
/// node grades with for the interpreter name `python` (its backend's
/// `grade_identity`, providers/factory.hpp), as JSON text. Part of a
/// front's cache key (issue 19 item 10).
using grade_identity_atom = caf::atom_constant<caf::atom("gradeident")>;

using node_actor = provider_actor::extend<
  // Capacity (0 while draining) and sandboxes in use (created or being
  // created, not stopped).
  caf::replies_to<node_info_atom>::with<uint32_t, uint32_t>,
  caf::replies_to<grade_identity_atom, std::string>::with<std::string>>;

/// What a node grades with for an interpreter name (its backend's
/// `grade_identity`); it may block (it runs on a thread of its own) and
/// throw (the question then fails).
using node_identity_fn = std::function<json(const std::string& python)>;

/// How a node admits work.
struct node_limits {
  /// Sandboxes at once; a create beyond them fails `overloaded`.
  uint32_t capacity = 4;
  /// Bytes of one upload (paths and contents); beyond: invalid_argument.
  uint64_t max_upload_bytes = 64ull << 20;
  /// The longest a sandbox lives: the node stops it then, whatever its
  /// front asked (a `ttl_s` of 0 or above this becomes this).
  caf::timespan max_ttl = std::chrono::hours{1};
};

/// What a node actor answers besides (not published, and refused from any
/// other process: only sv-node's own signal handling drains it):
/// `(drain, wait)` stops admitting sandboxes and is answered with the
/// sandboxes still in use as soon as none is, once `wait` passed, or when
/// the node actor exits.
using node_drainer_actor =
  caf::typed_actor<caf::replies_to<drain_atom, caf::timespan>::with<uint32_t>>;

/// Drains `node` (no new sandboxes) and blocks (main thread, never a
/// scheduler thread) until none is in use or `wait` passed; one request,
/// answered by the node. Returns the sandboxes still in use (0 also when
/// the node does not answer).
uint32_t drain_node(caf::actor_system& sys, const node_actor& node,
                    caf::timespan wait);

/// The node-side actor in front of `inner`: enforces the capacity, bounds
/// uploads and lifetimes, names each sandbox by an id of its own (random;
/// `inner` and its ids never leave the node), answers calls on a sandbox
/// only from the front that created it (its peer identity,
/// peer_identity.hpp, and actor; anyone else hears `no_such_sandbox`) and,
/// when a front is lost, stops every sandbox that front created or was
/// creating. Not linked to `inner`. `identity` answers `grade_identity`
/// questions of authenticated fronts (none: they are refused).
node_actor spawn_node_actor(caf::actor_system& sys, provider_actor inner,
                            node_limits limits, node_identity_fn identity = {});

} // namespace sv
