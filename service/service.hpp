#pragma once

// One runtime assembly for every front (sv-grade, sv-serve, sv-node,
// sv::grader, the test kit's bench): the actor system and its config, the
// backend of a provider block, every provider spawned from it (the first and
// each restart), the supervisor with its restarts, an optional front before
// it (the result cache's) and one ordered shutdown. The programs only wire
// their inputs and outputs to it.

#include "actors/supervisor.hpp"
#include "messages/provider.hpp"

#include <caf/fwd.hpp>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>

namespace sv {

class provider_backend;
struct provider_block;

struct service_options {
  /// Scheduler threads of the actor system; 0: CAF's default.
  size_t threads = 0;
  /// More set-up of the actor system's config, after the backend's own
  /// (sv-node: the middleman of a node). May throw std::runtime_error.
  std::function<void(caf::actor_system_config&)> configure;
};

/// A front before the supervisor (the result cache's,
/// cache/detail/cache_front.hpp): an actor with its interface that dies with
/// it.
using front_factory = std::function<supervisor_actor(
  caf::actor_system&, const supervisor_actor&, const provider_backend&)>;

/// Who restarts a provider that died: the service, from its backend, or
/// only `supervisor_config::restart_provider` (none when it is empty).
enum class restarts { from_backend, as_configured };

class service {
public:
  // -- constructors
  // ------------------------------------------------------------

  /// Prepares the backend of `block` (blocks for up to seconds), starts an
  /// actor system set up for it and spawns the first provider. Throws what
  /// `prepare_provider` throws (`json_error` for bad settings, naming the
  /// path in the block; std::runtime_error when the provider cannot start),
  /// and `service_setup_error` when the actor system cannot be set up.
  explicit service(const provider_block& block, service_options opts = {});

  /// On a system the caller owns (the test kit's deterministic one) and a
  /// ready backend: spawns the first provider. Its owner stops the actors;
  /// the destructor stops nothing.
  service(caf::actor_system& sys, std::shared_ptr<provider_backend> backend,
          json default_metadata = json::object());

  /// `shut_down(0)` unless done, then the actor system (if its own) is gone.
  ~service();

  service(const service&) = delete;
  service& operator=(const service&) = delete;

  // -- properties
  // --------------------------------------------------------------

  caf::actor_system& system() noexcept { return *sys_; }

  const provider_backend& backend() const noexcept { return *backend_; }

  /// The provider spawned at start.
  provider_actor first_provider() const;

  /// The provider spawned last (a restart's, or the first).
  provider_actor latest_provider() const;

  /// The supervisor (null before `supervise`).
  supervisor_actor supervisor() const noexcept { return supervisor_; }

  /// Where submissions go: the front, else the supervisor.
  supervisor_actor entry() const noexcept { return entry_; }

  // -- start
  // -------------------------------------------------------------------

  /// Spawns the supervisor on the first provider with `cfg` and what the
  /// backend and block decide unless `cfg` does: the backend's retries
  /// (when `cfg.retry` retries nothing), the block's default metadata (when
  /// `cfg`'s is empty), restarts spawned from the backend (when `cfg` has
  /// no `restart_provider` and `who` is `from_backend`: a replacement then
  /// stops its predecessor's sandboxes). With `front`, `entry()` is the
  /// front it spawns.
  supervisor_actor supervise(supervisor_config cfg, front_factory front = {},
                             restarts who = restarts::from_backend);

  // -- stop
  // --------------------------------------------------------------------

  /// Blocks (main thread) until the stops behind the replies so far are
  /// done, or `budget` passed. True when none is left.
  bool drain(std::chrono::nanoseconds budget);

  /// The supervisor's counters; empty when it does not answer within 10 s.
  std::optional<supervisor_stats> stats();

  /// The one shutdown, in an order that lets nothing restart or leak:
  /// waits up to `budget` for the stops behind the replies, stops the
  /// supervisor (its front dies with it) and waits for it, stops every
  /// provider and waits for them (each up to 10 s), then the backend
  /// (blocks until what its actors left is stopped and its threads are
  /// joined). Main thread; later calls do nothing.
  void shut_down(std::chrono::nanoseconds budget);

private:
  struct provider_set;

  void start_first(json default_metadata);

  std::unique_ptr<caf::actor_system_config> cfg_;
  std::unique_ptr<caf::actor_system> own_sys_;
  caf::actor_system* sys_ = nullptr;
  std::shared_ptr<provider_backend> backend_;
  std::shared_ptr<provider_set> providers_;
  json default_metadata_;
  supervisor_actor supervisor_;
  supervisor_actor entry_;
  bool shut_down_ = false;
};

/// The actor system of a service cannot be set up (the backend's transport,
/// `service_options::configure`): a configuration error.
struct service_setup_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

} // namespace sv
