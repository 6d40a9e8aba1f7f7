// The supervisor's retry of infrastructure failures (actors/retry.hpp),
// message by message: once in a fresh sandbox, within a budget, never for a
// failure that is the submission's own.

#include "grading_fixture.hpp"

using namespace sv;
using namespace sv::test;

namespace {

/// Execs fail as the sandbox's fault (provider_unavailable / exec / error),
/// in call order: `faults[0]` for the first exec, and so on; `ok` after.
scripted_script execs(std::vector<scripted_fault> faults) {
  scripted_script script;
  for (auto f : faults)
    script.steps[scripted_op::exec].push_back(scripted_step{f});
  return script;
}

supervisor_config retrying(uint32_t n, double ratio = 0.1, double burst = 10) {
  supervisor_config cfg;
  cfg.retry.max_retries = n;
  cfg.retry.budget_ratio = ratio;
  cfg.retry.budget_burst = burst;
  return cfg;
}

} // namespace

TEST_CASE_METHOD(grading_fixture,
                 "an exec failed by the provider is retried once and succeeds",
                 "[retry]") {
  start(execs({scripted_fault::error}), retrying(1));
  submit();
  auto out = reply_now();
  INFO(out.failure.message);
  CHECK(out.ok);
  CHECK(out.attempts == 2);
  CHECK(out.result == json{{"reward", 1.0}});
  auto s = stats();
  CHECK(s.retries == 1);
  CHECK(s.retries_denied == 0);
  CHECK(s.succeeded == 1);
  CHECK(s.failed == 0);
  // Two fresh sandboxes, each stopped once.
  CHECK(s.sandboxes_created == 2);
  CHECK(s.sandboxes_stopped == 2);
  CHECK(ledger->creates() == 2);
  CHECK(ledger->calls(scripted_op::exec) == 2);
  CHECK(ledger->not_stopped_once().empty());
}

TEST_CASE_METHOD(grading_fixture,
                 "a retry that fails again reports the second failure",
                 "[retry]") {
  start(execs({scripted_fault::error, scripted_fault::error}), retrying(1));
  submit();
  auto out = reply_now();
  check_failure(out, failure_kind::provider_unavailable,
                verification_state::exec, failure_cause::error);
  CHECK(out.attempts == 2);
  auto s = stats();
  CHECK(s.retries == 1);
  CHECK(s.failed == 1);
  CHECK(s.sandboxes_created == 2);
  CHECK(s.sandboxes_stopped == 2);
  CHECK(ledger->calls(scripted_op::exec) == 2);
}

TEST_CASE_METHOD(grading_fixture,
                 "without retries, or with the budget spent, a failure is "
                 "final",
                 "[retry]") {
  SECTION("retry_infra 0") {
    start(execs({scripted_fault::error}), retrying(0));
    submit();
    auto out = reply_now();
    check_failure(out, failure_kind::provider_unavailable,
                  verification_state::exec, failure_cause::error);
    CHECK(out.attempts == 1);
    CHECK(stats().retries == 0);
  }
  SECTION("a budget of one retry") {
    // Three execs fail; the first submission spends the only retry.
    start(execs({scripted_fault::error, scripted_fault::error,
                 scripted_fault::error}),
          retrying(1, 0.0, 1.0));
    submit(make_request("a"));
    auto a = reply_now();
    check_failure(a, failure_kind::provider_unavailable,
                  verification_state::exec, failure_cause::error);
    CHECK(a.attempts == 2);
    submit(make_request("b"));
    auto b = reply_now();
    check_failure(b, failure_kind::provider_unavailable,
                  verification_state::exec, failure_cause::error);
    CHECK(b.attempts == 1);
    auto s = stats();
    CHECK(s.retries == 1);
    CHECK(s.retries_denied == 1);
    CHECK(ledger->calls(scripted_op::exec) == 3);
  }
}

TEST_CASE_METHOD(grading_fixture,
                 "a failure that is the submission's own is never retried",
                 "[retry]") {
  SECTION("verifier_error: result.json rejected") {
    start(fault_at(scripted_op::download, scripted_fault::garbage),
          retrying(1));
    submit();
    auto out = reply_now();
    check_failure(out, failure_kind::verifier_error, verification_state::parse,
                  failure_cause::invalid_result);
    CHECK(out.attempts == 1);
  }
  SECTION("invalid_request") {
    start({}, retrying(1));
    auto req = make_request();
    req.files.clear();
    submit(req);
    auto out = reply_now();
    check_failure(out, failure_kind::invalid_request,
                  verification_state::validate, failure_cause::invalid_request);
    CHECK(out.attempts == 0);
  }
  auto s = stats();
  CHECK(s.retries == 0);
  CHECK(s.retries_denied == 0);
  CHECK(ledger->calls(scripted_op::exec) <= 1);
}

TEST_CASE("a retried request avoids the node that failed it", "[retry]") {
  verification_request req;
  prepare_retry(req, "");
  CHECK(req.config.provider_options == json::object());
  prepare_retry(req, "10.0.0.1:7101");
  prepare_retry(req, "10.0.0.1:7101");
  prepare_retry(req, "10.0.0.2:7101");
  CHECK(req.config.provider_options ==
        json{{"avoid_nodes", {"10.0.0.1:7101", "10.0.0.2:7101"}}});
}

TEST_CASE("the retry budget: a burst, then a fraction of submissions",
          "[retry]") {
  retry_settings cfg;
  cfg.budget_ratio = 0.25;
  cfg.budget_burst = 2;
  retry_budget budget{cfg};
  CHECK(budget.take());
  CHECK(budget.take());
  CHECK_FALSE(budget.take());
  for (int i = 0; i < 3; ++i)
    budget.earn();
  CHECK_FALSE(budget.take()); // 0.75
  budget.earn();
  CHECK(budget.take()); // one retry per four submissions
  for (int i = 0; i < 100; ++i)
    budget.earn();
  CHECK(budget.tokens() == 2); // never more than the burst
}

TEST_CASE("which failures are worth a fresh sandbox", "[retry]") {
  auto failed = [](failure_kind kind, verification_state state,
                   failure_cause cause) {
    verification_outcome out;
    out.failure.kind = kind;
    out.failure.state = state;
    out.failure.cause = cause;
    return out;
  };
  using k = failure_kind;
  using s = verification_state;
  using c = failure_cause;
  CHECK(is_retryable(failed(k::provider_unavailable, s::exec, c::node_down)));
  CHECK(is_retryable(failed(k::provider_unavailable, s::exec, c::error)));
  CHECK(is_retryable(failed(k::provider_unavailable, s::download, c::timeout)));
  CHECK(is_retryable(failed(k::provider_unavailable, s::upload, c::node_down)));
  CHECK(is_retryable(failed(k::provider_unavailable, s::ready, c::node_down)));
  // A ready timeout again would cost another ready_timeout_s.
  CHECK_FALSE(
    is_retryable(failed(k::provider_unavailable, s::ready, c::timeout)));
  CHECK_FALSE(
    is_retryable(failed(k::provider_unavailable, s::upload, c::error)));
  CHECK_FALSE(
    is_retryable(failed(k::provider_unavailable, s::create, c::node_down)));
  CHECK_FALSE(
    is_retryable(failed(k::provider_unavailable, s::queue, c::overloaded)));
  CHECK_FALSE(
    is_retryable(failed(k::provider_unavailable, s::exec, c::killed)));
  CHECK_FALSE(is_retryable(failed(k::verifier_error, s::exec, c::timeout)));
  CHECK_FALSE(
    is_retryable(failed(k::invalid_request, s::validate, c::invalid_request)));
  verification_outcome ok;
  ok.ok = true;
  CHECK_FALSE(is_retryable(ok));
}
