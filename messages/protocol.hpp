#pragma once

// The protocol of DESIGN.md as plain value types. Everything here may cross
// an actor boundary, including one between nodes: each type has `inspect()`
// and is registered under the same name everywhere (messages/registry.cpp).
// JSON conversion lives in messages/json.hpp.

#include "messages/enums.hpp"
#include "messages/json_inspect.hpp"

#include <caf/meta/type_name.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace sv {

using json = nlohmann::json;

/// Text files by sandbox-relative path.
using file_map = std::map<std::string, std::string>;

/// Environment variables.
using env_map = std::map<std::string, std::string>;

// -- sandboxes ----------------------------------------------------------------

/// Resources asked for a sandbox. Zero (or empty) means "not set".
struct sandbox_resources {
  double cpu = 0;
  int64_t memory_mib = 0;
  double disk_gib = 0;
  int32_t gpu = 0;
  std::string gpu_type;
};

/// What `create` builds: one fresh, single-use sandbox.
struct sandbox_spec {
  std::string image;
  double ttl_s = 0;
  double ready_timeout_s = 600;
  /// Seconds from the create's arrival after which nobody waits for its
  /// answer any more (0: no such deadline). A provider whose create finishes
  /// later removes the sandbox itself instead of handing it to nobody.
  double create_deadline_s = 0;
  /// The same deadline as a point on the actor clock, set by a requester in
  /// the provider's own process when it sends the create (its "arrival":
  /// a local mailbox takes no time to reach, however long the provider
  /// takes to dequeue it). When set, it wins over `create_deadline_s`.
  /// Process-local: not serialized (`inspect` leaves it out), so across a
  /// node boundary only `create_deadline_s` travels, measured from the
  /// receiver's dequeue.
  std::chrono::steady_clock::time_point create_deadline_at{};
  std::string workdir = "/sandbox";
  env_map env;
  json metadata = json::object();
  sandbox_resources resources;
  json provider_options = json::object();
};

/// When the create of `spec` that a provider dequeued at `dequeued` stops
/// being awaited: `create_deadline_at` if set, else `create_deadline_s`
/// after the dequeue; `time_point::max()` when neither is set.
inline std::chrono::steady_clock::time_point
create_deadline(const sandbox_spec& spec,
                std::chrono::steady_clock::time_point dequeued) {
  using clock = std::chrono::steady_clock;
  if (spec.create_deadline_at != clock::time_point{})
    return spec.create_deadline_at;
  if (!(spec.create_deadline_s > 0))
    return clock::time_point::max();
  return dequeued + std::chrono::duration_cast<clock::duration>(
                      std::chrono::duration<double>(spec.create_deadline_s));
}

/// Names a sandbox a provider created. `state` is the provider's own.
struct sandbox_handle {
  std::string sandbox_id;
  std::string provider_name;
  std::string state;
};

/// One command in a sandbox. Paths are relative to the sandbox's workdir.
/// With a `log_path`, stdout and stderr both go to that file.
struct exec_request {
  std::vector<std::string> argv;
  std::string cwd;
  env_map env;
  double timeout_s = 0;
  std::string log_path;
};

/// How a command ended. `stdout_text`/`stderr_text` are empty when the
/// request named a `log_path`; then `log_tail` holds the log's last bytes
/// (at most `log_tail_bytes`). `message` says what happened in words.
struct exec_result {
  std::string stdout_text;
  std::string stderr_text;
  int32_t return_code = 0;
  exec_error_type error_type = exec_error_type::none;
  std::string message;
  std::string log_tail;
};

/// How much of the runner log a failure carries (the seed's constant).
inline constexpr size_t log_tail_bytes = 2000;

// -- verifications ------------------------------------------------------------

/// How to build and drive the sandbox of one verification.
struct verification_config {
  env_map env;
  std::string image;
  json metadata = json::object();
  json provider_options = json::object();
  std::string python = "python3";
  double ready_timeout_s = 600;
  double upload_timeout_s = 60;
  double download_timeout_s = 60;
  double stop_timeout_s = 60;
  /// How long past `exec_timeout_s` to wait for the provider to report the
  /// runner's end before giving up on it.
  double exec_grace_s = 10;
  sandbox_resources resources;
};

/// One submission.
struct verification_request {
  std::string id;
  verification_config config;
  file_map files;
  json request = json::object();
  double exec_timeout_s = 30;
  json metadata = json::object();
  std::string work_dir = "calls";
};

/// Why a verification produced no result. Always masks the sample.
struct verification_failure {
  failure_kind kind = failure_kind::verifier_error;
  verification_state state = verification_state::create;
  failure_cause cause = failure_cause::error;
  std::string message;
  std::string log_tail;
};

/// Milliseconds spent per state; negative for a state never entered (or,
/// for `stop`, not waited for). Every time here is one the caller waited
/// for: `total` runs from the submission to its reply.
struct state_timings {
  double create = -1;
  double ready = -1;
  double upload = -1;
  double exec = -1;
  double download = -1;
  double stop = -1;
  double total = 0;
  /// The stop ran after the reply (its time is in no field here).
  bool stop_after_reply = false;
};

/// The one terminal reply of a verification: `ok` with the parsed
/// `result.json` in `result`, or not `ok` with `failure` saying why.
struct verification_outcome {
  std::string id;
  bool ok = false;
  json result;
  verification_failure failure;
  state_timings timings;
  /// Answered from the result cache (`--cache`), without a sandbox.
  bool cached = false;
  /// Verifications it took (1, or more when an infrastructure failure was
  /// retried in a fresh sandbox; 0 for a submission never started).
  uint32_t attempts = 1;
  /// The node the (last) sandbox ran on, when the provider pins sandboxes
  /// to nodes (see `pinned_node`); empty otherwise.
  std::string node;
};

/// How the handles of one provider name the node their sandbox is pinned
/// to ("" for none).
using node_pinning = std::string (*)(const sandbox_handle& hdl);

/// Registers how the handles whose `provider_name` is `provider_name` name
/// their node: a provider that places sandboxes on nodes does it when it
/// starts (providers/nodes). Any thread.
void register_node_pinning(const std::string& provider_name, node_pinning fn);

/// The node `hdl`'s sandbox is pinned to, as its provider registered; empty
/// for providers that pin none.
std::string pinned_node(const sandbox_handle& hdl);

/// What a supervisor has done so far.
struct supervisor_stats {
  uint64_t submitted = 0;
  uint64_t succeeded = 0;
  uint64_t failed = 0;
  uint64_t rejected_overloaded = 0;
  uint64_t crashed = 0;
  uint64_t sandboxes_created = 0;
  uint64_t sandboxes_stopped = 0;
  uint64_t stop_failures = 0;
  uint64_t provider_restarts = 0;
  /// Verifications retried after an infrastructure failure, and retries the
  /// budget refused.
  uint64_t retries = 0;
  uint64_t retries_denied = 0;
  /// Sandboxes of a lost node, left to that node's own reapers (neither
  /// stopped nor failed to stop by the front).
  uint64_t sandboxes_left_to_node = 0;
  uint64_t in_flight = 0;
  uint64_t queued = 0;
  uint64_t creating = 0;
  /// The most verifications ever running at once.
  uint64_t peak_in_flight = 0;
  /// The most verifications ever in create or ready at once.
  uint64_t peak_creating = 0;
  /// Sandboxes being stopped after their reply went out, now and at most.
  uint64_t stopping = 0;
  uint64_t peak_stopping = 0;
  /// Stops that ran after their reply (whatever their result).
  uint64_t stops_after_reply = 0;
  /// Sandboxes whose end is still to come after their caller's reply, apart
  /// from `stopping`: orphans the supervisor stops itself (in flight, or
  /// waiting for a provider) and late creates still awaited.
  uint64_t cleanup_pending = 0;
};

// -- inspection ---------------------------------------------------------------
//
// Enums are carried as their underlying integers; the messages that carry
// one range-check it on load (`mend_unknown_error_type`,
// `check_failure_enums`). A bare `sandbox_status` (the status reply) has no
// such hook in CAF 0.17 short of a throwing `serialize()`: the verification's
// ready state treats a status it does not know as a provider error.

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sandbox_resources& x) {
  return f(caf::meta::type_name("sv::sandbox_resources"), x.cpu, x.memory_mib,
           x.disk_gib, x.gpu, x.gpu_type);
}

/// Leaves out `create_deadline_at` (a point on this process's clock).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sandbox_spec& x) {
  return f(caf::meta::type_name("sv::sandbox_spec"), x.image, x.ttl_s,
           x.ready_timeout_s, x.create_deadline_s, x.workdir, x.env, x.metadata,
           x.resources, x.provider_options);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sandbox_handle& x) {
  return f(caf::meta::type_name("sv::sandbox_handle"), x.sandbox_id,
           x.provider_name, x.state);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, exec_request& x) {
  return f(caf::meta::type_name("sv::exec_request"), x.argv, x.cwd, x.env,
           x.timeout_s, x.log_path);
}

/// An exec result read off the wire whose `error_type` names no enumerator
/// (a provider of another version, or a broken one) becomes what it is: a
/// failure of the sandbox, saying which value came.
inline void mend_unknown_error_type(exec_result& x) {
  if (is_valid(x.error_type))
    return;
  auto raw = std::to_string(static_cast<unsigned>(x.error_type));
  x.message = "the provider sent an unknown exec error_type " + raw +
              (x.message.empty() ? "" : " (" + x.message + ")");
  x.error_type = exec_error_type::sandbox;
}

/// A failure read off the wire whose kind, state or cause names no
/// enumerator fails to load: nobody could act on it.
inline caf::error check_failure_enums(const verification_failure& x) {
  if (is_valid(x.kind) && is_valid(x.state) && is_valid(x.cause))
    return caf::none;
  return caf::make_error(caf::sec::invalid_argument,
                         "verification_failure with an unknown kind, state "
                         "or cause");
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, exec_result& x) {
  auto mend = caf::meta::load_callback([&x]() -> caf::error {
    mend_unknown_error_type(x);
    return caf::none;
  });
  return f(caf::meta::type_name("sv::exec_result"), x.stdout_text,
           x.stderr_text, x.return_code, x.error_type, x.message, x.log_tail,
           mend);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, verification_config& x) {
  return f(caf::meta::type_name("sv::verification_config"), x.env, x.image,
           x.metadata, x.provider_options, x.python, x.ready_timeout_s,
           x.upload_timeout_s, x.download_timeout_s, x.stop_timeout_s,
           x.exec_grace_s, x.resources);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, verification_request& x) {
  return f(caf::meta::type_name("sv::verification_request"), x.id, x.config,
           x.files, x.request, x.exec_timeout_s, x.metadata, x.work_dir);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, verification_failure& x) {
  auto check = caf::meta::load_callback(
    [&x]() -> caf::error { return check_failure_enums(x); });
  return f(caf::meta::type_name("sv::verification_failure"), x.kind, x.state,
           x.cause, check, x.message, x.log_tail);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, state_timings& x) {
  return f(caf::meta::type_name("sv::state_timings"), x.create, x.ready,
           x.upload, x.exec, x.download, x.stop, x.total, x.stop_after_reply);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, verification_outcome& x) {
  return f(caf::meta::type_name("sv::verification_outcome"), x.id, x.ok,
           x.result, x.failure, x.timings, x.cached, x.attempts, x.node);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, supervisor_stats& x) {
  return f(caf::meta::type_name("sv::supervisor_stats"), x.submitted,
           x.succeeded, x.failed, x.rejected_overloaded, x.crashed,
           x.sandboxes_created, x.sandboxes_stopped, x.stop_failures,
           x.provider_restarts, x.retries, x.retries_denied,
           x.sandboxes_left_to_node, x.in_flight, x.queued, x.creating,
           x.peak_in_flight, x.peak_creating, x.stopping, x.peak_stopping,
           x.stops_after_reply, x.cleanup_pending);
}

} // namespace sv
