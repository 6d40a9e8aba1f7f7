// The supervisor: admission, one monitored verification actor per
// submission, exactly one terminal reply per submission.
//
// Every submission is in exactly one of three places: rejected at once
// (invalid, overloaded, provider given up), waiting in `queue`, or running
// in `running`. A running entry leaves only through `verified` (the actor's
// own report) or its `down_msg` (the actor died without one); both deliver
// the promise and erase the entry, so the caller hears exactly once.
//
// Sandboxes: a verification stops its own sandbox, except when its
// provider is gone; then it hands the sandbox over (`handed_over`) and the
// supervisor keeps it as an orphan until a replacement provider is up, and
// stops it there exactly once. A crashed verification's sandbox is stopped
// the same way. A verification whose create overran its deadline keeps its
// create slot (`lingering`) until the provider really answers (`settled`).
//
// Stops behind replies: a verification that reports `stopping` has its
// promise delivered at once but stays in `running` (`replied`), still
// monitored, until its `settled` (carried by its down_msg's reason; any
// other exit reason: the supervisor stops the sandbox itself). It no longer
// counts as in flight, but as `stopping`, and admission waits while running
// verifications plus stopping ones fill max_in_flight + max_stopping.
//
// Restarts run on a provider restarter (actors/provider_restarter.hpp), off
// the scheduler threads, with exponential backoff and a limit.

#include "actors/supervisor.hpp"

#include "actors/detail/quiet.hpp"
#include "actors/detail/waiters.hpp"
#include "actors/provider_restarter.hpp"
#include "actors/verification.hpp"
#include "messages/bounded_json.hpp"
#include "messages/errors.hpp"
#include "messages/validation.hpp"

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>
#include <deque>
#include <optional>
#include <spdlog/spdlog.h>
#include <thread>
#include <unordered_map>
#include <vector>

namespace sv {

bool parse_json_object(const std::string& text, json& result,
                       std::string& error) {
  // A runner's result.json is hostile: bounded depth, no duplicate keys.
  if (auto err = parse_bounded(text, result); !err.empty()) {
    error = "not valid JSON: " + err;
    return false;
  }
  if (!result.is_object()) {
    error = std::string{"expected a JSON object, got "} + result.type_name();
    return false;
  }
  return true;
}

namespace {

using outcome_promise = caf::typed_response_promise<verification_outcome>;

/// A submission whose verification actor is alive and owes a reply.
struct running_verification {
  outcome_promise promise;
  std::string id;
  double stop_timeout_s = 60;
  /// The provider the verification was given.
  caf::actor_addr provider;
  /// The last state the supervisor knows of: create, ready (after
  /// `created`), upload (after `ready`).
  verification_state phase = verification_state::create;
  /// Whether `phase` still holds a slot of the create cap.
  bool creating = true;
  sandbox_handle handle;
  /// What the actor's exception handler reported, if it threw.
  std::string crash;
  /// Stopped by a `cancel` (its client went away), not crashed.
  bool cancelled = false;
  /// This is attempt number `attempts` (actors/retry.hpp); `retry_copy`
  /// is the request again, kept only while a retry is possible.
  uint32_t attempts = 1;
  std::shared_ptr<verification_request> retry_copy;
  /// The promise is delivered; the actor is stopping the sandbox.
  bool replied = false;
};

struct queued_submission {
  verification_request req;
  outcome_promise promise;
  uint32_t attempts = 1;
};

/// A sandbox nobody else will stop: its verification crashed, or its
/// provider died. Stopped once through a live provider other than its
/// (dead) creator.
struct orphan_sandbox {
  sandbox_handle handle;
  /// The provider not to stop it through: its dead creator, or (in
  /// `orphan_stops`) the provider carrying its stop.
  caf::actor_addr creator;
  double stop_timeout_s = 60;
};

/// A verification whose create overran its deadline, waiting for the
/// provider's late answer; `orphan.handle` is set once a late sandbox came
/// (the verification is stopping it).
struct lingering_create {
  std::string id;
  orphan_sandbox orphan;
};

/// supervisor -> itself: the backoff before a restart is over.
using restart_timer_atom = caf::atom_constant<caf::atom("restartdue")>;
/// supervisor -> itself: the wait of the `await_stops` with this token is
/// over.
using stops_due_atom = caf::atom_constant<caf::atom("stopsdue")>;

using supervisor_impl =
  supervisor_actor::extend_with<verification_parent_actor>::extend_with<
    stop_waiter_actor>::extend<caf::reacts_to<restart_timer_atom, uint64_t>,
                               caf::reacts_to<stops_due_atom, uint64_t>>;

struct supervisor_state {
  static inline const char* name = "sv.supervisor";

  provider_actor provider;
  /// `provider` is up and takes work.
  bool provider_alive = true;
  size_t max_in_flight = 0;
  /// Verifications admitted at once now (at most max_in_flight): halved
  /// by each provider crash (to half of what it had in flight), one more
  /// per verification that comes through, so that a provider crashing
  /// every N calls still gets work done between crashes.
  size_t window = 0;
  size_t max_queue = 0;
  size_t max_creating = 0;
  size_t max_stopping = 0;
  std::shared_ptr<const verification_settings> settings;
  std::unordered_map<caf::actor_addr, running_verification> running;
  /// Verifications that replied `pending`: each holds a create slot until
  /// `settled` or its down_msg.
  std::unordered_map<caf::actor_addr, lingering_create> lingering;
  std::deque<queued_submission> queue;
  std::vector<orphan_sandbox> orphans;
  size_t creating = 0;
  /// Entries of `running` that replied and are stopping their sandbox.
  size_t stopping = 0;
  /// Stops of orphans in flight (`orphans` holds those waiting), by token;
  /// each one's `creator` is the provider carrying the stop. A provider
  /// that dies with one unanswered may never have run it (a crash while
  /// handling it leaves no answer and no bounce): `on_provider_down` moves
  /// it back to `orphans`, and its late answer or timeout is ignored.
  std::unordered_map<uint64_t, orphan_sandbox> orphan_stops;
  uint64_t next_orphan_stop = 0;
  supervisor_stats stats;
  retry_settings retry;
  retry_budget budget;

  // -- restarts --
  provider_factory restart_provider;
  caf::timespan backoff_min{0};
  caf::timespan backoff_max{0};
  uint32_t max_restart_failures = 0;
  caf::timespan restart_timeout{0};
  /// A restart is scheduled or running.
  bool restarting = false;
  /// No work is taken: restarts made no progress `max_restart_failures`
  /// times in a row. Restarts go on, for stops only, while sandboxes are
  /// owned. Work is taken again, on probation, `give_up_cooldown` after.
  bool given_up = false;
  caf::actor_clock::time_point given_up_at;
  caf::timespan give_up_cooldown{0};
  /// No provider will come again, not even to stop a sandbox.
  bool abandoned = false;
  /// Restarts since the provider last made progress: a verification came
  /// through without a provider fault (once given up: an orphan stopped).
  uint32_t consecutive_restarts = 0;
  /// Tags the backoff timer (a stale one does nothing).
  uint64_t restart_gen = 0;

  // -- waiters for the stops (await_stops) --
  /// Each answered once: when no stop is outstanding, at its timer
  /// (`stops_due`, by token), or when the supervisor exits.
  waiters<uint64_t> stop_waiters;

  /// Stops behind replies, orphans waiting or being stopped, late creates.
  uint64_t stops_outstanding() const {
    return stopping + orphan_stops.size() + orphans.size() + lingering.size();
  }

  supervisor_state() = default;
  supervisor_state(const supervisor_state&) = delete;
  supervisor_state& operator=(const supervisor_state&) = delete;

  /// The actor is exiting (CAF destroys the state in on_exit, whatever the
  /// reason): the waiters it owns hear what is still outstanding.
  ~supervisor_state() { stop_waiters.answer_all(stops_outstanding()); }
};

using self_ptr = supervisor_impl::stateful_pointer<supervisor_state>;

// -- waiters for the stops ----------------------------------------------------

/// Answers every `await_stops` once nothing is outstanding any more. Called
/// after each event that can end a stop (down messages, orphan stop replies,
/// restart outcomes, reports).
void answer_stop_waiters(self_ptr self) {
  auto& st = self->state;
  if (!st.stop_waiters.empty() && st.stops_outstanding() == 0)
    st.stop_waiters.answer_all(0);
}

caf::typed_response_promise<uint64_t> await_stops_request(self_ptr self,
                                                          caf::timespan wait) {
  auto left = self->state.stops_outstanding();
  return self->state.stop_waiters.wait(self, left == 0, left, wait,
                                       stops_due_atom::value);
}

/// The wait of one `await_stops` is over: it hears what is still running.
void stops_due(self_ptr self, uint64_t token) {
  self->state.stop_waiters.expire(token, self->state.stops_outstanding());
}

verification_outcome rejection(std::string id, failure_kind kind,
                               verification_state state, failure_cause cause,
                               std::string message) {
  verification_outcome out;
  out.id = std::move(id);
  out.failure.kind = kind;
  out.failure.state = state;
  out.failure.cause = cause;
  out.failure.message = std::move(message);
  out.attempts = 0; // never started
  return out;
}

caf::timespan seconds(double s) {
  return std::chrono::duration_cast<caf::timespan>(
    std::chrono::duration<double>(s));
}

void deliver(self_ptr self, outcome_promise& promise,
             verification_outcome&& out) {
  auto& stats = self->state.stats;
  ++(out.ok ? stats.succeeded : stats.failed);
  if (out.ok)
    spdlog::info("verified {}: ok in {:.1f} ms", out.id, out.timings.total);
  else
    spdlog::info("verified {}: {} / {} / {} in {:.1f} ms: {}", out.id,
                 to_string(out.failure.kind), to_string(out.failure.state),
                 to_string(out.failure.cause), out.timings.total,
                 out.failure.message);
  promise.deliver(std::move(out));
}

bool has_slot(self_ptr self) {
  auto& st = self->state;
  return st.provider_alive && !st.given_up &&
         st.running.size() - st.stopping <
           std::min(st.max_in_flight, st.window) &&
         st.running.size() < st.max_in_flight + st.max_stopping &&
         st.creating < st.max_creating;
}

void start(self_ptr self, verification_request&& req, outcome_promise&& rp,
           uint32_t attempts = 1) {
  auto& st = self->state;
  running_verification entry;
  entry.promise = std::move(rp);
  entry.id = req.id;
  entry.attempts = attempts;
  if (attempts <= st.retry.max_retries)
    entry.retry_copy = std::make_shared<verification_request>(req);
  entry.stop_timeout_s = req.config.stop_timeout_s;
  entry.provider = st.provider.address();
  auto child =
    spawn_verification(self, caf::actor_cast<verification_parent_actor>(self),
                       std::move(req), st.provider, st.settings);
  st.running.emplace(child.address(), std::move(entry));
  ++st.creating;
  st.stats.peak_in_flight = std::max<uint64_t>(st.stats.peak_in_flight,
                                               st.running.size() - st.stopping);
  st.stats.peak_creating =
    std::max<uint64_t>(st.stats.peak_creating, st.creating);
}

void start_queued(self_ptr self) {
  auto& st = self->state;
  while (!st.queue.empty() && has_slot(self)) {
    auto next = std::move(st.queue.front());
    st.queue.pop_front();
    start(self, std::move(next.req), std::move(next.promise), next.attempts);
  }
}

/// Frees the create slot of `entry` if it still holds one.
void leave_create_phase(self_ptr self, running_verification& entry) {
  if (entry.creating) {
    entry.creating = false;
    --self->state.creating;
  }
}

void count_stop(self_ptr self, stop_status how) {
  auto& stats = self->state.stats;
  if (how == stop_status::stopped)
    ++stats.sandboxes_stopped;
  else if (how == stop_status::failed)
    ++stats.stop_failures;
}

// -- orphans ------------------------------------------------------------------

void adopt(self_ptr self, orphan_sandbox orphan);
void made_progress(self_ptr self);

/// An orphan's stop failed: one that bounced never ran (it waits for the
/// next provider); one whose sandbox is gone already counts as stopped.
void orphan_stop_failed(self_ptr self, orphan_sandbox orphan,
                        const caf::error& err) {
  if (err == caf::sec::request_receiver_down) {
    adopt(self, std::move(orphan));
    return;
  }
  if (provider_error_code(err) ==
      static_cast<uint8_t>(provider_errc::no_such_sandbox)) {
    // Gone already (the dead provider's teardown removed it).
    count_stop(self, stop_status::stopped);
    return;
  }
  spdlog::warn("stopping the orphaned sandbox {} failed: {}",
               orphan.handle.sandbox_id, describe(err));
  count_stop(self, stop_status::failed);
}

/// Stops an orphan through the current provider, once. A stop that bounced
/// from a closed mailbox never ran: the orphan waits for the next provider.
void stop_orphan(self_ptr self, orphan_sandbox orphan) {
  auto& st = self->state;
  auto token = st.next_orphan_stop++;
  auto timeout = seconds(orphan.stop_timeout_s);
  auto handle = orphan.handle;
  orphan.creator = st.provider.address(); // the provider carrying the stop
  st.orphan_stops.emplace(token, std::move(orphan));
  /// The orphan of this stop, unless its provider died first (then it is
  /// waiting again, or stopped through the replacement already).
  auto take = [self, token]() -> std::optional<orphan_sandbox> {
    auto& pending = self->state.orphan_stops;
    auto i = pending.find(token);
    if (i == pending.end())
      return std::nullopt;
    auto out = std::move(i->second);
    pending.erase(i);
    return out;
  };
  self->request(st.provider, timeout, stop_atom::value, std::move(handle))
    .then(
      [=](ok_atom) {
        if (take())
          count_stop(self, stop_status::stopped);
        // After a give-up the restarts exist only for these stops: each one
        // through is progress (the orphans are finite, so this ends). Before
        // it, a stop is not: a provider that crashes on every exec leaves
        // orphans its replacement stops, and counting those would restart
        // it at once, forever (issue 19).
        if (self->state.given_up)
          made_progress(self);
        answer_stop_waiters(self);
      },
      [=](caf::error& err) {
        if (auto taken = take())
          orphan_stop_failed(self, std::move(*taken), err);
        answer_stop_waiters(self);
      });
}

/// Takes charge of a sandbox nobody else will stop: now through a live
/// provider that is not its creator, later through a replacement, or never
/// (counted as a stop failure; the TTL reaps it) when none will come.
void adopt(self_ptr self, orphan_sandbox orphan) {
  auto& st = self->state;
  if (st.provider_alive && st.provider.address() != orphan.creator) {
    stop_orphan(self, std::move(orphan));
    return;
  }
  if (st.abandoned) {
    spdlog::warn("no provider to stop the sandbox {}; its TTL reaps it",
                 orphan.handle.sandbox_id);
    count_stop(self, stop_status::failed);
    return;
  }
  // Its creator is dying (its down_msg is on the way) or being replaced.
  st.orphans.push_back(std::move(orphan));
}

void adopt_waiting_orphans(self_ptr self) {
  auto waiting = std::move(self->state.orphans);
  self->state.orphans.clear();
  for (auto& orphan : waiting)
    adopt(self, std::move(orphan));
}

// -- restarts -----------------------------------------------------------------

/// The provider made progress (a verification came through without a
/// provider fault, or, once given up, an orphan's stop went through): the
/// restart budget and the backoff count restarts without any, so a provider
/// that crashes every few thousand calls is restarted as long as it gets
/// work done, and one that crashes on every exec backs off and is given up.
/// Answered creates and orphan stops are no progress: each crash leaves
/// orphans for the next provider to stop.
void made_progress(self_ptr self) {
  self->state.consecutive_restarts = 0;
}

/// Why a submission is refused while the provider is down.
std::string down_message(const supervisor_state& st) {
  if (!st.given_up || !st.restart_provider)
    return "the provider is down";
  auto s = std::chrono::duration_cast<std::chrono::seconds>(st.give_up_cooldown)
             .count();
  return "the provider is down: given up after " +
         std::to_string(st.max_restart_failures) +
         " restarts without a verification coming through; submissions are "
         "taken again " +
         std::to_string(s) + " s after";
}

/// Sandboxes this supervisor still has to see stopped: orphans waiting or
/// being stopped, verifications holding a sandbox (or a late create).
bool owns_sandboxes(const supervisor_state& st) {
  if (!st.orphans.empty() || !st.orphan_stops.empty() || !st.lingering.empty())
    return true;
  for (auto& [addr, entry] : st.running)
    if (!entry.handle.sandbox_id.empty())
      return true;
  return false;
}

/// No work is taken any more: everything waiting fails. Restarts go on
/// while sandboxes are owned (with a budget of their own), to stop them.
void give_up(self_ptr self) {
  auto& st = self->state;
  st.given_up = true;
  st.given_up_at = self->clock().now();
  auto queued = std::move(st.queue);
  st.queue.clear();
  for (auto& q : queued)
    deliver(self, q.promise,
            rejection(q.req.id, failure_kind::provider_unavailable,
                      verification_state::queue, failure_cause::node_down,
                      down_message(st)));
}

/// No provider will come again, not even for stops: what is still owned
/// is left to its TTL (counted as stop failures).
void abandon(self_ptr self) {
  auto& st = self->state;
  if (!st.given_up)
    give_up(self);
  st.restarting = false;
  st.abandoned = true;
  adopt_waiting_orphans(self);
}

void schedule_restart(self_ptr self);

/// One attempt: a restarter builds the provider off the scheduler threads.
void run_restart(self_ptr self) {
  auto& st = self->state;
  ++st.consecutive_restarts;
  auto restarter = spawn_provider_restarter(
    self->system(), caf::actor_cast<caf::actor>(self), st.restart_provider);
  self->request(restarter, st.restart_timeout, restart_atom::value)
    .then(
      [=](provider_actor& provider) {
        caf::anon_send_exit(restarter, caf::exit_reason::user_shutdown);
        auto& st = self->state;
        st.provider = std::move(provider);
        st.provider_alive = true;
        st.restarting = false;
        ++st.stats.provider_restarts;
        self->monitor(st.provider);
        spdlog::warn("provider restarted ({} so far)",
                     st.stats.provider_restarts);
        adopt_waiting_orphans(self);
        start_queued(self);
        answer_stop_waiters(self);
      },
      [=](caf::error& err) {
        // Too late or failed: whatever it still builds is not ours.
        caf::anon_send(restarter, abandon_atom::value);
        spdlog::error("could not restart the provider: {}", describe(err));
        schedule_restart(self); // giving up drops the orphans
        answer_stop_waiters(self);
      });
}

/// The delay before restart number `n + 1` in a row: none for the first,
/// then min, 2 min, 4 min, ... up to max.
caf::timespan backoff(const supervisor_state& st, uint32_t n) {
  if (n == 0)
    return caf::timespan{0};
  auto delay = st.backoff_min;
  for (uint32_t i = 1; i < n && delay < st.backoff_max; ++i)
    delay *= 2;
  return std::min(delay, st.backoff_max);
}

void schedule_restart(self_ptr self) {
  auto& st = self->state;
  if (!st.restart_provider) {
    abandon(self);
    return;
  }
  if (st.consecutive_restarts >= st.max_restart_failures) {
    if (!st.given_up) {
      spdlog::error("giving up on the provider after {} restarts without "
                    "progress",
                    st.consecutive_restarts);
      give_up(self);
      // The sandboxes it owns get restarts of their own, for their stops.
      st.consecutive_restarts = 0;
    } else {
      spdlog::error("no provider to stop {} sandboxes after {} restarts "
                    "without progress; their TTL reaps them",
                    st.orphans.size(), st.consecutive_restarts);
      abandon(self);
      return;
    }
  }
  if (st.given_up && !owns_sandboxes(st)) {
    abandon(self);
    return;
  }
  st.restarting = true;
  auto delay = backoff(st, st.consecutive_restarts);
  if (delay == caf::timespan{0}) {
    run_restart(self);
    return;
  }
  spdlog::warn(
    "restarting the provider in {} ms",
    std::chrono::duration_cast<std::chrono::milliseconds>(delay).count());
  self->delayed_send(self, delay, restart_timer_atom::value, ++st.restart_gen);
}

// -- deaths -------------------------------------------------------------------

/// A verification actor died without reporting: fail its submission and
/// stop the sandbox it left behind.
void on_verification_down(self_ptr self, running_verification& entry,
                          const caf::error& reason) {
  auto& st = self->state;
  if (entry.replied) {
    // Died during its stop, after the caller had the outcome: the stop may
    // or may not have run; stop is idempotent, so do it (once more) here.
    --st.stopping;
    ++st.stats.crashed;
    spdlog::error("verification {} died while stopping its sandbox {}: {}",
                  entry.id, entry.handle.sandbox_id,
                  !entry.crash.empty() ? entry.crash
                  : reason             ? self->system().render(reason)
                                       : "exited without settling");
    adopt(self, orphan_sandbox{entry.handle, caf::actor_addr{},
                               entry.stop_timeout_s});
    return;
  }
  if (entry.cancelled) {
    spdlog::info("verification {} cancelled in {}", entry.id,
                 to_string(entry.phase));
    auto created = !entry.handle.sandbox_id.empty();
    leave_create_phase(self, entry);
    deliver(self, entry.promise,
            rejection(entry.id, failure_kind::provider_unavailable, entry.phase,
                      failure_cause::killed, "cancelled"));
    if (created)
      adopt(self, orphan_sandbox{entry.handle, caf::actor_addr{},
                                 entry.stop_timeout_s});
    return;
  }
  ++st.stats.crashed;
  auto what = !entry.crash.empty() ? entry.crash
              : reason             ? self->system().render(reason)
                                   : "exited without a reply";
  spdlog::error("verification {} crashed in {}: {}", entry.id,
                to_string(entry.phase), what);
  auto created = !entry.handle.sandbox_id.empty();
  auto state = entry.phase;
  leave_create_phase(self, entry);
  auto out =
    rejection(entry.id, failure_kind::verifier_error, state,
              failure_cause::crash, "verification actor crashed: " + what);
  out.attempts = entry.attempts;
  out.node = pinned_node(entry.handle);
  deliver(self, entry.promise, std::move(out));
  if (created)
    adopt(self, orphan_sandbox{entry.handle, caf::actor_addr{},
                               entry.stop_timeout_s});
}

/// The provider died: every verification in flight fails now (their
/// requests to it would otherwise wait for their own deadlines) and hands
/// its sandbox over. Queued submissions wait for the replacement; without
/// one, they fail too.
void on_provider_down(self_ptr self, const caf::error& reason) {
  auto& st = self->state;
  spdlog::error("provider down: {}", self->system().render(reason));
  auto dead = st.provider.address();
  st.provider = provider_actor{};
  st.provider_alive = false;
  size_t lost = 0;
  for (auto& [addr, entry] : st.running)
    if (entry.provider == dead) {
      caf::anon_send(caf::actor_cast<verification_actor>(addr),
                     provider_lost_atom::value);
      if (!entry.replied)
        ++lost;
    }
  // What it had in flight was too much to get through before it crashed.
  if (lost > 0)
    st.window = std::max<size_t>(1, std::min(st.window, lost / 2));
  for (auto& [addr, waiting] : st.lingering)
    caf::anon_send(caf::actor_cast<verification_actor>(addr),
                   provider_lost_atom::value);
  // Orphan stops it had not answered wait for the replacement (stop is
  // idempotent: one the dead provider did run is merely repeated).
  for (auto i = st.orphan_stops.begin(); i != st.orphan_stops.end();) {
    if (i->second.creator != dead) {
      ++i;
      continue;
    }
    st.orphans.push_back(std::move(i->second));
    i = st.orphan_stops.erase(i);
  }
  schedule_restart(self);
}

/// A given-up provider whose cool-down is over takes work again, on
/// probation: one more restart without progress gives it up again (a
/// restart starts now when none is up or coming).
void try_again(self_ptr self) {
  auto& st = self->state;
  if (!st.restart_provider ||
      self->clock().now() - st.given_up_at < st.give_up_cooldown)
    return;
  spdlog::warn(
    "taking work again {} s after giving up on the provider",
    std::chrono::duration_cast<std::chrono::seconds>(st.give_up_cooldown)
      .count());
  st.given_up = false;
  st.abandoned = false;
  st.consecutive_restarts =
    st.max_restart_failures > 0 ? st.max_restart_failures - 1 : 0;
  if (!st.provider_alive && !st.restarting) {
    st.restarting = true;
    run_restart(self);
  }
}

caf::result<verification_outcome> admit(self_ptr self,
                                        verification_request& req) {
  auto& st = self->state;
  ++st.stats.submitted;
  if (auto err = validate(req); !err.empty()) {
    ++st.stats.failed;
    return rejection(std::move(req.id), failure_kind::invalid_request,
                     verification_state::validate,
                     failure_cause::invalid_request, std::move(err));
  }
  if (st.given_up)
    try_again(self);
  if (st.given_up || (!st.provider_alive && !st.restarting)) {
    ++st.stats.failed;
    return rejection(std::move(req.id), failure_kind::provider_unavailable,
                     verification_state::queue, failure_cause::node_down,
                     down_message(st));
  }
  // Making a promise marks the request as answered: a rejection must be
  // returned before one exists.
  if (!has_slot(self) && st.queue.size() >= st.max_queue) {
    ++st.stats.rejected_overloaded;
    ++st.stats.failed;
    return rejection(std::move(req.id), failure_kind::provider_unavailable,
                     verification_state::queue, failure_cause::overloaded,
                     "overloaded: " + std::to_string(st.max_queue) +
                       " submissions already queued");
  }
  st.budget.earn();
  auto rp = self->make_response_promise<verification_outcome>();
  if (has_slot(self))
    start(self, std::move(req), outcome_promise{rp});
  else
    st.queue.push_back(queued_submission{std::move(req), rp});
  return rp;
}

/// Cancels every submission with `id` (a client that went away).
void cancel(self_ptr self, const std::string& id) {
  auto& st = self->state;
  for (auto i = st.queue.begin(); i != st.queue.end();) {
    if (i->req.id != id) {
      ++i;
      continue;
    }
    deliver(self, i->promise,
            rejection(id, failure_kind::provider_unavailable,
                      verification_state::queue, failure_cause::killed,
                      "cancelled before it started"));
    i = st.queue.erase(i);
  }
  // A verification still in create answers `killed` and lingers for its
  // sandbox (an outstanding create is awaited, never forgotten); any other
  // exits, and its down_msg has the sandbox stopped here.
  for (auto& [addr, entry] : st.running)
    if (entry.id == id && !entry.cancelled && !entry.replied) {
      entry.cancelled = true;
      caf::anon_send(caf::actor_cast<verification_actor>(addr),
                     cancel_atom::value);
    }
}

// -- reports of verifications -------------------------------------------------

running_verification* entry_of(self_ptr self) {
  auto& running = self->state.running;
  auto i =
    running.find(caf::actor_cast<caf::actor_addr>(self->current_sender()));
  return i != running.end() ? &i->second : nullptr;
}

/// A sandbox handed over while its provider lives on is one of a lost node
/// (the nodes provider failed its calls): that node's own reapers remove
/// it, nobody here can stop it.
bool left_to_lost_node(self_ptr self, const running_verification& entry) {
  auto& st = self->state;
  return st.provider_alive && entry.provider == st.provider.address() &&
         !pinned_node(entry.handle).empty();
}

/// Counts how a verification's stop ended; a sandbox handed over is
/// adopted (stopped through the current provider), unless a lost node
/// keeps it.
void account_stop(self_ptr self, const running_verification& entry,
                  stop_status how) {
  auto& st = self->state;
  if (how == stop_status::handed_over && left_to_lost_node(self, entry))
    ++st.stats.sandboxes_left_to_node;
  else if (how == stop_status::handed_over)
    adopt(self,
          orphan_sandbox{entry.handle, entry.provider, entry.stop_timeout_s});
  else
    count_stop(self, how);
}

/// An infrastructure failure after create goes again in a fresh sandbox,
/// away from its node, when the settings and the budget allow
/// (actors/retry.hpp): first in the queue, so it takes the next slot.
bool retried(self_ptr self, running_verification& entry,
             const verification_outcome& out) {
  auto& st = self->state;
  if (!entry.retry_copy || !is_retryable(out) || st.given_up ||
      (!st.provider_alive && !st.restarting))
    return false;
  if (!st.budget.take()) {
    ++st.stats.retries_denied;
    return false;
  }
  ++st.stats.retries;
  spdlog::warn("retrying {} (attempt {}) after {} / {} / {}{}: {}", entry.id,
               entry.attempts + 1, to_string(out.failure.kind),
               to_string(out.failure.state), to_string(out.failure.cause),
               out.node.empty() ? "" : " on " + out.node, out.failure.message);
  auto req = std::move(*entry.retry_copy);
  prepare_retry(req, out.node);
  st.queue.push_front(queued_submission{
    std::move(req), std::move(entry.promise), entry.attempts + 1});
  return true;
}

void on_verified(self_ptr self, verification_outcome& out, stop_status how) {
  auto& st = self->state;
  auto addr = caf::actor_cast<caf::actor_addr>(self->current_sender());
  auto i = st.running.find(addr);
  if (i == st.running.end())
    return;
  auto& entry = i->second;
  account_stop(self, entry, how);
  // A verification that came through without a provider fault shows the
  // provider healthy again: the next crash restarts at once.
  if (out.ok || out.failure.kind != failure_kind::provider_unavailable) {
    made_progress(self);
    if (st.window < st.max_in_flight)
      ++st.window;
  }
  if (how == stop_status::pending && entry.creating)
    st.lingering.emplace( // the slot stays taken
      addr,
      lingering_create{
        entry.id, orphan_sandbox{{}, entry.provider, entry.stop_timeout_s}});
  else
    leave_create_phase(self, entry);
  out.attempts = entry.attempts;
  if (out.node.empty())
    out.node = pinned_node(entry.handle);
  // A retried submission's promise moves to its new attempt; this entry
  // stays only while its sandbox is still stopping behind it.
  if (!retried(self, entry, out))
    deliver(self, entry.promise, std::move(out));
  if (how == stop_status::stopping) {
    // The sandbox keeps its place until `settled` (or the actor's death).
    entry.replied = true;
    entry.retry_copy.reset();
    ++st.stopping;
    ++st.stats.stops_after_reply;
    st.stats.peak_stopping =
      std::max<uint64_t>(st.stats.peak_stopping, st.stopping);
  } else {
    st.running.erase(i);
  }
  start_queued(self);
}

/// A verification that replied `stopping` has stopped its sandbox.
void on_stop_settled(self_ptr self, caf::actor_addr addr, stop_status how) {
  auto& st = self->state;
  auto i = st.running.find(addr);
  if (i == st.running.end() || !i->second.replied)
    return;
  account_stop(self, i->second, how);
  st.running.erase(i);
  --st.stopping;
  start_queued(self);
}

/// A lingering verification's late create has finished, or a stop behind
/// a reply is over.
void on_settled(self_ptr self, const caf::actor_addr& addr, stop_status how) {
  auto& st = self->state;
  auto i = st.lingering.find(addr);
  if (i == st.lingering.end()) {
    on_stop_settled(self, addr, how);
    return;
  }
  auto orphan = std::move(i->second.orphan);
  st.lingering.erase(i);
  --st.creating;
  if (how != stop_status::not_needed)
    ++st.stats.sandboxes_created;
  if (how == stop_status::handed_over && !orphan.handle.sandbox_id.empty())
    adopt(self, std::move(orphan)); // its provider died with the stop
  else
    count_stop(self, how);
  start_queued(self);
}

void on_down(self_ptr self, caf::down_msg& dm) {
  auto& st = self->state;
  if (st.provider && dm.source == st.provider.address()) {
    on_provider_down(self, dm.reason);
    return;
  }
  if (stop_status how; settled_status(dm.reason, how)) {
    on_settled(self, dm.source, how); // `settled`, on the down message
    dm.reason = caf::none;            // then the normal exit it was
  }
  if (auto i = st.lingering.find(dm.source); i != st.lingering.end()) {
    auto orphan = std::move(i->second.orphan);
    st.lingering.erase(i); // died before it settled: the slot is free
    --st.creating;
    if (!orphan.handle.sandbox_id.empty()) {
      // Died while stopping its late sandbox: stop it (once more) here.
      ++st.stats.sandboxes_created;
      orphan.creator = caf::actor_addr{};
      adopt(self, std::move(orphan));
    }
    start_queued(self);
    return;
  }
  auto i = st.running.find(dm.source);
  if (i == st.running.end())
    return; // reported before it exited, or an old provider
  on_verification_down(self, i->second, dm.reason);
  st.running.erase(i);
  start_queued(self);
}

supervisor_impl::behavior_type
supervisor(self_ptr self, provider_actor provider, supervisor_config cfg) {
  auto& st = self->state;
  st.provider = std::move(provider);
  auto cores = std::max(1u, std::thread::hardware_concurrency());
  st.max_in_flight = cfg.max_in_flight > 0 ? cfg.max_in_flight : 2 * cores;
  st.window = st.max_in_flight;
  st.max_queue = cfg.max_queue;
  st.max_creating = std::max<size_t>(1, cfg.max_creating);
  st.max_stopping = !cfg.stop_after_reply  ? 0
                    : cfg.max_stopping > 0 ? cfg.max_stopping
                                           : st.max_in_flight;
  auto settings = std::make_shared<verification_settings>();
  settings->default_metadata = std::move(cfg.default_metadata);
  settings->parser = cfg.parser ? std::move(cfg.parser) : parse_json_object;
  settings->stop_after_reply = cfg.stop_after_reply;
  st.settings = std::move(settings);
  st.restart_provider = std::move(cfg.restart_provider);
  st.backoff_min = cfg.restart_backoff_min;
  st.backoff_max = std::max(cfg.restart_backoff_max, cfg.restart_backoff_min);
  st.max_restart_failures = cfg.max_restart_failures;
  st.give_up_cooldown = cfg.give_up_cooldown;
  st.restart_timeout = cfg.restart_timeout;
  st.retry = cfg.retry;
  st.budget = retry_budget{cfg.retry};
  self->set_default_handler(log_and_drop_unexpected);
  self->monitor(st.provider);
  self->set_down_handler([=](caf::down_msg& dm) {
    on_down(self, dm);
    answer_stop_waiters(self);
  });
  return {
    [=](verify_atom, verification_request& req) { return admit(self, req); },
    [=](cancel_atom, const std::string& id) { cancel(self, id); },
    [=](stats_atom) {
      auto& st = self->state;
      auto stats = st.stats;
      stats.in_flight = st.running.size() - st.stopping;
      stats.queued = st.queue.size();
      stats.creating = st.creating;
      stats.stopping = st.stopping;
      stats.cleanup_pending =
        st.orphan_stops.size() + st.orphans.size() + st.lingering.size();
      return stats;
    },
    [=](created_atom, sandbox_handle& handle) {
      if (auto entry = entry_of(self)) {
        entry->handle = std::move(handle);
        entry->phase = verification_state::ready;
        ++self->state.stats.sandboxes_created;
        return;
      }
      // A lingering verification's late sandbox, which it now stops.
      auto& lingering = self->state.lingering;
      auto i = lingering.find(
        caf::actor_cast<caf::actor_addr>(self->current_sender()));
      if (i != lingering.end())
        i->second.orphan.handle = std::move(handle);
    },
    [=](ready_atom) {
      if (auto entry = entry_of(self)) {
        entry->phase = verification_state::upload;
        leave_create_phase(self, *entry);
        start_queued(self);
      }
    },
    [=](verified_atom, verification_outcome& out, stop_status how) {
      on_verified(self, out, how);
      answer_stop_waiters(self);
    },
    [=](crashed_atom, verification_state state, std::string& what) {
      if (auto entry = entry_of(self)) {
        entry->phase = state;
        entry->crash = std::move(what);
      }
    },
    [=](restart_timer_atom, uint64_t gen) {
      if (gen == self->state.restart_gen && self->state.restarting)
        run_restart(self);
    },
    [=](await_stops_atom, caf::timespan wait) {
      return await_stops_request(self, wait);
    },
    [=](stops_due_atom, uint64_t token) { stops_due(self, token); },
  };
}

} // namespace

supervisor_actor spawn_supervisor(caf::actor_system& sys,
                                  provider_actor provider,
                                  supervisor_config cfg) {
  auto hdl = sys.spawn(supervisor, std::move(provider), std::move(cfg));
  return caf::actor_cast<supervisor_actor>(hdl);
}

bool await_stops(caf::actor_system& sys, const supervisor_actor& sup,
                 std::chrono::nanoseconds limit) {
  // The supervisor answers at `limit` at the latest; the margin covers a
  // busy mailbox, so a supervisor that never answers still ends the wait.
  auto wait = std::max(caf::timespan{0}, caf::timespan{limit});
  caf::scoped_actor self{sys};
  std::optional<uint64_t> left;
  self
    ->request(caf::actor_cast<stop_waiter_actor>(sup),
              wait + std::chrono::seconds{10}, await_stops_atom::value, wait)
    .receive([&](uint64_t n) { left = n; }, [](caf::error&) {});
  if (!left)
    return false;
  if (*left > 0)
    spdlog::warn("{} sandboxes still stopping", *left);
  return *left == 0;
}

} // namespace sv
