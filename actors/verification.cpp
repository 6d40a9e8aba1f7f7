// The life of one submission, top to bottom:
//
//   create -> ready -> upload -> exec -> download (+ parse) -> stop -> reply
//
// Each state is one function that sends its request with the state's
// deadline and `become`s the state's behaviour. Any failure records a typed
// `verification_failure` and jumps to stop; stop runs exactly once when
// create returned a sandbox, never otherwise, and its own failure never
// replaces the outcome.
//
// Every state has a generation (`gen`, bumped by each `enter`). Reply
// handlers and timers carry the generation they were made in and do
// nothing once it has passed (`in_state`), so a late reply or an old
// request timeout cannot drive a later state. The one exception is the
// create reply: a sandbox may arrive after the create deadline and must
// still be stopped (see `on_create_deadline`).
//
// When the provider is gone (its down_msg reached the supervisor, or a
// request bounced from its closed mailbox) the verification fails with
// node_down and hands the sandbox over to the supervisor, which stops it
// through the replacement: nothing is sent to a dead provider.

#include "actors/verification.hpp"

#include "actors/detail/quiet.hpp"
#include "messages/errors.hpp"
#include "messages/validation.hpp"

#include <algorithm>
#include <atomic>
#include <caf/detail/type_traits.hpp>
#include <caf/sec.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <cstdio>
#include <optional>
#include <spdlog/spdlog.h>

namespace sv {

struct verification_actor_state;

namespace {

using self_ptr = verification_actor::stateful_pointer<verification_actor_state>;
using behavior = verification_actor::behavior_type;

/// What a state does when its deadline passes.
using deadline_handler = void (*)(self_ptr);

} // namespace

/// What the states after create still need of the submission (the id is
/// the outcome's): the sandbox spec's parts go to the provider at create, so
/// an in-flight verification does not keep a whole `verification_request`.
struct verification_plan {
  env_map env;
  std::string python;
  std::string work_dir;
  double ready_timeout_s = 0;
  double upload_timeout_s = 0;
  double download_timeout_s = 0;
  double stop_timeout_s = 0;
  double exec_grace_s = 0;
  double exec_timeout_s = 0;
  /// Until upload.
  file_map files;
  json request;
};

struct verification_actor_state {
  static inline const char* name = "sv.verification";

  verification_plan plan;
  provider_actor provider;
  verification_parent_actor parent;
  std::shared_ptr<const verification_settings> settings;

  verification_state current = verification_state::create;
  /// Bumped whenever the state changes; see `in_state`.
  uint64_t gen = 0;
  bool created = false;
  /// The outcome went to the supervisor before the stop (`stopping`).
  bool replied = false;
  /// The caller has the create timeout; a late sandbox is still expected.
  bool awaiting_late_create = false;
  /// A late sandbox came and is being stopped.
  bool stopping_late_sandbox = false;
  sandbox_handle handle;
  std::string call_dir;
  caf::actor_clock::time_point started;
  caf::actor_clock::time_point state_started;
  caf::actor_clock::time_point ready_deadline;
  caf::timespan poll_delay = first_poll_delay;
  verification_outcome outcome;
  /// The behaviour of every state that does not poll (`plain_state`).
  std::optional<behavior> plain;

  // -- the one deadline timer (see the top of the file) --
  /// The current state's deadline and its handler (none between states).
  caf::actor_clock::time_point deadline;
  deadline_handler on_deadline = nullptr;
  /// The private response id the clock times out, and when it is due.
  caf::message_id timer_id;
  caf::actor_clock::time_point armed_at;
  bool armed = false;
  /// CAF drops a response handler once it ran: re-added before arming.
  bool timer_handler = false;
};

namespace {

template <class F, class... Ts>
auto in_state_impl(self_ptr self, uint64_t gen, F f,
                   caf::detail::type_list<Ts...>) {
  return [self, gen, f](Ts... xs) {
    if (self->state.gen == gen)
      f(std::forward<Ts>(xs)...);
    else
      spdlog::debug("verification {}: dropped a reply of a passed state",
                    self->state.outcome.id);
  };
}

/// Wraps a reply handler so that it runs only while the state it was made
/// in lasts. (Reply handlers need typed arguments in CAF 0.17, hence the
/// trait instead of a generic lambda.)
template <class F>
auto in_state(self_ptr self, F f) {
  using args = typename caf::detail::get_callable_trait<F>::arg_types;
  return in_state_impl(self, self->state.gen, std::move(f), args{});
}

caf::timespan seconds(double s) {
  return std::chrono::duration_cast<caf::timespan>(
    std::chrono::duration<double>(s));
}

/// "30 s", "2.5 s": seconds as a person writes them.
std::string format_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g s", s);
  return buf;
}

double millis(caf::timespan d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

/// A directory name unique to this call: the id, made safe, and a counter.
std::string make_call_dir(const std::string& id, const std::string& work_dir) {
  static std::atomic<uint64_t> counter{0};
  std::string name;
  for (char c : id.substr(0, 64)) {
    bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
    name += safe ? c : '_';
  }
  name += '-';
  name += std::to_string(counter.fetch_add(1, std::memory_order_relaxed));
  return work_dir + '/' + name;
}

/// make_sandbox_spec, moving out of `req` what no later state needs (the
/// image, metadata, resources and provider options), so an in-flight
/// verification holds less.
sandbox_spec take_sandbox_spec(verification_request& req,
                               const json& default_metadata) {
  sandbox_spec spec;
  spec.image = std::move(req.config.image);
  spec.ready_timeout_s = req.config.ready_timeout_s;
  spec.ttl_s = req.config.ready_timeout_s + req.exec_timeout_s + ttl_margin_s;
  spec.env = req.config.env; // exec needs it too
  // The default's, then the submission's, then the config's (later keys
  // win). Without a default the submission's object is moved, not copied.
  if (default_metadata.is_object() && !default_metadata.empty()) {
    spec.metadata = default_metadata;
    spec.metadata.update(req.metadata);
  } else if (req.metadata.is_object()) {
    spec.metadata = std::move(req.metadata);
  } else {
    spec.metadata = json::object();
    spec.metadata.update(req.metadata); // throws, as validation would
  }
  spec.metadata.update(req.config.metadata);
  spec.resources = std::move(req.config.resources);
  spec.provider_options = std::move(req.config.provider_options);
  req.metadata = nullptr;
  req.config.metadata = nullptr;
  req.config.provider_options = nullptr;
  return spec;
}

// -- the deadline timer -------------------------------------------------------

/// The shortest deadline of any state, in seconds.
double earliest_state_timeout(const verification_plan& p) {
  return std::min({p.ready_timeout_s, p.upload_timeout_s,
                   p.exec_timeout_s + p.exec_grace_s, p.download_timeout_s,
                   p.stop_timeout_s});
}

void on_timer(self_ptr self);

/// Makes the clock time out `timer_id` at `t` (and nothing earlier).
void arm(self_ptr self, caf::actor_clock::time_point t) {
  auto& st = self->state;
  auto& clock = self->clock();
  if (st.armed)
    clock.cancel_request_timeout(self, st.timer_id);
  if (!st.timer_handler) {
    st.timer_handler = true;
    self->add_multiplexed_response_handler(
      st.timer_id, caf::behavior{[self](caf::error&) { on_timer(self); }});
  }
  clock.set_request_timeout(t, self, st.timer_id);
  st.armed = true;
  st.armed_at = t;
}

/// The current state's deadline, at `t`: `handler` runs then unless the
/// state ends first. The timer moves only if it would fire too late.
void set_deadline_at(self_ptr self, caf::actor_clock::time_point t,
                     deadline_handler handler) {
  auto& st = self->state;
  st.deadline = t;
  st.on_deadline = handler;
  if (!st.armed || st.deadline < st.armed_at)
    arm(self, st.deadline);
}

/// The same, `d` after the state began (its request goes out right then).
void set_deadline(self_ptr self, caf::timespan d, deadline_handler handler) {
  set_deadline_at(self, self->state.state_started + d, handler);
}

/// The clock timed the private id out: the state's deadline passed, or the
/// timer was armed for an earlier state and moves on to this one's.
void on_timer(self_ptr self) {
  auto& st = self->state;
  st.armed = false;
  st.timer_handler = false; // CAF removed it
  if (st.on_deadline == nullptr)
    return;
  if (self->clock().now() < st.deadline) {
    arm(self, st.deadline);
    return;
  }
  auto handler = st.on_deadline;
  st.on_deadline = nullptr;
  handler(self);
}

/// A provider request: no timeout of its own, the state's deadline covers
/// it (see the top of the file).
template <class... Ts>
auto ask(self_ptr self, Ts&&... xs) {
  return self->request(self->state.provider, caf::infinite,
                       std::forward<Ts>(xs)...);
}

// -- bookkeeping shared by all states -----------------------------------------

/// Records how long the current state took, until `now` (download
/// includes parse).
void finish_state(self_ptr self, caf::actor_clock::time_point now) {
  auto& st = self->state;
  auto elapsed = millis(now - st.state_started);
  auto& t = st.outcome.timings;
  switch (st.current) {
  case verification_state::create:
    t.create = elapsed;
    break;
  case verification_state::ready:
    t.ready = elapsed;
    break;
  case verification_state::upload:
    t.upload = elapsed;
    break;
  case verification_state::exec:
    t.exec = elapsed;
    break;
  case verification_state::download:
    t.download = elapsed;
    break;
  case verification_state::parse:
    t.download += elapsed;
    break;
  case verification_state::stop:
    if (!st.replied)
      t.stop = elapsed;
    break;
  default:
    break;
  }
}

void finish_state(self_ptr self) {
  finish_state(self, self->clock().now());
}

/// Closes the current state and enters `next` (without a deadline yet).
void enter(self_ptr self, verification_state next) {
  auto& st = self->state;
  auto now = self->clock().now();
  finish_state(self, now);
  spdlog::debug("verification {}: {} -> {}", st.outcome.id,
                to_string(st.current), to_string(next));
  st.current = next;
  ++st.gen;
  st.on_deadline = nullptr;
  st.state_started = now;
}

void enter_stop(self_ptr self);
void hand_over(self_ptr self, std::string message);

/// Records the failure of the current state and moves on to stop.
void fail(self_ptr self, failure_kind kind, failure_cause cause,
          std::string message) {
  auto& out = self->state.outcome;
  out.ok = false;
  out.failure.kind = kind;
  out.failure.state = self->state.current;
  out.failure.cause = cause;
  out.failure.message = std::move(message);
  enter_stop(self);
}

/// The provider will not serve again: a request bounced from its closed
/// mailbox, or one it failed as `unavailable` while shutting down.
bool provider_is_going(const caf::error& err) {
  return err == caf::sec::request_receiver_down ||
         provider_error_code(err) ==
           static_cast<uint8_t>(provider_errc::unavailable);
}

/// The provider refused a create for what the spec asks (a field it cannot
/// honour, a resource above its ceiling): the request's fault, named in the
/// message, not the provider's.
bool refuses_request(const caf::error& err) {
  return provider_error_code(err) ==
         static_cast<uint8_t>(provider_errc::invalid_argument);
}

/// The current state did not finish within `deadline_s`.
void fail_deadline(self_ptr self, double deadline_s) {
  fail(self, failure_kind::provider_unavailable, failure_cause::timeout,
       std::string{to_string(self->state.current)} +
         " did not finish within its " + format_seconds(deadline_s) +
         " deadline");
}

/// Maps an error of a provider request to provider_unavailable with the
/// right cause: a dead provider, or the provider's own error. (Deadlines
/// are the state timer's; a request_timeout can still come from a provider
/// that forwards a request of its own.)
void fail_provider(self_ptr self, const caf::error& err, double deadline_s) {
  auto what = to_string(self->state.current);
  if (err == caf::sec::request_timeout) {
    fail_deadline(self, deadline_s);
  } else if (provider_is_going(err)) {
    // Bounced from a closed mailbox, or failed by a provider on its way out:
    // its down_msg has not reached the supervisor yet. Never stop through
    // it.
    hand_over(self, std::string{what} + " failed: the provider is down (" +
                      describe(err) + ")");
  } else {
    fail(self, failure_kind::provider_unavailable, failure_cause::error,
         std::string{what} + " failed: " + describe(err));
  }
}

/// Sends the outcome to the supervisor (the caller hears it now).
void report(self_ptr self, stop_status how) {
  auto& st = self->state;
  st.outcome.timings.total = millis(self->clock().now() - st.started);
  st.outcome.timings.stop_after_reply = how == stop_status::stopping;
  self->send(st.parent, verified_atom::value, std::move(st.outcome), how);
}

/// Nothing after this may act; the actor exits.
void finish(self_ptr self) {
  ++self->state.gen;
  self->state.on_deadline = nullptr;
  self->quit();
}

/// Sends the outcome to the supervisor and exits.
void conclude(self_ptr self, stop_status how) {
  report(self, how);
  finish(self);
}

void settle(self_ptr self, stop_status how);

/// The stop is over: reported with the outcome, or after it (`settled`).
void stop_done(self_ptr self, stop_status how) {
  auto& st = self->state;
  if (!st.replied) {
    finish_state(self);
    conclude(self, how);
    return;
  }
  settle(self, how);
}

/// The provider is gone: fail the current state with node_down and leave
/// the sandbox (if any) to the supervisor, which stops it through the
/// replacement.
void hand_over(self_ptr self, std::string message) {
  auto& st = self->state;
  st.outcome.ok = false;
  st.outcome.result = nullptr;
  st.outcome.failure.kind = failure_kind::provider_unavailable;
  st.outcome.failure.state = st.current;
  st.outcome.failure.cause = failure_cause::node_down;
  st.outcome.failure.message = std::move(message);
  finish_state(self);
  conclude(self,
           st.created ? stop_status::handed_over : stop_status::not_needed);
}

/// The supervisor saw the provider die. During stop the outcome before it
/// stands and the stop is handed over: the dead provider may or may not
/// have done it, and stop is idempotent on every provider (a replacement
/// answers a sandbox its predecessor removed as stopped), so the supervisor
/// repeats it through the replacement.
void on_provider_lost(self_ptr self) {
  auto& st = self->state;
  if (st.current == verification_state::stop) {
    stop_done(self, stop_status::handed_over);
    return;
  }
  hand_over(self, std::string{to_string(st.current)} +
                    " failed: the provider went down");
}

void on_cancel(self_ptr self);

/// The behaviour of a state: what it does on a poll (only while the
/// generation that scheduled it lasts) and when the provider is lost.
template <class OnPoll, class OnLost>
behavior state_behavior(self_ptr self, OnPoll on_poll, OnLost on_lost) {
  return {[=](provider_lost_atom) { on_lost(); },
          [=](poll_atom, uint64_t gen) {
            if (gen == self->state.gen)
              on_poll();
          },
          [=](cancel_atom) { on_cancel(self); }};
}

/// A state that does not poll (create, upload, exec, download, stop): one
/// behaviour, made once and shared (a copy is a reference), so these state
/// changes allocate nothing.
behavior plain_state(self_ptr self) {
  auto& st = self->state;
  if (!st.plain)
    st.plain = state_behavior(
      self, [] {}, [=] { on_provider_lost(self); });
  return *st.plain;
}

// -- the states, in order -----------------------------------------------------

void enter_ready(self_ptr self);
void poll_status(self_ptr self);
void enter_upload(self_ptr self);
void enter_exec(self_ptr self);
void enter_download(self_ptr self);
void parse_result(self_ptr self, const std::string& text);

/// A lingering verification is done: the late create finished (or never
/// will), the slot is free; or the stop behind a reply is over. The actor
/// exits with the status as its reason (`settled_reason`).
void settle(self_ptr self, stop_status how) {
  ++self->state.gen;
  self->state.on_deadline = nullptr;
  self->quit(settled_reason(how)); // the supervisor's down message says it
}

/// The create answered after its deadline. The caller already has the
/// timeout, but the sandbox exists, so stop it (exactly once) and settle.
void stop_late_sandbox(self_ptr self, sandbox_handle handle) {
  auto& st = self->state;
  spdlog::warn("verification {}: create answered after its deadline; "
               "stopping the late sandbox {}",
               st.outcome.id, handle.sandbox_id);
  st.stopping_late_sandbox = true;
  ++st.gen;
  // The supervisor keeps the handle: it stops the sandbox through a
  // replacement if this stop is handed over (or this actor dies).
  self->send(st.parent, created_atom::value, handle);
  set_deadline_at(self, self->clock().now() + seconds(st.plan.stop_timeout_s),
                  [](self_ptr self) { settle(self, stop_status::failed); });
  ask(self, stop_atom::value, std::move(handle))
    .then(in_state(self, [=](ok_atom) { settle(self, stop_status::stopped); }),
          in_state(self, [=](caf::error& err) {
            // Bounced from a closed mailbox: it never ran.
            settle(self, provider_is_going(err) ? stop_status::handed_over
                                                : stop_status::failed);
          }));
}

/// The caller hears a failure in create now (`cause`, `message`) while the
/// create is still outstanding: the actor lingers (bounded by the create's
/// patience: ready + stop deadline, past the deadline the provider was given
/// with the create, after which it makes no sandbox) in case the provider
/// still answers with a sandbox that must be stopped. Until then the
/// supervisor keeps the create slot taken (`pending`).
void linger_for_create(self_ptr self, failure_cause cause,
                       std::string message) {
  auto& st = self->state;
  st.outcome.ok = false;
  st.outcome.failure.kind = failure_kind::provider_unavailable;
  st.outcome.failure.state = verification_state::create;
  st.outcome.failure.cause = cause;
  st.outcome.failure.message = std::move(message);
  finish_state(self);
  report(self, stop_status::pending);
  ++st.gen;
  st.awaiting_late_create = true;
  set_deadline_at(self,
                  st.started +
                    seconds(st.plan.ready_timeout_s + st.plan.stop_timeout_s),
                  [](self_ptr self) {
                    if (!self->state.stopping_late_sandbox)
                      settle(self, stop_status::not_needed);
                  });
  // The provider died: with the late sandbox's stop unanswered it may
  // never have run (a crash while handling it neither answers nor
  // bounces), so the supervisor repeats it through the replacement.
  self->become(state_behavior(
    self, [] {},
    [=] {
      settle(self, self->state.stopping_late_sandbox ? stop_status::handed_over
                                                     : stop_status::not_needed);
    }));
}

/// The create deadline passed: the caller hears the timeout now.
void on_create_deadline(self_ptr self) {
  linger_for_create(self, failure_cause::timeout,
                    "create did not finish within its " +
                      format_seconds(self->state.plan.ready_timeout_s) +
                      " deadline");
}

/// The supervisor cancels (the client went away). In create the answer is
/// still to come, so the caller hears `killed` now and the actor lingers for
/// the sandbox as after a create deadline; in any other state the actor
/// exits and the supervisor stops the sandbox it knows of. Once the caller
/// has the outcome (lingering, stopping) there is nothing to cancel.
void on_cancel(self_ptr self) {
  auto& st = self->state;
  if (st.awaiting_late_create || st.replied)
    return;
  if (st.current == verification_state::create) {
    linger_for_create(self, failure_cause::killed, "cancelled");
    return;
  }
  self->quit(caf::exit_reason::user_shutdown);
}

void on_created(self_ptr self, sandbox_handle& handle) {
  auto& st = self->state;
  if (st.awaiting_late_create) {
    stop_late_sandbox(self, std::move(handle));
    return;
  }
  if (handle.sandbox_id.empty()) {
    fail(self, failure_kind::provider_unavailable, failure_cause::error,
         "create failed: the provider returned no sandbox id");
    return;
  }
  st.created = true;
  st.handle = std::move(handle);
  self->send(st.parent, created_atom::value, st.handle);
  enter_ready(self);
}

/// create: build the sandbox. Create and ready share one deadline.
behavior enter_create(self_ptr self, sandbox_spec spec) {
  auto& st = self->state;
  auto ready_timeout = seconds(st.plan.ready_timeout_s);
  st.ready_deadline = st.state_started + ready_timeout;
  set_deadline(self, ready_timeout, on_create_deadline);
  // The provider counts from the create's arrival, later than now: half the
  // stop deadline of slack keeps its answer inside our patience.
  spec.create_deadline_s = st.plan.ready_timeout_s + st.plan.stop_timeout_s / 2;
  // A provider in this process counts it from now, however long the create
  // waits in its mailbox: then no sandbox can come after the lingering below
  // has ended (the timer that ends it is queued behind any answer).
  spec.create_deadline_at = st.state_started + seconds(spec.create_deadline_s);
  // Not `in_state`: a sandbox that comes after the deadline is still ours.
  ask(self, create_atom::value, std::move(spec))
    .then([=](sandbox_handle& handle) { on_created(self, handle); },
          [=](caf::error& err) {
            auto& st = self->state;
            if (st.awaiting_late_create) {
              if (!st.stopping_late_sandbox)
                settle(self, stop_status::not_needed); // nothing came after all
            } else if (st.current == verification_state::create &&
                       refuses_request(err)) {
              fail(self, failure_kind::invalid_request,
                   failure_cause::invalid_request,
                   "the provider refused the request: " + describe(err));
            } else if (st.current == verification_state::create) {
              fail_provider(self, err, st.plan.ready_timeout_s);
            }
          });
  return plain_state(self);
}

/// The create + ready deadline passed in ready.
void ready_deadline_passed(self_ptr self) {
  fail(self, failure_kind::provider_unavailable, failure_cause::timeout,
       "sandbox not running within its " +
         format_seconds(self->state.plan.ready_timeout_s) + " deadline");
}

/// ready: poll the status, with backoff, until `running` or the deadline.
void enter_ready(self_ptr self) {
  enter(self, verification_state::ready);
  set_deadline_at(self, self->state.ready_deadline, ready_deadline_passed);
  self->become(state_behavior(
    self, [=] { poll_status(self); }, [=] { on_provider_lost(self); }));
  poll_status(self);
}

void on_status(self_ptr self, sandbox_status status) {
  auto& st = self->state;
  switch (status) {
  case sandbox_status::running:
    self->send(st.parent, ready_atom::value);
    enter_upload(self);
    return;
  case sandbox_status::starting:
  case sandbox_status::unknown: {
    auto left = st.ready_deadline - self->clock().now();
    self->delayed_send(self, std::min(st.poll_delay, left), poll_atom::value,
                       st.gen);
    st.poll_delay = std::min(st.poll_delay * 2, max_poll_delay);
    return;
  }
  default:
    fail(self, failure_kind::provider_unavailable, failure_cause::error,
         "sandbox reported status " + std::string{to_string(status)} +
           " before it was running");
  }
}

void poll_status(self_ptr self) {
  auto& st = self->state;
  if (st.ready_deadline <= self->clock().now()) {
    ready_deadline_passed(self);
    return;
  }
  // A status request is answered or bounced; the ready deadline covers it.
  // Its generation is the state's: a reply after the next poll still counts.
  ask(self, status_atom::value, st.handle)
    .then(
      in_state(self, [=](sandbox_status status) { on_status(self, status); }),
      in_state(self, [=](caf::error& err) {
        if (err == caf::sec::request_timeout)
          ready_deadline_passed(self);
        else
          fail_provider(self, err, self->state.plan.ready_timeout_s);
      }));
}

/// upload: the submission's files and request.json into the call directory.
void enter_upload(self_ptr self) {
  enter(self, verification_state::upload);
  self->become(plain_state(self));
  auto& st = self->state;
  st.call_dir = make_call_dir(st.outcome.id, st.plan.work_dir);
  auto files = std::move(st.plan.files);
  files.emplace(request_file_name, st.plan.request.dump());
  st.plan.request = nullptr; // the sandbox has it now
  auto timeout = st.plan.upload_timeout_s;
  set_deadline(self, seconds(timeout), [](self_ptr self) {
    fail_deadline(self, self->state.plan.upload_timeout_s);
  });
  ask(self, upload_atom::value, st.handle, st.call_dir, std::move(files))
    .then(in_state(self, [=](ok_atom) { enter_exec(self); }),
          in_state(self, [=](caf::error& err) {
            // The files' paths were checked before create: a path the
            // sandbox refuses is the work_dir's (an absolute directory it
            // cannot write), the request's fault.
            if (provider_error_code(err) ==
                static_cast<uint8_t>(provider_errc::invalid_path))
              fail(self, failure_kind::invalid_request,
                   failure_cause::invalid_request,
                   "work_dir \"" + self->state.plan.work_dir +
                     "\": " + describe(err));
            else
              fail_provider(self, err, timeout);
          }));
}

/// What an exec result means for the verification.
/// "runner exited with status 3", and what the provider adds to its own
/// "exited with status 3" (output truncated, an OOM kill), said once.
std::string runner_exit_message(const exec_result& res) {
  auto what = "exited with status " + std::to_string(res.return_code);
  auto out = "runner " + what;
  auto rest = res.message;
  if (rest.compare(0, what.size(), what) == 0)
    rest.erase(0, what.size());
  while (!rest.empty() &&
         (rest.front() == ';' || rest.front() == ':' || rest.front() == ' '))
    rest.erase(0, 1);
  if (!rest.empty())
    out += "; " + rest;
  return out;
}

void on_exec_result(self_ptr self, exec_result& res) {
  auto& st = self->state;
  st.outcome.failure.log_tail = std::move(res.log_tail);
  auto msg = res.message.empty() ? std::string{} : ": " + res.message;
  switch (res.error_type) {
  case exec_error_type::none:
    if (res.return_code == 0)
      enter_download(self);
    else
      fail(self, failure_kind::verifier_error, failure_cause::error,
           runner_exit_message(res));
    return;
  case exec_error_type::timeout:
    fail(self, failure_kind::verifier_error, failure_cause::timeout,
         "runner overran its " + format_seconds(st.plan.exec_timeout_s) +
           " deadline" + msg);
    return;
  case exec_error_type::oom:
    fail(self, failure_kind::verifier_error, failure_cause::oom,
         "runner killed for memory" + msg);
    return;
  case exec_error_type::killed:
    fail(self, failure_kind::verifier_error, failure_cause::killed,
         "runner killed by a signal" + msg);
    return;
  case exec_error_type::runtime:
    fail(self, failure_kind::verifier_error, failure_cause::error,
         "runner failed" + msg);
    return;
  case exec_error_type::sandbox:
    fail(self, failure_kind::provider_unavailable, failure_cause::error,
         "sandbox failed while running the runner" + msg);
    return;
  }
  // Out of range (an in-process provider; off the wire, loading maps it to
  // `sandbox`): the provider's fault, never a verification left waiting.
  fail(self, failure_kind::provider_unavailable, failure_cause::error,
       "the provider reported an unknown exec error_type " +
         std::to_string(static_cast<int>(res.error_type)));
}

/// No report within the exec deadline and its grace: the provider never
/// said how the runner ended.
void exec_deadline_passed(self_ptr self) {
  auto& st = self->state;
  fail(self, failure_kind::provider_unavailable, failure_cause::timeout,
       "the provider did not report the runner's end within its " +
         format_seconds(st.plan.exec_timeout_s) + " deadline (+" +
         format_seconds(st.plan.exec_grace_s) + " grace)");
}

/// exec: `<python> sandbox_runner.py request.json result.json`. The provider
/// kills the runner at exec_timeout_s; the grace covers its report.
void enter_exec(self_ptr self) {
  enter(self, verification_state::exec);
  self->become(plain_state(self));
  auto& st = self->state;
  exec_request cmd;
  cmd.argv = {std::move(st.plan.python), std::string{runner_file_name},
              std::string{request_file_name}, std::string{result_file_name}};
  cmd.cwd = st.call_dir;
  cmd.env = std::move(st.plan.env); // exec runs once
  cmd.timeout_s = st.plan.exec_timeout_s;
  cmd.log_path = st.call_dir + '/' + std::string{runner_log_name};
  auto deadline_s = st.plan.exec_timeout_s + st.plan.exec_grace_s;
  set_deadline(self, seconds(deadline_s), exec_deadline_passed);
  ask(self, exec_atom::value, st.handle, std::move(cmd))
    .then(in_state(self, [=](exec_result& res) { on_exec_result(self, res); }),
          in_state(self, [=](caf::error& err) {
            if (err == caf::sec::request_timeout)
              exec_deadline_passed(self);
            else
              fail_provider(self, err, deadline_s);
          }));
}

/// download: result.json. A missing, odd or oversized file is the runner's
/// fault; a transport failure is the provider's.
void enter_download(self_ptr self) {
  enter(self, verification_state::download);
  self->become(plain_state(self));
  auto& st = self->state;
  auto timeout = st.plan.download_timeout_s;
  auto path = st.call_dir + '/' + std::string{result_file_name};
  set_deadline(self, seconds(timeout), [](self_ptr self) {
    fail_deadline(self, self->state.plan.download_timeout_s);
  });
  ask(self, download_atom::value, st.handle, std::move(path))
    .then(in_state(self, [=](std::string& text) { parse_result(self, text); }),
          in_state(self, [=](caf::error& err) {
            switch (static_cast<provider_errc>(provider_error_code(err))) {
            case provider_errc::not_found:
              fail(self, failure_kind::verifier_error,
                   failure_cause::invalid_result,
                   "runner wrote no result.json");
              return;
            case provider_errc::not_regular_file:
            case provider_errc::too_large:
            case provider_errc::invalid_path:
              fail(self, failure_kind::verifier_error,
                   failure_cause::invalid_result, describe(err));
              return;
            default:
              fail_provider(self, err, timeout);
            }
          }));
}

/// parse: the caller's parser turns the text into the result.
void parse_result(self_ptr self, const std::string& text) {
  enter(self, verification_state::parse);
  auto& st = self->state;
  std::string error;
  if (!st.settings->parser(text, st.outcome.result, error)) {
    st.outcome.result = nullptr;
    fail(self, failure_kind::verifier_error, failure_cause::invalid_result,
         "result.json rejected: " + error);
    return;
  }
  st.outcome.ok = true;
  st.outcome.failure.log_tail.clear();
  enter_stop(self);
}

/// The stop did not answer within stop_timeout_s (or failed): the outcome
/// stands, the TTL reaps the sandbox.
void stop_failed(self_ptr self, const std::string& why) {
  auto& st = self->state;
  spdlog::warn("verification {}: stopping sandbox {} failed: {}", st.outcome.id,
               st.handle.sandbox_id, why);
  stop_done(self, stop_status::failed);
}

/// stop: exactly once when create returned a sandbox, whatever happened.
/// With `stop_after_reply` the outcome goes out first and the stop finishes
/// behind it. A stop bounced from a closed mailbox never ran: the
/// supervisor does it through the replacement.
void enter_stop(self_ptr self) {
  auto& st = self->state;
  if (!st.created) {
    finish_state(self);
    conclude(self, stop_status::not_needed);
    return;
  }
  enter(self, verification_state::stop);
  self->become(plain_state(self));
  if (st.settings->stop_after_reply) {
    report(self, stop_status::stopping);
    st.replied = true;
  }
  set_deadline(self, seconds(st.plan.stop_timeout_s), [](self_ptr self) {
    stop_failed(self, "no answer within its " +
                        format_seconds(self->state.plan.stop_timeout_s) +
                        " deadline");
  });
  ask(self, stop_atom::value, st.handle)
    .then(
      in_state(self, [=](ok_atom) { stop_done(self, stop_status::stopped); }),
      in_state(self, [=](caf::error& err) {
        if (provider_is_going(err))
          stop_done(self, stop_status::handed_over);
        else
          stop_failed(self, describe(err));
      }));
}

behavior verification(self_ptr self, verification_request req,
                      provider_actor provider, verification_parent_actor parent,
                      std::shared_ptr<const verification_settings> cfg) {
  auto& st = self->state;
  auto spec = take_sandbox_spec(req, cfg->default_metadata);
  auto& plan = st.plan;
  plan.env = std::move(req.config.env);
  plan.python = std::move(req.config.python);
  plan.work_dir = std::move(req.work_dir);
  plan.ready_timeout_s = req.config.ready_timeout_s;
  plan.upload_timeout_s = req.config.upload_timeout_s;
  plan.download_timeout_s = req.config.download_timeout_s;
  plan.stop_timeout_s = req.config.stop_timeout_s;
  plan.exec_grace_s = req.config.exec_grace_s;
  plan.exec_timeout_s = req.exec_timeout_s;
  plan.files = std::move(req.files);
  plan.request = std::move(req.request);
  st.outcome.id = std::move(req.id);
  st.provider = std::move(provider);
  st.parent = std::move(parent);
  st.settings = std::move(cfg);
  st.started = st.state_started = self->clock().now();
  st.timer_id =
    self->new_request_id(caf::message_priority::normal).response_id();
  // Armed once, at the earliest deadline any state can have: every state
  // begins after `started`, so this never fires too late; when it fires
  // early it moves on to the current state's deadline (`on_timer`). Most
  // verifications end before it: one set and one cancel in all.
  arm(self, st.started + seconds(earliest_state_timeout(plan)));
  // Stale timers and late replies are normal: logged and dropped, never
  // printed to stdout or answered with an error that kills this actor.
  self->set_default_handler(log_and_drop_unexpected);
  self->set_exception_handler([self](std::exception_ptr& eptr) -> caf::error {
    // CAF kills the actor after this; tell the supervisor where and why, so
    // the caller's failure names the state and the sandbox gets stopped.
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(eptr);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    self->send(self->state.parent, crashed_atom::value, self->state.current,
               what);
    return caf::make_error(caf::sec::runtime_error, std::move(what));
  });
  return enter_create(self, std::move(spec));
}

} // namespace

sandbox_spec make_sandbox_spec(const verification_request& req,
                               const json& default_metadata) {
  auto copy = req;
  return take_sandbox_spec(copy, default_metadata);
}

verification_actor
spawn_verification(caf::local_actor* spawner, verification_parent_actor parent,
                   verification_request req, provider_actor provider,
                   std::shared_ptr<const verification_settings> settings) {
  return spawner->spawn<caf::monitored>(verification, std::move(req),
                                        std::move(provider), std::move(parent),
                                        std::move(settings));
}

} // namespace sv
