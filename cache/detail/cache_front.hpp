#pragma once

// The cache in front of a supervisor: an actor with the supervisor's
// interface that answers a submission whose key is in the result cache at
// once (`cached: true`, no sandbox), and passes the others on, storing each
// `ok` outcome. It runs detached (a thread of its own), since every SQLite
// call blocks; it never blocks a scheduler thread. It talks to the
// supervisor with plain sends (CAF 0.17's request() costs O(outstanding)
// per reply) under a private id per submission, never the caller's (two
// submissions may share an id), and dies with the supervisor, failing what
// it was waiting for.

#include "cache/detail/result_cache.hpp"
#include "messages/bounded_json.hpp"
#include "messages/provider.hpp"
#include "service/service.hpp"

#include <chrono>
#include <functional>
#include <memory>

namespace caf {
class actor_system;
} // namespace caf

namespace sv {

/// What the provider contributes to a submission's key (the backend's
/// `grade_identity`, providers/factory.hpp). Called on the front's own
/// thread; it may block. A throw means no key: graded, not stored.
using grade_identity_fn = std::function<json(const verification_config&)>;

/// Whether image `image` has named `digest` (the grade identity's
/// `image_digest`) with no change since `since`, as the backend saw it
/// (provider_backend::image_unchanged_since). Called on the front's own
/// thread before it stores a result whose key holds a resolved digest: a
/// tag that moved while the submission was graded is not stored.
using image_check_fn =
  std::function<bool(const std::string& image, const std::string& digest,
                     std::chrono::steady_clock::time_point since)>;

/// Spawns the front of `supervisor` on `cache`. Cached results are read
/// back within `limits`. Without `unchanged`, a result whose key holds a
/// resolved image digest is never stored.
supervisor_actor spawn_cache_front(caf::actor_system& sys,
                                   supervisor_actor supervisor,
                                   std::shared_ptr<result_cache> cache,
                                   grade_identity_fn identity,
                                   json_limits limits = {},
                                   image_check_fn unchanged = {});

/// The front of a service's supervisor (service/service.hpp) on `cache`,
/// keyed with the service backend's `grade_identity`.
front_factory cache_front_factory(std::shared_ptr<result_cache> cache,
                                  json_limits limits = {});

} // namespace sv
