#pragma once

// A supervisor on a scripted provider, on the deterministic scheduler: the
// harness of the message-level tests.

#include "actors/supervisor.hpp"
#include "deterministic_fixture.hpp"
#include "messages/atoms.hpp"
#include "outcome_checks.hpp"
#include "providers/scripted.hpp"
#include "testing/grading_bench.hpp"

#include <catch2/catch.hpp>

namespace sv::test {

using namespace std::chrono_literals;

/// Distinct deadlines per state, so a test cannot confuse them.
inline verification_request make_request(std::string id = "task-1") {
  return sv::testing::sample_request(std::move(id));
}

/// The kit's grading bench (testing/grading_bench.hpp), under the names
/// our tests use.
struct grading_fixture : sv::testing::grading_bench {
  std::shared_ptr<scripted_ledger>& ledger = world;

  /// `cfg` with a provider restart: a fresh all-ok scripted provider that
  /// writes to the same ledger.
  supervisor_config restarting(supervisor_config cfg = {}) {
    return grading_bench::restarting(std::move(cfg));
  }
};

inline scripted_script fault_at(scripted_op op, scripted_fault fault,
                                caf::timespan delay = 0s) {
  scripted_script script;
  script.steps[op] = {scripted_step{fault, delay, true}};
  return script;
}

} // namespace sv::test
