#pragma once

// Provider blocks as NeMo Gym writes them: a single-key mapping
// `{provider_name: {...settings}}` plus an optional `default_metadata` key.
// Adding a backend means one entry in factory.cpp.

#include "messages/provider.hpp"

#include <string>
#include <vector>

namespace caf {
class actor_system;
} // namespace caf

namespace sv {

struct provider_block {
  std::string name;
  json settings = json::object();
  json default_metadata = json::object();
};

/// The provider names `spawn_provider` knows.
std::vector<std::string> provider_names();

/// Parses a provider block. Throws `json_error` naming the key on bad input
/// (no provider key, two provider keys, an unknown provider name, ...).
provider_block parse_provider_block(const json& j);

/// Spawns the provider a block names. Throws `json_error` for bad settings,
/// std::runtime_error when the provider cannot start.
provider_actor spawn_provider(caf::actor_system& sys,
                              const provider_block& block);

} // namespace sv
