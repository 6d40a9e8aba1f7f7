// The public test kit (testing/): its fault scripts are the scripted
// provider's scripts, and its bench's expectations fail when they should.

#include "messages/enums.hpp"
#include "testing/faults.hpp"
#include "testing/grading_bench.hpp"

#include <catch2/catch.hpp>

using namespace std::chrono_literals;
using namespace sv;
using sv::testing::faults;

TEST_CASE("a fault script is the scripted provider's script") {
  scripted_script s = faults{}
                        .then(scripted_op::create, scripted_fault::error)
                        .times(scripted_op::exec, 2, scripted_fault::hang)
                        .late(scripted_op::exec, 3s)
                        .always(scripted_op::stop, scripted_fault::garbage)
                        .result(R"({"reward": 0.5})")
                        .starting_polls(2)
                        .random(0.25, 9);
  REQUIRE(s.steps[scripted_op::create].size() == 1);
  CHECK(s.steps[scripted_op::create][0].fault == scripted_fault::error);
  CHECK_FALSE(s.steps[scripted_op::create][0].sticky);
  auto& exec = s.steps[scripted_op::exec];
  REQUIRE(exec.size() == 3);
  CHECK(exec[0].fault == scripted_fault::hang);
  CHECK(exec[1].fault == scripted_fault::hang);
  CHECK(exec[2].fault == scripted_fault::delay);
  CHECK(exec[2].delay == 3s);
  CHECK(s.steps[scripted_op::stop][0].sticky);
  CHECK(s.result_text == R"({"reward": 0.5})");
  CHECK(s.starting_polls == 2);
  CHECK(s.fault_rate == 0.25);
  CHECK(s.seed == 9);
}

TEST_CASE_METHOD(sv::testing::grading_bench,
                 "starting polls delay ready to the tick") {
  start(faults{}.starting_polls(3));
  submit();
  // Polls at 0, 5, 15 and 35 ms: three `starting`, then `running`.
  auto out = reply_exactly_at(35ms);
  CHECK(out.ok);
  CHECK(world->calls(scripted_op::status) == 4);
  expect_all_stopped_once();
}

TEST_CASE_METHOD(sv::testing::grading_bench,
                 "a leaked sandbox fails expect_all_stopped_once") {
  start(faults{}.then(scripted_op::exec, scripted_fault::crash));
  submit();
  auto out = reply_now();
  CHECK(sv::testing::failed_with(out, failure_kind::provider_unavailable,
                                 verification_state::exec,
                                 failure_cause::node_down));
  CHECK_THROWS_WITH(expect_all_stopped_once(),
                    Catch::Contains("not stopped exactly once"));
}

TEST_CASE_METHOD(sv::testing::grading_bench,
                 "with restarting, the replacement stops what the crash "
                 "left") {
  start(faults{}.then(scripted_op::exec, scripted_fault::crash), restarting());
  submit();
  auto out = reply_now();
  CHECK(sv::testing::failed_with(out, failure_kind::provider_unavailable,
                                 verification_state::exec,
                                 failure_cause::node_down));
  for (auto until = now() + 10s; world->live() > 0 && now() < until;)
    run_for(1ms);
  expect_all_stopped_once();
  CHECK(stats().provider_restarts == 1);
}

TEST_CASE_METHOD(sv::testing::grading_bench,
                 "reply_exactly_at fails on an early reply") {
  start();
  submit();
  CHECK_THROWS_WITH(reply_exactly_at(1s), Catch::Contains("before its "
                                                          "deadline: ok"));
}
