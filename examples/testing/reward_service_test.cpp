// What a user's message-level test looks like with sandbox_verification's
// test kit: their service, our supervisor, the scripted provider's faults,
// and a clock that moves only when the test says so. Every assertion is
// exact: the kind of failure, and the nanosecond it arrives.

#include "reward_service.hpp"
#include "testing/faults.hpp"
#include "testing/grading_bench.hpp"

#include <catch2/catch.hpp>

using namespace std::chrono_literals;
using sv::scripted_fault;
using sv::scripted_op;
using sv::testing::faults;

namespace {

struct service_fixture : sv::testing::grading_bench {
  caf::actor service;

  void start_service(sv::scripted_script script, caf::timespan budget = 300s) {
    start(std::move(script));
    service = keep(example::spawn_reward_service(sys, supervisor, budget));
  }

  void grade(std::string id = "completion-1") {
    client->send(service, example::grade_atom::value,
                 sv::testing::sample_request(std::move(id)));
  }

  /// No verdict one nanosecond before `at`, one verdict at `at`.
  example::reward_verdict verdict_exactly_at(caf::timespan at) {
    run_for(at - 1ns);
    REQUIRE_FALSE(take<example::reward_verdict>().has_value());
    run_for(1ns);
    auto v = take<example::reward_verdict>();
    REQUIRE(v.has_value());
    return *v;
  }

  example::reward_verdict verdict_now() {
    run();
    auto v = take<example::reward_verdict>();
    REQUIRE(v.has_value());
    return *v;
  }
};

} // namespace

TEST_CASE_METHOD(service_fixture, "a graded completion gets its reward") {
  start_service(faults{}.result(R"({"reward": 0.25})"));
  grade();
  auto v = verdict_now();
  CHECK(v.reward == 0.25);
  CHECK_FALSE(v.mask_sample);
  CHECK(world->creates() == 1);
  expect_all_stopped_once();
}

TEST_CASE_METHOD(service_fixture, "a wrong answer is a reward of 0, not "
                                  "masked") {
  start_service(faults{}.result(R"({"reward": 0.0})"));
  grade();
  auto v = verdict_now();
  CHECK(v.reward == 0.0);
  CHECK_FALSE(v.mask_sample);
}

TEST_CASE_METHOD(service_fixture,
                 "a hanging provider is masked at exec timeout plus grace") {
  // sample_request: exec_timeout_s 30, exec_grace_s 5.
  start_service(faults{}.always(scripted_op::exec, scripted_fault::hang));
  grade();
  auto v = verdict_exactly_at(35s);
  CHECK(v.mask_sample);
  CHECK(v.failure_kind == "provider_unavailable");
  run();
  expect_all_stopped_once();
}

TEST_CASE_METHOD(service_fixture, "a failed create is masked at once") {
  start_service(faults{}.then(scripted_op::create, scripted_fault::error));
  grade();
  auto v = verdict_now();
  CHECK(v.mask_sample);
  CHECK(v.failure_kind == "provider_unavailable");
  CHECK(world->creates() == 0);
}

TEST_CASE_METHOD(service_fixture, "a provider crash mid-exec is masked at "
                                  "once") {
  start_service(faults{}.then(scripted_op::exec, scripted_fault::crash));
  grade();
  auto v = verdict_now();
  CHECK(v.mask_sample);
  CHECK(v.failure_kind == "provider_unavailable");
}

TEST_CASE_METHOD(service_fixture, "garbage from the runner's download is "
                                  "masked as the verifier's fault") {
  start_service(faults{}.then(scripted_op::download, scripted_fault::garbage));
  grade();
  auto v = verdict_now();
  CHECK(v.mask_sample);
  CHECK(v.failure_kind == "verifier_error");
}

TEST_CASE_METHOD(service_fixture,
                 "the service's own budget masks a slow verification") {
  // The exec answers after 25 s (inside its 30 s deadline), but the
  // service gives the supervisor only 20 s.
  start_service(faults{}.late(scripted_op::exec, 25s), 20s);
  grade();
  auto v = verdict_exactly_at(20s);
  CHECK(v.mask_sample);
  CHECK(v.failure_kind == "budget");
  // The verification itself still ends, and its sandbox is stopped.
  run_for(10s);
  CHECK(stats().succeeded == 1);
  expect_all_stopped_once();
}

TEST_CASE_METHOD(service_fixture, "the kit's own expectations are exact") {
  start_service(faults{}.always(scripted_op::exec, scripted_fault::hang));
  submit(sv::testing::sample_request("direct"));
  CHECK_THROWS_AS(reply_exactly_at(34s), sv::testing::expectation_failed);
  auto out = reply_exactly_at(1s);
  CHECK(sv::testing::failed_with(out, sv::failure_kind::provider_unavailable,
                                 sv::verification_state::exec,
                                 sv::failure_cause::timeout));
}
