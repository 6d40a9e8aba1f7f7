// The life of one submission, top to bottom:
//
//   create -> ready -> upload -> exec -> download (+ parse) -> stop -> reply
//
// Each state is one function that sends its request with the state's
// deadline and `become`s the state's behaviour. Any failure records a typed
// `verification_failure` and jumps to stop; stop runs exactly once when
// create returned a sandbox, never otherwise, and its own failure never
// replaces the outcome.

#include "actors/verification.hpp"

#include "messages/errors.hpp"
#include "messages/validation.hpp"

#include <atomic>
#include <caf/after.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/sec.hpp>
#include <caf/stateful_actor.hpp>
#include <cstdio>
#include <spdlog/spdlog.h>

namespace sv {

struct verification_actor_state {
  static inline const char* name = "sv.verification";

  verification_request req;
  provider_actor provider;
  caf::actor parent;
  std::shared_ptr<const verification_settings> settings;

  verification_state current = verification_state::create;
  bool created = false;
  sandbox_handle handle;
  std::string call_dir;
  caf::actor_clock::time_point started;
  caf::actor_clock::time_point state_started;
  caf::actor_clock::time_point ready_deadline;
  caf::timespan poll_delay = first_poll_delay;
  /// The caller has the create timeout; a late sandbox is still expected.
  bool awaiting_late_create = false;
  verification_outcome outcome;
};

namespace {

using self_ptr = caf::stateful_actor<verification_actor_state>*;

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
std::string make_call_dir(const verification_request& req) {
  static std::atomic<uint64_t> counter{0};
  std::string name;
  for (char c : req.id.substr(0, 64)) {
    bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
    name += safe ? c : '_';
  }
  name += '-';
  name += std::to_string(counter.fetch_add(1, std::memory_order_relaxed));
  return req.work_dir + '/' + name;
}

// -- bookkeeping shared by all states -----------------------------------------

/// Records how long the current state took (download includes parse).
void finish_state(self_ptr self) {
  auto& st = self->state;
  auto elapsed = millis(self->clock().now() - st.state_started);
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
    t.stop = elapsed;
    break;
  default:
    break;
  }
}

/// Closes the current state and enters `next`.
void enter(self_ptr self, verification_state next) {
  auto& st = self->state;
  finish_state(self);
  spdlog::debug("verification {}: {} -> {}", st.req.id, to_string(st.current),
                to_string(next));
  st.current = next;
  st.state_started = self->clock().now();
}

void enter_stop(self_ptr self);

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

/// Maps an error of a provider request to provider_unavailable with the
/// right cause: a deadline, a dead provider, or the provider's own error.
void fail_provider(self_ptr self, const caf::error& err, double deadline_s) {
  auto what = to_string(self->state.current);
  if (err == caf::sec::request_timeout) {
    fail(self, failure_kind::provider_unavailable, failure_cause::timeout,
         std::string{what} + " did not finish within its " +
           format_seconds(deadline_s) + " deadline");
  } else if (err == caf::sec::request_receiver_down) {
    fail(self, failure_kind::provider_unavailable, failure_cause::node_down,
         std::string{what} + " failed: the provider is down");
  } else {
    fail(self, failure_kind::provider_unavailable, failure_cause::error,
         std::string{what} + " failed: " + describe(err));
  }
}

/// Sends the outcome to the supervisor (the caller hears it now).
void report(self_ptr self, stop_status how) {
  auto& st = self->state;
  st.outcome.timings.total = millis(self->clock().now() - st.started);
  self->send(st.parent, verified_atom::value, std::move(st.outcome), how);
}

/// Sends the outcome to the supervisor and exits.
void conclude(self_ptr self, stop_status how) {
  report(self, how);
  self->quit();
}

/// The provider is gone: whatever was asked of it will never be answered.
/// Fail now; stop the sandbox through the replacement, if there is one, else
/// leave it to its TTL. A stop already sent went to the dead provider and is
/// not repeated (stop is sent exactly once).
void on_provider_down(self_ptr self, provider_actor& replacement) {
  auto& st = self->state;
  if (st.current == verification_state::stop) {
    finish_state(self);
    conclude(self, stop_status::failed);
    return;
  }
  st.outcome.ok = false;
  st.outcome.result = nullptr;
  st.outcome.failure.kind = failure_kind::provider_unavailable;
  st.outcome.failure.state = st.current;
  st.outcome.failure.cause = failure_cause::node_down;
  st.outcome.failure.message =
    std::string{to_string(st.current)} + " failed: the provider went down";
  if (st.created && replacement) {
    st.provider = std::move(replacement);
    enter_stop(self);
    return;
  }
  finish_state(self);
  conclude(self, st.created ? stop_status::failed : stop_status::not_needed);
}

/// The behaviour of a state: its own handlers plus those all states share.
/// (A behaviour timeout must come last, hence the shared handler first.)
template <class... Handlers>
caf::behavior state_behavior(self_ptr self, Handlers... handlers) {
  return {[=](provider_down_atom, provider_actor& replacement) {
            on_provider_down(self, replacement);
          },
          std::move(handlers)...};
}

// -- the states, in order -----------------------------------------------------

void enter_ready(self_ptr self);
void poll_status(self_ptr self);
void enter_upload(self_ptr self);
void enter_exec(self_ptr self);
void enter_download(self_ptr self);
void parse_result(self_ptr self, const std::string& text);

/// A create answered after its deadline: the caller already has the
/// timeout, but the sandbox exists, so stop it (exactly once) and exit.
void stop_late_sandbox(self_ptr self, sandbox_handle handle) {
  auto& st = self->state;
  spdlog::warn("verification {}: create answered after its deadline; "
               "stopping the late sandbox {}",
               st.req.id, handle.sandbox_id);
  auto done = [=](stop_status how) {
    self->send(self->state.parent, late_sandbox_atom::value, how);
    self->quit();
  };
  self
    ->request(st.provider, seconds(st.req.config.stop_timeout_s),
              stop_atom::value, std::move(handle))
    .then([=](ok_atom) { done(stop_status::stopped); },
          [=](caf::error&) { done(stop_status::failed); });
}

/// The create deadline passed: the caller hears the timeout now; the actor
/// lingers (bounded by the create request's own timeout) in case the
/// provider still answers with a sandbox that must be stopped.
void on_create_deadline(self_ptr self) {
  auto& st = self->state;
  st.outcome.ok = false;
  st.outcome.failure.kind = failure_kind::provider_unavailable;
  st.outcome.failure.state = verification_state::create;
  st.outcome.failure.cause = failure_cause::timeout;
  st.outcome.failure.message = "create did not finish within its " +
                               format_seconds(st.req.config.ready_timeout_s) +
                               " deadline";
  finish_state(self);
  report(self, stop_status::not_needed);
  st.awaiting_late_create = true;
  self->become([=](provider_down_atom, provider_actor&) { self->quit(); });
}

/// create: build the sandbox. Create and ready share one deadline.
void enter_create(self_ptr self) {
  auto& st = self->state;
  auto ready_timeout = seconds(st.req.config.ready_timeout_s);
  st.ready_deadline = st.state_started + ready_timeout;
  self->become(state_behavior(
    self, caf::after(ready_timeout) >> [=] { on_create_deadline(self); }));
  auto spec = make_sandbox_spec(st.req, st.settings->default_metadata);
  auto patience = ready_timeout + seconds(st.req.config.stop_timeout_s);
  self->request(st.provider, patience, create_atom::value, std::move(spec))
    .then(
      [=](sandbox_handle& handle) {
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
      },
      [=](caf::error& err) {
        if (self->state.awaiting_late_create) {
          self->quit(); // nothing was created after all
          return;
        }
        fail_provider(self, err, self->state.req.config.ready_timeout_s);
      });
}

/// ready: poll the status, with backoff, until `running` or the deadline.
void enter_ready(self_ptr self) {
  enter(self, verification_state::ready);
  self->become(state_behavior(self, [=](poll_atom) { poll_status(self); }));
  poll_status(self);
}

void poll_status(self_ptr self) {
  auto& st = self->state;
  auto left = st.ready_deadline - self->clock().now();
  if (left <= caf::timespan{0}) {
    fail(self, failure_kind::provider_unavailable, failure_cause::timeout,
         "sandbox not running within its " +
           format_seconds(st.req.config.ready_timeout_s) + " deadline");
    return;
  }
  self->request(st.provider, left, status_atom::value, st.handle)
    .then(
      [=](sandbox_status status) {
        auto& st = self->state;
        switch (status) {
        case sandbox_status::running:
          self->send(st.parent, ready_atom::value);
          enter_upload(self);
          return;
        case sandbox_status::starting:
        case sandbox_status::unknown: {
          auto left = st.ready_deadline - self->clock().now();
          self->delayed_send(self, std::min(st.poll_delay, left),
                             poll_atom::value);
          st.poll_delay = std::min(st.poll_delay * 2, max_poll_delay);
          return;
        }
        default:
          fail(self, failure_kind::provider_unavailable, failure_cause::error,
               "sandbox reported status " + std::string{to_string(status)} +
                 " before it was running");
        }
      },
      [=](caf::error& err) {
        fail_provider(self, err, self->state.req.config.ready_timeout_s);
      });
}

/// upload: the submission's files and request.json into the call directory.
void enter_upload(self_ptr self) {
  enter(self, verification_state::upload);
  self->become(state_behavior(self));
  auto& st = self->state;
  st.call_dir = make_call_dir(st.req);
  auto files = std::move(st.req.files);
  files.emplace(request_file_name, st.req.request.dump());
  st.req.request = nullptr; // the sandbox has it now
  auto timeout = st.req.config.upload_timeout_s;
  self
    ->request(st.provider, seconds(timeout), upload_atom::value, st.handle,
              st.call_dir, std::move(files))
    .then([=](ok_atom) { enter_exec(self); },
          [=](caf::error& err) { fail_provider(self, err, timeout); });
}

/// What an exec result means for the verification.
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
           "runner exited with status " + std::to_string(res.return_code) +
             msg);
    return;
  case exec_error_type::timeout:
    fail(self, failure_kind::verifier_error, failure_cause::timeout,
         "runner overran its " + format_seconds(st.req.exec_timeout_s) +
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
}

/// exec: `<python> sandbox_runner.py request.json result.json`. The provider
/// kills the runner at exec_timeout_s; the grace covers its report.
void enter_exec(self_ptr self) {
  enter(self, verification_state::exec);
  self->become(state_behavior(self));
  auto& st = self->state;
  exec_request cmd;
  cmd.argv = {st.req.config.python, std::string{runner_file_name},
              std::string{request_file_name}, std::string{result_file_name}};
  cmd.cwd = st.call_dir;
  cmd.env = st.req.config.env;
  cmd.timeout_s = st.req.exec_timeout_s;
  cmd.log_path = st.call_dir + '/' + std::string{runner_log_name};
  auto deadline_s = st.req.exec_timeout_s + st.req.config.exec_grace_s;
  self
    ->request(st.provider, seconds(deadline_s), exec_atom::value, st.handle,
              std::move(cmd))
    .then(
      [=](exec_result& res) { on_exec_result(self, res); },
      [=](caf::error& err) {
        if (err != caf::sec::request_timeout) {
          fail_provider(self, err, deadline_s);
          return;
        }
        fail(self, failure_kind::verifier_error, failure_cause::timeout,
             "no report of the runner within its " +
               format_seconds(self->state.req.exec_timeout_s) + " deadline (+" +
               format_seconds(self->state.req.config.exec_grace_s) + " grace)");
      });
}

/// download: result.json. A missing, odd or oversized file is the runner's
/// fault; a transport failure is the provider's.
void enter_download(self_ptr self) {
  enter(self, verification_state::download);
  self->become(state_behavior(self));
  auto& st = self->state;
  auto timeout = st.req.config.download_timeout_s;
  auto path = st.call_dir + '/' + std::string{result_file_name};
  self
    ->request(st.provider, seconds(timeout), download_atom::value, st.handle,
              std::move(path))
    .then([=](std::string& text) { parse_result(self, text); },
          [=](caf::error& err) {
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
          });
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

/// stop: exactly once when create returned a sandbox, whatever happened.
void enter_stop(self_ptr self) {
  auto& st = self->state;
  if (!st.created) {
    finish_state(self);
    conclude(self, stop_status::not_needed);
    return;
  }
  enter(self, verification_state::stop);
  self->become(state_behavior(self));
  auto timeout = st.req.config.stop_timeout_s;
  self->request(st.provider, seconds(timeout), stop_atom::value, st.handle)
    .then(
      [=](ok_atom) {
        finish_state(self);
        conclude(self, stop_status::stopped);
      },
      [=](caf::error& err) {
        auto& st = self->state;
        spdlog::warn("verification {}: stopping sandbox {} failed: {}",
                     st.req.id, st.handle.sandbox_id, describe(err));
        finish_state(self);
        conclude(self, stop_status::failed);
      });
}

caf::behavior verification(self_ptr self, verification_request req,
                           provider_actor provider, caf::actor parent,
                           std::shared_ptr<const verification_settings> cfg) {
  auto& st = self->state;
  st.req = std::move(req);
  st.provider = std::move(provider);
  st.parent = std::move(parent);
  st.settings = std::move(cfg);
  st.started = st.state_started = self->clock().now();
  st.outcome.id = st.req.id;
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
  enter_create(self);
  return self->current_behavior();
}

} // namespace

sandbox_spec make_sandbox_spec(const verification_request& req,
                               const json& default_metadata) {
  sandbox_spec spec;
  spec.image = req.config.image;
  spec.ready_timeout_s = req.config.ready_timeout_s;
  spec.ttl_s = req.config.ready_timeout_s + req.exec_timeout_s + ttl_margin_s;
  spec.env = req.config.env;
  spec.metadata =
    default_metadata.is_object() ? default_metadata : json::object();
  spec.metadata.update(req.metadata);
  spec.metadata.update(req.config.metadata);
  spec.resources = req.config.resources;
  spec.provider_options = req.config.provider_options;
  return spec;
}

caf::actor
spawn_verification(caf::event_based_actor* supervisor, verification_request req,
                   provider_actor provider,
                   std::shared_ptr<const verification_settings> settings) {
  return supervisor->spawn<caf::monitored>(
    verification, std::move(req), std::move(provider),
    caf::actor_cast<caf::actor>(supervisor), std::move(settings));
}

} // namespace sv
