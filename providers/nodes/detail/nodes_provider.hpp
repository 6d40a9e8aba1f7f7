#pragma once

// The `nodes` provider: one provider actor to the supervisor that spreads
// sandboxes over sv-node processes (CAF middleman), pins each sandbox to its
// node and fails everything in flight on a node at once when it is lost.

#include "actors/retry.hpp"
#include "messages/protocol.hpp"
#include "providers/nodes/detail/middleman_setup.hpp"
#include "providers/nodes/detail/node_protocol.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace caf {
class actor_system;
class actor_system_config;
} // namespace caf

namespace sv {

class provider_backend;

struct nodes_settings {
  /// "HOST:PORT" of every node the front connects to.
  std::vector<std::string> endpoints;
  /// "HOST:PORT" on which the front accepts nodes that `--join` it (empty:
  /// none); without TLS, loopback only unless `insecure`.
  std::string listen;
  bool insecure = false;
  /// Seconds sv-grade waits at start for a first node to join, when it
  /// has no endpoints of its own (or none reachable).
  double join_wait_s = 30;
  tls_files tls;
  /// Bytes of one BASP frame from a node at most (0: the gate's default,
  /// 80 MiB); above a node's download bound.
  uint32_t max_frame_bytes = 0;
  /// Seconds a connection attempt (and a heartbeat) may take.
  double connect_timeout_s = 3;
  /// Seconds a create waits for a node with free capacity.
  double queue_timeout_s = 30;
  /// Creates waiting at most; beyond, `unavailable` at once.
  size_t max_queue = 100000;
  /// Retries of a verification that failed provider_unavailable after its
  /// sandbox existed (the supervisor's, actors/retry.hpp), and their budget.
  int retry_infra = 1;
  double retry_budget_ratio = 0.1;
  double retry_budget_burst = 10;
};

/// Parses the settings of a `nodes` block. Throws json_error.
nodes_settings parse_nodes_settings(const json& settings);

/// The backend of a `nodes` block (providers/factory.cpp).
std::shared_ptr<provider_backend> make_nodes_backend(const json& settings);

/// A nodes provider on given node handles (`nodes[i]` is
/// `settings.endpoints[i]`, which only names it): no middleman; a lost
/// node is asked again for its capacity with backoff. For message-level
/// tests.
provider_actor spawn_nodes_provider(caf::actor_system& sys,
                                    nodes_settings settings,
                                    std::vector<node_actor> nodes);

/// Loads the middleman (and TLS) a front of `settings` needs.
void configure_front(caf::actor_system_config& cfg,
                     const nodes_settings& settings);

/// The untyped question a nodes provider answers with its per-node table
/// (a JSON array as text).
using nodes_stats_atom = caf::atom_constant<caf::atom("nstats")>;

/// The per-node table of a nodes provider: endpoint, up, capacity,
/// sandboxes, create_failures, call_failures, failed_by_node_loss, losses,
/// sandbox_ms_p50/p99 (create to stop). Blocks up to 5 s (main thread).
json nodes_stats(caf::actor_system& sys, const provider_actor& provider);

/// The untyped question `(nodes_capacity, caf::timespan wait)`: a nodes
/// provider answers with the summed capacity (uint64_t) of the nodes it
/// has up as soon as it is above 0, once `wait` passed, or when it exits.
using nodes_capacity_atom = caf::atom_constant<caf::atom("ncapup")>;

/// The summed capacity of the nodes `provider` has up, waiting up to
/// `wait_s` (main thread; one request, answered when a node is up or at
/// the wait) until there is at least one.
size_t nodes_capacity_up(caf::actor_system& sys, const provider_actor& provider,
                         double wait_s);

/// For a front that dials its nodes (no `listen`): waits (main thread, one
/// request) until one of them is up, or each failed its first connection;
/// empty when one is up, else why none is, naming each endpoint (sv-grade
/// then exits 2 instead of masking every line).
std::string nodes_unreachable(caf::actor_system& sys,
                              const provider_actor& provider,
                              const nodes_settings& settings);

/// Asks every reachable node its capacity (blocking, bounded by the connect
/// timeout; call on the main thread) and returns their sum (0: none).
size_t nodes_total_capacity(caf::actor_system& sys,
                            const nodes_settings& settings);

} // namespace sv
