// The supervisor: admission, one monitored verification actor per
// submission, exactly one terminal reply per submission.
//
// Every submission is in exactly one of three places: rejected at once
// (invalid, overloaded, provider gone), waiting in `queue`, or running in
// `running`. A running entry leaves only through `verified` (the actor's own
// report) or its `down_msg` (the actor died without one); both deliver the
// promise and erase the entry, so the caller hears exactly once.

#include "actors/supervisor.hpp"

#include "actors/verification.hpp"
#include "messages/errors.hpp"
#include "messages/validation.hpp"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_response_promise.hpp>
#include <deque>
#include <spdlog/spdlog.h>
#include <thread>
#include <unordered_map>

namespace sv {

bool parse_json_object(const std::string& text, json& result,
                       std::string& error) {
  result = json::parse(text, nullptr, false);
  if (result.is_discarded()) {
    error = "not valid JSON";
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

/// A submission whose verification actor is alive.
struct running_verification {
  outcome_promise promise;
  std::string id;
  double stop_timeout_s = 60;
  /// The last state the supervisor knows of: create, ready (after
  /// `created`), upload (after `ready`).
  verification_state phase = verification_state::create;
  /// Whether `phase` still holds a slot of the create cap.
  bool creating = true;
  sandbox_handle handle;
  /// What the actor's exception handler reported, if it threw.
  std::string crash;
};

struct queued_submission {
  verification_request req;
  outcome_promise promise;
};

struct supervisor_state {
  static inline const char* name = "sv.supervisor";

  provider_actor provider;
  bool provider_alive = true;
  size_t max_in_flight = 0;
  size_t max_queue = 0;
  size_t max_creating = 0;
  std::shared_ptr<const verification_settings> settings;
  std::function<provider_actor(caf::actor_system&)> restart_provider;
  std::unordered_map<caf::actor_addr, running_verification> running;
  std::deque<queued_submission> queue;
  size_t creating = 0;
  supervisor_stats stats;
};

using self_ptr = caf::stateful_actor<supervisor_state>*;

verification_outcome rejection(std::string id, failure_kind kind,
                               verification_state state, failure_cause cause,
                               std::string message) {
  verification_outcome out;
  out.id = std::move(id);
  out.failure.kind = kind;
  out.failure.state = state;
  out.failure.cause = cause;
  out.failure.message = std::move(message);
  return out;
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
  return st.running.size() < st.max_in_flight && st.creating < st.max_creating;
}

void start(self_ptr self, verification_request&& req, outcome_promise&& rp) {
  auto& st = self->state;
  running_verification entry;
  entry.promise = std::move(rp);
  entry.id = req.id;
  entry.stop_timeout_s = req.config.stop_timeout_s;
  auto child =
    spawn_verification(self, std::move(req), st.provider, st.settings);
  st.running.emplace(child.address(), std::move(entry));
  ++st.creating;
  st.stats.peak_in_flight =
    std::max<uint64_t>(st.stats.peak_in_flight, st.running.size());
  st.stats.peak_creating =
    std::max<uint64_t>(st.stats.peak_creating, st.creating);
}

void start_queued(self_ptr self) {
  auto& st = self->state;
  while (!st.queue.empty() && has_slot(self)) {
    auto next = std::move(st.queue.front());
    st.queue.pop_front();
    start(self, std::move(next.req), std::move(next.promise));
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

/// A verification actor died without reporting: fail its submission and
/// stop the sandbox it left behind.
void on_verification_down(self_ptr self, running_verification& entry,
                          const caf::error& reason) {
  auto& st = self->state;
  ++st.stats.crashed;
  auto what = !entry.crash.empty() ? entry.crash
              : reason             ? self->system().render(reason)
                                   : "exited without a reply";
  spdlog::error("verification {} crashed in {}: {}", entry.id,
                to_string(entry.phase), what);
  auto created = !entry.handle.sandbox_id.empty();
  auto state = entry.phase;
  leave_create_phase(self, entry);
  deliver(self, entry.promise,
          rejection(entry.id, failure_kind::verifier_error, state,
                    failure_cause::crash,
                    "verification actor crashed: " + what));
  if (!created)
    return;
  auto id = entry.id;
  auto timeout = std::chrono::duration_cast<caf::timespan>(
    std::chrono::duration<double>(entry.stop_timeout_s));
  self->request(st.provider, timeout, stop_atom::value, entry.handle)
    .then([=](ok_atom) { count_stop(self, stop_status::stopped); },
          [=](caf::error& err) {
            spdlog::warn("stopping the sandbox of crashed verification {} "
                         "failed: {}",
                         id, describe(err));
            count_stop(self, stop_status::failed);
          });
}

/// The provider died: every verification in flight fails now (their
/// requests to it would otherwise wait for their own deadlines). With a
/// replacement, queued submissions wait for it; without, they fail too.
void on_provider_down(self_ptr self, const caf::error& reason) {
  auto& st = self->state;
  spdlog::error("provider down: {}", self->system().render(reason));
  st.provider = provider_actor{};
  if (st.restart_provider) {
    try {
      st.provider = st.restart_provider(self->system());
    } catch (const std::exception& e) {
      spdlog::error("could not restart the provider: {}", e.what());
    }
  }
  st.provider_alive = static_cast<bool>(st.provider);
  if (st.provider_alive) {
    ++st.stats.provider_restarts;
    self->monitor(st.provider);
    spdlog::warn("provider restarted ({} so far)", st.stats.provider_restarts);
  }
  for (auto& [addr, entry] : st.running)
    self->send(caf::actor_cast<caf::actor>(addr), provider_down_atom::value,
               st.provider);
  if (st.provider_alive)
    return;
  auto queued = std::move(st.queue);
  st.queue.clear();
  for (auto& q : queued)
    deliver(self, q.promise,
            rejection(q.req.id, failure_kind::provider_unavailable,
                      verification_state::queue, failure_cause::node_down,
                      "the provider is down"));
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
  if (!st.provider_alive) {
    ++st.stats.failed;
    return rejection(std::move(req.id), failure_kind::provider_unavailable,
                     verification_state::queue, failure_cause::node_down,
                     "the provider is down");
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
  auto rp = self->make_response_promise<verification_outcome>();
  if (has_slot(self))
    start(self, std::move(req), outcome_promise{rp});
  else
    st.queue.push_back(queued_submission{std::move(req), rp});
  return rp;
}

caf::behavior supervisor(self_ptr self, provider_actor provider,
                         supervisor_config cfg) {
  auto& st = self->state;
  st.provider = std::move(provider);
  auto cores = std::max(1u, std::thread::hardware_concurrency());
  st.max_in_flight = cfg.max_in_flight > 0 ? cfg.max_in_flight : 2 * cores;
  st.max_queue = cfg.max_queue;
  st.max_creating = std::max<size_t>(1, cfg.max_creating);
  auto settings = std::make_shared<verification_settings>();
  settings->default_metadata = std::move(cfg.default_metadata);
  settings->parser = cfg.parser ? std::move(cfg.parser) : parse_json_object;
  st.settings = std::move(settings);
  st.restart_provider = std::move(cfg.restart_provider);
  self->monitor(st.provider);
  self->set_down_handler([=](caf::down_msg& dm) {
    auto& st = self->state;
    if (st.provider && dm.source == st.provider.address()) {
      on_provider_down(self, dm.reason);
      return;
    }
    auto i = st.running.find(dm.source);
    if (i == st.running.end())
      return; // reported `verified` before it exited: nothing to do
    on_verification_down(self, i->second, dm.reason);
    st.running.erase(i);
    start_queued(self);
  });
  auto entry_of = [=]() -> running_verification* {
    auto& running = self->state.running;
    auto i =
      running.find(caf::actor_cast<caf::actor_addr>(self->current_sender()));
    return i != running.end() ? &i->second : nullptr;
  };
  return {
    [=](verify_atom, verification_request& req) { return admit(self, req); },
    [=](stats_atom) {
      auto& st = self->state;
      auto stats = st.stats;
      stats.in_flight = st.running.size();
      stats.queued = st.queue.size();
      stats.creating = st.creating;
      return stats;
    },
    [=](created_atom, sandbox_handle& handle) {
      if (auto entry = entry_of()) {
        entry->handle = std::move(handle);
        entry->phase = verification_state::ready;
        ++self->state.stats.sandboxes_created;
      }
    },
    [=](ready_atom) {
      if (auto entry = entry_of()) {
        entry->phase = verification_state::upload;
        leave_create_phase(self, *entry);
        start_queued(self);
      }
    },
    [=](late_sandbox_atom, stop_status how) {
      ++self->state.stats.sandboxes_created;
      count_stop(self, how);
    },
    [=](crashed_atom, verification_state state, std::string& what) {
      if (auto entry = entry_of()) {
        entry->phase = state;
        entry->crash = std::move(what);
      }
    },
    [=](verified_atom, verification_outcome& out, stop_status how) {
      auto& st = self->state;
      auto i = st.running.find(
        caf::actor_cast<caf::actor_addr>(self->current_sender()));
      if (i == st.running.end())
        return;
      leave_create_phase(self, i->second);
      count_stop(self, how);
      deliver(self, i->second.promise, std::move(out));
      st.running.erase(i);
      start_queued(self);
    },
  };
}

} // namespace

supervisor_actor spawn_supervisor(caf::actor_system& sys,
                                  provider_actor provider,
                                  supervisor_config cfg) {
  auto hdl = sys.spawn(supervisor, std::move(provider), std::move(cfg));
  return caf::actor_cast<supervisor_actor>(hdl);
}

} // namespace sv
