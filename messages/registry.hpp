#pragma once

// One place that registers every protocol type and error category, under the
// same names on every node, so that a provider can live on another node.

namespace caf {
class actor_system_config;
} // namespace caf

namespace sv {

/// Adds every message type of messages/ and the provider error category.
void register_protocol(caf::actor_system_config& cfg);

} // namespace sv
