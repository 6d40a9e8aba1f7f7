#pragma once

// The supervisor: admission (max in flight, a bounded queue, a cap on
// sandboxes being created), one monitored verification actor per
// submission, exactly one terminal reply per submission.

#include "actors/retry.hpp"
#include "messages/provider.hpp"

#include <caf/atom.hpp>
#include <caf/replies_to.hpp>
#include <caf/timespan.hpp>
#include <caf/typed_actor.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace caf {
class actor_system;
} // namespace caf

namespace sv {

/// Turns the text of `result.json` into the result. Returns false and sets
/// `error` to reject the text (the verification then fails with
/// verifier_error / parse / invalid_result).
using result_parser = std::function<bool(const std::string& text, json& result,
                                         std::string& error)>;

/// The default parser: the text must be one JSON object.
bool parse_json_object(const std::string& text, json& result,
                       std::string& error);

struct supervisor_config {
  /// Verifications running at once; 0 means 2 x hardware threads. After a
  /// provider crash, fewer: half of what it had in flight, then one more
  /// per verification that comes through, up to this again.
  size_t max_in_flight = 0;
  /// Submissions waiting for a slot; beyond it, `overloaded` rejections.
  size_t max_queue = 10000;
  /// Verifications in create or ready at once (bursts of creates are what
  /// collapse real providers).
  size_t max_creating = 16;
  /// Reply as soon as the outcome is known and stop the sandbox behind the
  /// reply (still exactly once, owned by its verification actor until the
  /// stop answers). False: every stop runs before its reply.
  bool stop_after_reply = true;
  /// Stops behind replies that may be outstanding before admission waits
  /// for them: at most max_in_flight + max_stopping sandboxes exist at
  /// once. 0 means as many as max_in_flight.
  size_t max_stopping = 0;
  /// The provider block's `default_metadata` (lowest in the merge).
  json default_metadata = json::object();
  /// How `result.json` becomes a result.
  result_parser parser = parse_json_object;
  /// Builds a replacement when the provider dies, so that queued and later
  /// submissions still get graded (in-flight ones fail with node_down; the
  /// supervisor stops their sandboxes through the replacement). It runs on
  /// a detached actor of its own, never on a scheduler thread, so it may
  /// block (resolve python, probe isolation, reap). Without it, every later
  /// submission fails provider_unavailable / node_down.
  std::function<provider_actor(caf::actor_system&)> restart_provider;
  /// Delay before the second restart in a row; it doubles up to the
  /// maximum. (The first restart after a healthy run is immediate.)
  std::chrono::nanoseconds restart_backoff_min = std::chrono::milliseconds(100);
  std::chrono::nanoseconds restart_backoff_max = std::chrono::seconds(5);
  /// Consecutive restarts without progress (failed, or whose provider died
  /// before a verification came through without a provider fault: answered
  /// creates and stops do not count, a provider that crashes on every exec
  /// makes none) after which the provider is given up: queued and later
  /// submissions fail provider_unavailable / node_down. A provider that
  /// crashes every few thousand calls but gets work done in between is
  /// restarted as often as it crashes. A given-up provider is still
  /// restarted (the same budget again, no work; each orphan stopped is
  /// progress then) while sandboxes are owned, to stop them; only then is
  /// what is left to its TTL.
  uint32_t max_restart_failures = 8;
  /// How long a given-up provider refuses work. After it, the next
  /// submission is taken again on probation: the provider (restarted if
  /// none is up) gets one more restart without progress before it is given
  /// up again; a verification that comes through ends the probation.
  std::chrono::nanoseconds give_up_cooldown = std::chrono::seconds(60);
  /// How long one call of `restart_provider` may take.
  std::chrono::nanoseconds restart_timeout = std::chrono::seconds(120);
  /// Retries of infrastructure failures after create (actors/retry.hpp);
  /// none by default.
  retry_settings retry;
};

/// Spawns a supervisor that grades on `provider`. The supervisor monitors
/// the provider: when it dies, every verification in flight fails with
/// provider_unavailable / node_down at once (see `restart_provider`).
supervisor_actor spawn_supervisor(caf::actor_system& sys,
                                  provider_actor provider,
                                  supervisor_config cfg = {});

using await_stops_atom = caf::atom_constant<caf::atom("awaitstops")>;

/// What else a supervisor answers (reach it with an actor_cast of its
/// handle): `(await_stops, wait)` is answered with the number of stops
/// still outstanding (`supervisor_stats::stopping + cleanup_pending`: stops
/// behind replies, orphans waiting or being stopped, late creates) as soon
/// as it is 0, once `wait` has passed, or when the supervisor exits,
/// whichever comes first. Any number of waiters.
using stop_waiter_actor = caf::typed_actor<
  caf::replies_to<await_stops_atom, caf::timespan>::with<uint64_t>>;

/// Blocks (never on a scheduler thread) until `sup` has no stop behind a
/// reply outstanding and nothing else to clean up after one (orphans, late
/// creates), or `limit` passed, or it does not answer (or exits). True when
/// none is left. One request, answered by the supervisor (no polling). For
/// shutdown: the summary then counts every stop, and no sandbox is mid-stop
/// when its provider goes.
bool await_stops(caf::actor_system& sys, const supervisor_actor& sup,
                 std::chrono::nanoseconds limit);

} // namespace sv
