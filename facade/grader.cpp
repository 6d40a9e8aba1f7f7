#include "facade/grader.hpp"

#include "actors/detail/quiet.hpp"
#include "actors/supervisor.hpp"
#include "messages/enums.hpp"
#include "messages/errors.hpp"
#include "providers/factory.hpp"
#include "service/service.hpp"

#include <atomic>
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <chrono>
#include <utility>
#include <vector>

namespace sv {

namespace {

verification_failure make_failure(failure_kind kind, verification_state state,
                                  failure_cause cause, std::string message) {
  verification_failure out;
  out.kind = kind;
  out.state = state;
  out.cause = cause;
  out.message = std::move(message);
  return out;
}

/// How long one call may wait for its outcome: its own deadlines and a
/// margin for the queue.
std::chrono::milliseconds call_timeout(const verification_request& req,
                                       double margin_s) {
  auto& c = req.config;
  double s = c.ready_timeout_s + c.upload_timeout_s + req.exec_timeout_s +
             c.exec_grace_s + c.download_timeout_s + c.stop_timeout_s +
             margin_s;
  if (!(s > 0) || s > 1e9)
    s = 1e9; // NaN or absurd: still finite
  return std::chrono::milliseconds{static_cast<long long>(s * 1000)};
}

/// One call: asks the supervisor, answers `done` exactly once (the outcome,
/// a timeout, or the supervisor's death).
void call_behavior(caf::event_based_actor* self, verification_request req,
                   supervisor_actor supervisor,
                   std::chrono::milliseconds timeout,
                   std::function<void(verification_outcome)> done) {
  self->set_default_handler(log_and_drop_unexpected);
  auto answered = std::make_shared<bool>(false);
  auto id = req.id;
  auto finish = [self, answered, done](verification_outcome out) {
    if (*answered)
      return;
    *answered = true;
    done(std::move(out));
    self->quit();
  };
  auto fail = [id, finish](verification_failure f) {
    verification_outcome out;
    out.id = id;
    out.failure = std::move(f);
    finish(std::move(out));
  };
  self->monitor(supervisor);
  self->set_down_handler([fail](caf::down_msg&) {
    fail(make_failure(failure_kind::provider_unavailable,
                      verification_state::queue, failure_cause::node_down,
                      "the grader shut down before the submission finished"));
  });
  self->request(supervisor, timeout, verify_atom::value, std::move(req))
    .then([finish](verification_outcome& out) { finish(std::move(out)); },
          [fail](caf::error& err) {
            fail(
              make_failure(failure_kind::provider_unavailable,
                           verification_state::queue, failure_cause::timeout,
                           "no outcome from the supervisor: " + describe(err)));
          });
}

} // namespace

// -- sandbox_verification_error ----------------------------------------------

sandbox_verification_error::sandbox_verification_error(
  verification_failure failure)
    : std::runtime_error(failure.message), failure_(std::move(failure)) {
  // nop
}

std::string_view sandbox_verification_error::failure_kind_name() const {
  return to_string(failure_.kind);
}

// -- grader -------------------------------------------------------------------

struct grader::state {
  std::unique_ptr<service> svc;
  double call_margin_s = 0;
  std::atomic<uint64_t> calls{0}; // names each call in the log: grader-N
};

grader::grader(const json& provider_block, grader_options options)
    : state_(std::make_unique<state>()) {
  service_options so;
  so.threads = options.threads;
  state_->svc = std::make_unique<service>(parse_provider_block(provider_block),
                                          std::move(so));
  state_->call_margin_s = options.call_margin_s;
  supervisor_config sup;
  sup.max_in_flight = options.max_in_flight;
  sup.max_queue = options.max_queue;
  sup.max_creating = options.max_creating;
  state_->svc->supervise(std::move(sup));
}

grader::~grader() {
  // Stops behind the last replies finish first (bounded; the backend's
  // shutdown removes whatever is left); the service's actor system then
  // waits for every actor, each call's included.
  state_->svc->shut_down(std::chrono::seconds{10});
  state_->svc.reset();
}

void grader::verify(verification_request request,
                    std::function<void(verification_outcome)> done) {
  auto& st = *state_;
  auto timeout = call_timeout(request, st.call_margin_s);
  st.svc->system().spawn(call_behavior, std::move(request),
                         st.svc->supervisor(), timeout, std::move(done));
}

void grader::run_verification_sandbox(verification_config config,
                                      file_map files, json request,
                                      double exec_timeout_s,
                                      result_transform parse_result,
                                      json metadata, std::string work_dir,
                                      verification_callback done) {
  verification_request req;
  req.id = "grader-" + std::to_string(++state_->calls);
  req.config = std::move(config);
  req.files = std::move(files);
  req.request = std::move(request);
  req.exec_timeout_s = exec_timeout_s;
  req.metadata = std::move(metadata);
  req.work_dir = std::move(work_dir);
  verify(std::move(req), [parse_result = std::move(parse_result),
                          done = std::move(done)](verification_outcome out) {
    if (!out.ok) {
      done(nullptr, std::make_exception_ptr(
                      sandbox_verification_error{std::move(out.failure)}));
      return;
    }
    if (!parse_result) {
      done(std::move(out.result), nullptr);
      return;
    }
    json parsed;
    try {
      parsed = parse_result(out.result);
    } catch (const std::exception& e) {
      done(nullptr,
           std::make_exception_ptr(sandbox_verification_error{make_failure(
             failure_kind::verifier_error, verification_state::parse,
             failure_cause::invalid_result,
             std::string{"parse_result failed: "} + e.what())}));
      return;
    }
    done(std::move(parsed), nullptr);
  });
}

std::future<json>
grader::run_verification_sandbox(verification_config config, file_map files,
                                 json request, double exec_timeout_s,
                                 result_transform parse_result, json metadata,
                                 std::string work_dir) {
  auto promise = std::make_shared<std::promise<json>>();
  auto future = promise->get_future();
  run_verification_sandbox(
    std::move(config), std::move(files), std::move(request), exec_timeout_s,
    std::move(parse_result), std::move(metadata), std::move(work_dir),
    [promise](json result, std::exception_ptr error) {
      if (error)
        promise->set_exception(error);
      else
        promise->set_value(std::move(result));
    });
  return future;
}

supervisor_stats grader::stats() {
  return state_->svc->stats().value_or(supervisor_stats{});
}

} // namespace sv
