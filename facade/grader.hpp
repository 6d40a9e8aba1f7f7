#pragma once

// The seed's function for C++ programs that are not actor programs: a
// `grader` owns an actor system, a supervisor and a provider backend made
// from a provider block, and grades one submission per call. Results come
// back as a std::future or through a callback; a failure is a
// `sandbox_verification_error` with the seed's `failure_kind` and message.
//
//   sv::grader g{sv::json{{"local", sv::json::object()}}};
//   auto result = g.run_verification_sandbox(config, files, request, 30).get();

#include "messages/protocol.hpp"

#include <cstddef>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

namespace sv {

/// Why a submission has no result (always masks the sample).
class sandbox_verification_error : public std::runtime_error {
public:
  explicit sandbox_verification_error(verification_failure failure);

  /// The seed's `failure_kind`: "provider_unavailable", "verifier_error" or
  /// "invalid_request".
  std::string_view failure_kind_name() const;

  /// The whole failure: kind, state, cause, message, log tail.
  const verification_failure& failure() const noexcept { return failure_; }

private:
  verification_failure failure_;
};

/// Turns the parsed `result.json` into what the caller returns (the seed's
/// `parse_result`); may throw, which fails the call with verifier_error /
/// parse / invalid_result. Empty: the result as it is.
using result_transform = std::function<json(const json& result)>;

/// Called once per submission with the result, or with a null result and a
/// `sandbox_verification_error` in `error`. It runs on one of the grader's
/// threads: it must not block, nor destroy the grader.
using verification_callback =
  std::function<void(json result, std::exception_ptr error)>;

struct grader_options {
  /// Verifications running at once; 0 means 2 x hardware threads.
  size_t max_in_flight = 0;
  /// Submissions waiting for a slot; beyond it, `overloaded` failures.
  size_t max_queue = 10000;
  /// Verifications in create or ready at once.
  size_t max_creating = 16;
  /// Scheduler threads of the actor system; 0: CAF's default.
  size_t threads = 0;
  /// The longest a call waits for its outcome, queueing included, beyond
  /// the sum of its own deadlines (then provider_unavailable / timeout).
  double call_margin_s = 3600;
};

class grader {
public:
  /// Prepares the provider of `provider_block` (`{"local": {...}}`, optional
  /// `default_metadata`): blocks for up to seconds. Throws `json_error` for
  /// a bad block, std::runtime_error when the provider cannot start.
  explicit grader(const json& provider_block, grader_options options = {});

  /// Stops the supervisor (what is in flight fails provider_unavailable),
  /// the providers and their sandboxes. Blocks; never call it from a
  /// callback.
  ~grader();

  grader(const grader&) = delete;
  grader& operator=(const grader&) = delete;

  /// The seed's `run_verification_sandbox`: grades `files` (with
  /// `sandbox_runner.py`) on `request` in a fresh sandbox. The future holds
  /// `parse_result(result)` or throws `sandbox_verification_error`.
  std::future<json> run_verification_sandbox(verification_config config,
                                             file_map files, json request,
                                             double exec_timeout_s,
                                             result_transform parse_result = {},
                                             json metadata = json::object(),
                                             std::string work_dir = "calls");

  /// The same, answering through `done` instead of a future.
  void run_verification_sandbox(verification_config config, file_map files,
                                json request, double exec_timeout_s,
                                result_transform parse_result, json metadata,
                                std::string work_dir,
                                verification_callback done);

  /// The whole outcome (ok, result or failure, timings), never throwing.
  void verify(verification_request request,
              std::function<void(verification_outcome)> done);

  /// The supervisor's counters (blocks for up to 10 s; zeros if no answer).
  supervisor_stats stats();

private:
  struct state;
  std::unique_ptr<state> state_;
};

} // namespace sv
