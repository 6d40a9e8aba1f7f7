#pragma once

// The node side of `sv-node --join HOST:PORT`: connects out to a front
// whose nodes block has `"listen"`, offers the node there under a name, and
// keeps offering it: the join is repeated every second (a front that lost
// the node takes it back), and a lost front is dialled again with backoff.

#include "providers/nodes/detail/middleman_setup.hpp"
#include "providers/nodes/detail/node_protocol.hpp"

#include <string>

namespace sv {

struct join_settings {
  /// The front's "HOST:PORT".
  std::string host;
  uint16_t port = 0;
  /// The node's name at the front (stable across reconnects).
  std::string name;
  bool tls = false;
};

/// Spawns the joiner of `node`; send it an exit to stop.
caf::actor spawn_node_joiner(caf::actor_system& sys, node_actor node,
                             join_settings settings);

} // namespace sv
