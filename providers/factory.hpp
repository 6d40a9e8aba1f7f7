#pragma once

// Provider blocks as NeMo Gym writes them: a single-key mapping
// `{provider_name: {...settings}}` plus an optional `default_metadata` key.
// Adding a backend means one entry in factory.cpp.

#include "messages/provider.hpp"

#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace caf {
class actor_system;
} // namespace caf

namespace sv {

/// What a backend keeps across the provider actors spawned from one block
/// (the first and every replacement after a crash), e.g. the scripted
/// provider's world of sandboxes. Made on first use; thread-safe.
class backend_world {
public:
  template <class T>
  std::shared_ptr<T> get_or_make() {
    std::lock_guard<std::mutex> guard{mtx_};
    if (!state_)
      state_ = std::make_shared<T>();
    return std::static_pointer_cast<T>(state_);
  }

private:
  std::mutex mtx_;
  std::shared_ptr<void> state_;
};

struct provider_block {
  std::string name;
  json settings = json::object();
  json default_metadata = json::object();
  /// Shared by copies of the block: every provider `spawn_provider` starts
  /// from it (or a copy) lives in the same world.
  std::shared_ptr<backend_world> world = std::make_shared<backend_world>();
};

/// The provider names `spawn_provider` knows.
std::vector<std::string> provider_names();

/// Parses a provider block. Throws `json_error` naming the key on bad input
/// (no provider key, two provider keys, an unknown provider name, ...).
provider_block parse_provider_block(const json& j);

/// Spawns the provider a block names, in the block's world (a replacement
/// spawned from the same block sees its predecessors' sandboxes). Throws
/// `json_error` for bad settings, std::runtime_error when the provider cannot
/// start.
provider_actor spawn_provider(caf::actor_system& sys,
                              const provider_block& block);

} // namespace sv
