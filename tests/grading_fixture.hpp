#pragma once

// A supervisor on a scripted provider, on the deterministic scheduler: the
// harness of the message-level tests.

#include "actors/supervisor.hpp"
#include "deterministic_fixture.hpp"
#include "messages/atoms.hpp"
#include "outcome_checks.hpp"
#include "providers/scripted.hpp"

#include <catch2/catch.hpp>

namespace sv::test {

using namespace std::chrono_literals;

/// Distinct deadlines per state, so a test cannot confuse them.
inline verification_request make_request(std::string id = "task-1") {
  verification_request req;
  req.id = std::move(id);
  req.files["sandbox_runner.py"] = "print('hello')";
  req.request = {{"question", 42}};
  req.exec_timeout_s = 30;
  req.config.ready_timeout_s = 10;
  req.config.upload_timeout_s = 20;
  req.config.exec_grace_s = 5;
  req.config.download_timeout_s = 40;
  req.config.stop_timeout_s = 50;
  return req;
}

struct grading_fixture : deterministic_fixture {
  std::shared_ptr<scripted_ledger> ledger = std::make_shared<scripted_ledger>();
  provider_actor provider;
  supervisor_actor supervisor;

  void start(scripted_script script, supervisor_config cfg = {}) {
    provider = keep(spawn_scripted_provider(sys, std::move(script), ledger));
    supervisor = keep(spawn_supervisor(sys, provider, std::move(cfg)));
  }

  /// `cfg` with a provider restart: a fresh all-ok scripted provider that
  /// writes to the same ledger.
  supervisor_config restarting(supervisor_config cfg = {}) {
    cfg.restart_provider = [this](caf::actor_system& sys) {
      auto hdl = spawn_scripted_provider(sys, {}, ledger);
      spawned.push_back(caf::actor_cast<caf::actor>(hdl));
      return hdl;
    };
    return cfg;
  }

  void submit(verification_request req = make_request()) {
    client->send(supervisor, verify_atom::value, std::move(req));
  }

  /// Runs to one tick before `deadline` (counted from now) and checks that
  /// nothing came back, then one tick more and returns the reply.
  verification_outcome reply_exactly_at(caf::timespan deadline) {
    run_for(deadline - 1ns);
    REQUIRE_FALSE(take<verification_outcome>().has_value());
    run_for(1ns);
    auto out = take<verification_outcome>();
    REQUIRE(out.has_value());
    return std::move(*out);
  }

  verification_outcome reply_now() {
    run();
    auto out = take<verification_outcome>();
    REQUIRE(out.has_value());
    return std::move(*out);
  }

  supervisor_stats stats() {
    client->send(supervisor, stats_atom::value);
    run();
    auto out = take<supervisor_stats>();
    REQUIRE(out.has_value());
    return *out;
  }
};

inline scripted_script fault_at(scripted_op op, scripted_fault fault,
                                caf::timespan delay = 0s) {
  scripted_script script;
  script.steps[op] = {scripted_step{fault, delay, true}};
  return script;
}

} // namespace sv::test
