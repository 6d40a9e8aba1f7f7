#pragma once

// The test kit, part 3: our supervisor on a scripted provider, on the
// deterministic scheduler. Your service sends `verify` requests to
// `supervisor` (or you do, from `client`), the scripted provider fails
// where the script says, and the test advances the clock and asserts the
// exact failure and the exact moment it arrives:
//
//   sv::testing::grading_bench bench;
//   bench.start(sv::testing::faults{}.always(sv::scripted_op::exec,
//                                            sv::scripted_fault::hang));
//   auto req = sv::testing::sample_request("task-1"); // exec 30 s, grace 5 s
//   bench.submit(req);
//   auto out = bench.reply_exactly_at(std::chrono::seconds{35});
//   // out.failure: provider_unavailable / exec / timeout
//
// Failed expectations throw `sv::testing::expectation_failed` (any test
// framework reports the message).

#include "actors/supervisor.hpp"
#include "messages/protocol.hpp"
#include "providers/scripted.hpp"
#include "testing/deterministic.hpp"

#include <memory>
#include <stdexcept>
#include <string>

namespace sv {
class service;
} // namespace sv

namespace sv::testing {

/// A failed expectation of the kit (the message says what and when).
struct expectation_failed : std::logic_error {
  using std::logic_error::logic_error;
};

/// A submission with a distinct deadline per state, so that a test cannot
/// mistake one for another: ready 10 s, upload 20 s, exec 30 s (+ grace
/// 5 s), download 40 s, stop 50 s.
verification_request sample_request(std::string id = "task-1");

/// "ok" or "kind/state/cause: message", for assertion messages.
std::string describe(const verification_outcome& out);

/// Whether `out` failed with exactly this kind, state and cause.
bool failed_with(const verification_outcome& out, failure_kind kind,
                 verification_state state, failure_cause cause);

struct grading_bench : deterministic_system {
  /// The scripted provider's world: its sandboxes and ledger (every
  /// sandbox created, stopped, stopped twice, ...).
  std::shared_ptr<scripted_world> world = std::make_shared<scripted_world>();
  provider_actor provider;
  supervisor_actor supervisor;
  /// The runtime assembly every front uses (service/service.hpp), on this
  /// deterministic system and a scripted backend in `world`.
  std::shared_ptr<service> assembly;

  /// Spawns the scripted provider with `script` and a supervisor on it
  /// (restarts only as `cfg` says: see `restarting`).
  void start(scripted_script script = {}, supervisor_config cfg = {});

  /// `cfg` plus a provider restart: a fresh scripted provider (with
  /// `script`) in the same world.
  supervisor_config restarting(supervisor_config cfg = {},
                               scripted_script script = {});

  /// Sends `req` to the supervisor from `client`; the reply comes to
  /// `client` (`take<verification_outcome>()`).
  void submit(verification_request req = sample_request());

  /// Runs to one nanosecond before `deadline` (from now) and expects no
  /// reply, then one more and expects exactly one; returns it.
  verification_outcome reply_exactly_at(caf::timespan deadline);

  /// Runs without moving the clock and expects a reply.
  verification_outcome reply_now();

  /// The supervisor's counters.
  supervisor_stats stats();

  /// Expects every sandbox the world created to have been stopped exactly
  /// once (throws naming the ones that were not).
  void expect_all_stopped_once() const;
};

} // namespace sv::testing
