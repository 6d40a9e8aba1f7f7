#pragma once

// Provider blocks as NeMo Gym writes them: a single-key mapping
// `{provider_name: {...settings}}` plus an optional `default_metadata` key.
// Adding a backend means its folder (providers/NAME/: provider.cpp,
// config.cpp, its `provider_backend`) and one entry in factory.cpp; what a
// backend knows (its cache key, retries, transport, start-up checks) is
// asked of its `provider_backend`, never of its name.

#include "actors/retry.hpp"
#include "messages/config_file.hpp"
#include "messages/provider.hpp"

#include <chrono>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace caf {
class actor_system;
class actor_system_config;
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

/// A provider block made ready to serve: its expensive set-up done once
/// (the local provider: the root, the interpreter, the isolation probe, the
/// start-up reaper) and what outlives one provider actor (the local
/// provider's registry of sandboxes). Every actor spawned from one backend
/// shares it: a replacement spawned after a crash stops the sandboxes its
/// predecessor created.
class provider_backend {
public:
  virtual ~provider_backend();

  /// Spawns a provider actor: cheap and non-blocking, fine on a scheduler
  /// thread (a supervisor's restart, a detached restarter).
  virtual provider_actor spawn(caf::actor_system& sys) const = 0;

  /// Blocks until what the backend's actors left is gone (the local
  /// provider: its sandboxes stopped, its I/O threads joined). Call it after
  /// the actors are gone, never on a scheduler thread; without it, the last
  /// release does it on a thread of its own.
  virtual void shut_down() = 0;

  /// What this backend contributes to the result cache's key for a
  /// submission of config `cfg` (docs/cache.md): what decides a grade here
  /// and nothing that does not. Local: its outcome-deciding settings and
  /// the identity of the interpreter `cfg.python` runs; remote: what the
  /// far sv-serve answers for it (GET /v1/identity); nodes, scripted: their
  /// settings. May block (files, a far side; answers are kept per
  /// `cfg.python`): call it off the scheduler threads. Throws when it cannot
  /// tell (the caller then grades without the cache).
  /// With an image named by a tag, an `oci:` layout or an archive, the
  /// local provider's identity also holds `image_digest`: the digest it
  /// resolves the name to now (its image store, `image_tag_ttl_s`), so a
  /// moved tag is another key. Others leave such images out of the cache.
  virtual json grade_identity(const verification_config& cfg) const = 0;

  /// Whether `image` has named `digest` (an `image_digest` this backend
  /// put in a grade identity) with no change seen since `since`: the
  /// cache front stores a result under that key only then. Never blocks on
  /// the network. Default: false (a backend that resolves no digest).
  virtual bool
  image_unchanged_since(const std::string& image, const std::string& digest,
                        std::chrono::steady_clock::time_point since) const;

  /// The supervisor's retries of infrastructure failures this backend
  /// wants (nodes: its `retry_infra` and budget; others none).
  virtual retry_settings retry_defaults() const;

  /// Sets up the transport its actors need in the config of the actor
  /// system they will run in, before that system starts (nodes: the
  /// middleman and TLS of a front); others nothing. Throws
  /// std::runtime_error naming what is wrong.
  virtual void configure(caf::actor_system_config& cfg) const;

  /// Empty when `first`, the first provider spawned from this backend, can
  /// serve; else why not, in words (nodes that dial: none reachable at
  /// start). May block for seconds: main thread.
  virtual std::string check_started(caf::actor_system& sys,
                                    const provider_actor& first) const;

  /// How many verifications at once suit this backend when the caller asks
  /// for no number (nodes: the capacity of its nodes); 0: no opinion (the
  /// caller's default). May block for seconds: main thread.
  virtual size_t suited_concurrency(caf::actor_system& sys,
                                    const provider_actor& first) const;

  /// A table of where the work ran, for a summary (nodes: one row per
  /// node), as a JSON array; empty for backends without one. Blocks for up
  /// to seconds: main thread, `first` still alive.
  virtual json usage_table(caf::actor_system& sys,
                           const provider_actor& first) const;
};

/// `{"name": name, "settings": settings}` without the `operational` keys
/// (those that only say where, how many or how patiently): the part of a
/// grade identity that a block's settings make.
json settings_identity(const std::string& name, json settings,
                       std::initializer_list<const char*> operational);

/// The provider block of a JSON or YAML file (messages/config_file.hpp), or
/// `{"local": {}}` for an empty path; `file` keeps where each value came
/// from, to place errors found later (`file.describe`). Throws
/// `std::runtime_error` with a message that starts "provider config PATH: "
/// and names the line and column where it can. One loader for every app.
provider_block load_provider_block(const std::string& path, size_t max_depth,
                                   provider_config_file& file);

/// Whether sv-node may serve `block` (one that places sandboxes on other
/// nodes may not); asked before the block's settings are read.
bool servable_by_node(const provider_block& block);

/// Makes the backend of a block. Blocks for up to seconds: call it on the
/// main thread or a detached actor, never on a scheduler thread. Throws
/// `json_error` for bad settings, std::runtime_error when the provider
/// cannot start.
std::shared_ptr<provider_backend> prepare_provider(const provider_block& block);

/// `prepare_provider(block)->spawn(sys)`: a provider with a backend of its
/// own, which no replacement shares. Blocks like `prepare_provider` (fine on
/// a detached actor). To replace a provider and keep its sandboxes, keep the
/// backend and spawn again from it.
provider_actor spawn_provider(caf::actor_system& sys,
                              const provider_block& block);

} // namespace sv
