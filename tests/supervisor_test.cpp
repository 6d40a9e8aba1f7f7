// The supervisor's guarantees under crashes and load, message by message:
// a dying provider fails its in-flight submissions at once, caps hold under
// a burst, and every submission gets exactly one terminal reply.

#include "grading_fixture.hpp"

#include <map>

using namespace sv;
using namespace sv::test;

namespace {

struct burst_fixture : grading_fixture {
  std::map<std::string, int> replies;
  std::vector<verification_outcome> outcomes;

  void submit_many(const std::string& prefix, int n) {
    for (int i = 0; i < n; ++i)
      submit(make_request(prefix + std::to_string(i)));
  }

  /// Collects every reply that has arrived.
  void collect() {
    while (auto out = take<verification_outcome>()) {
      ++replies[out->id];
      outcomes.push_back(std::move(*out));
    }
  }

  /// Advances the clock in small steps until `n` replies arrived or `limit`
  /// of simulated time passed.
  void run_until_replies(size_t n, caf::timespan limit) {
    auto until = now() + limit;
    while (outcomes.size() < n && now() < until) {
      run_for(1ms);
      collect();
    }
  }

  size_t count(bool ok, verification_state state, failure_cause cause) {
    size_t n = 0;
    for (auto& out : outcomes)
      if (out.ok == ok &&
          (ok || (out.failure.state == state && out.failure.cause == cause)))
        ++n;
    return n;
  }

  void check_exactly_once(size_t n) {
    CHECK(replies.size() == n);
    for (auto& [id, times] : replies) {
      INFO(id);
      CHECK(times == 1);
    }
  }
};

/// The first `n` execs hang.
scripted_script hanging_execs(size_t n) {
  scripted_script script;
  script.steps[scripted_op::exec].assign(n,
                                         scripted_step{scripted_fault::hang});
  return script;
}

} // namespace

TEST_CASE_METHOD(burst_fixture,
                 "provider death fails in-flight and queued submissions at "
                 "once") {
  supervisor_config cfg;
  cfg.max_in_flight = 10;
  start(hanging_execs(10), cfg);
  submit_many("s", 50);
  run_for(1s);
  CHECK(outcomes.empty());
  caf::anon_send_exit(provider, caf::exit_reason::kill);
  run(); // no time passes: nobody waits for a deadline
  collect();
  check_exactly_once(50);
  CHECK(count(false, verification_state::exec, failure_cause::node_down) == 10);
  CHECK(count(false, verification_state::queue, failure_cause::node_down) ==
        40);
  for (auto& out : outcomes)
    CHECK(out.failure.kind == failure_kind::provider_unavailable);
  // The ten sandboxes could not be stopped: counted, left to their TTL.
  auto s = stats();
  CHECK(s.sandboxes_created == 10);
  CHECK(s.stop_failures == 10);
  CHECK(s.in_flight == 0);
  // Later submissions fail at once too, never hang.
  submit(make_request("late"));
  auto late = reply_now();
  check_failure(late, failure_kind::provider_unavailable,
                verification_state::queue, failure_cause::node_down);
}

TEST_CASE_METHOD(burst_fixture,
                 "with a restart the queued submissions survive a provider "
                 "death") {
  supervisor_config cfg;
  cfg.max_in_flight = 10;
  start(hanging_execs(10), restarting(cfg));
  submit_many("s", 50);
  run_for(1s);
  caf::anon_send_exit(provider, caf::exit_reason::kill);
  run_until_replies(50, 10s);
  check_exactly_once(50);
  CHECK(count(false, verification_state::exec, failure_cause::node_down) == 10);
  CHECK(count(true, {}, {}) == 40);
  // Every sandbox, the ten of the dead provider too, was stopped once.
  CHECK(ledger->creates() == 50);
  CHECK(ledger->not_stopped_once().empty());
  auto s = stats();
  CHECK(s.provider_restarts == 1);
  CHECK(s.sandboxes_stopped == 50);
}

TEST_CASE_METHOD(burst_fixture,
                 "a burst of 1000 respects max_in_flight and the create cap") {
  scripted_script script;
  script.starting_polls = 3; // each sandbox stays in ready for 35 ms
  script.steps[scripted_op::exec].assign(
    1000, scripted_step{scripted_fault::delay, 20ms});
  supervisor_config cfg;
  cfg.max_in_flight = 200;
  start(std::move(script), cfg);
  submit_many("b", 1000);
  run_until_replies(1000, 60s);
  check_exactly_once(1000);
  CHECK(count(true, {}, {}) == 1000);
  auto s = stats();
  CHECK(s.peak_in_flight <= 200);
  CHECK(s.peak_creating == 16); // the default cap, reached and held
  CHECK(ledger->peak_starting() <= 16);
  CHECK(ledger->not_stopped_once().empty());
}

TEST_CASE_METHOD(burst_fixture,
                 "max_in_flight bounds running verifications when creates "
                 "are free") {
  scripted_script script;
  script.steps[scripted_op::exec].assign(
    300, scripted_step{scripted_fault::delay, 10ms});
  supervisor_config cfg;
  cfg.max_in_flight = 25;
  cfg.max_creating = 1000;
  start(std::move(script), cfg);
  submit_many("m", 300);
  run_until_replies(300, 60s);
  check_exactly_once(300);
  CHECK(stats().peak_in_flight == 25);
}

TEST_CASE_METHOD(burst_fixture,
                 "overload rejects the excess and loses nothing") {
  supervisor_config cfg;
  cfg.max_in_flight = 5;
  cfg.max_queue = 20;
  start(hanging_execs(0), cfg);
  submit_many("o", 100);
  run_until_replies(100, 10s);
  check_exactly_once(100);
  CHECK(count(false, verification_state::queue, failure_cause::overloaded) ==
        75);
  CHECK(count(true, {}, {}) == 25);
  CHECK(stats().rejected_overloaded == 75);
}

TEST_CASE_METHOD(burst_fixture,
                 "crashing verifications among healthy ones: one reply each") {
  supervisor_config cfg;
  cfg.max_in_flight = 8;
  // A parser with a bug: it throws on text that is not JSON (json::parse
  // throws), and every other download is garbage.
  cfg.parser = [](const std::string& text, json& result, std::string&) {
    result = json::parse(text);
    return true;
  };
  scripted_script script;
  for (int i = 0; i < 20; ++i)
    script.steps[scripted_op::download].push_back(
      scripted_step{i % 2 == 0 ? scripted_fault::ok : scripted_fault::garbage});
  start(std::move(script), cfg);
  submit_many("c", 20);
  run_until_replies(20, 1s);
  check_exactly_once(20);
  CHECK(count(true, {}, {}) == 10);
  CHECK(count(false, verification_state::parse, failure_cause::crash) == 10);
  for (auto& out : outcomes)
    if (!out.ok)
      CHECK(out.failure.kind == failure_kind::verifier_error);
  auto s = stats();
  CHECK(s.crashed == 10);
  CHECK(s.sandboxes_created == 20);
  CHECK(s.sandboxes_stopped == 20);
  CHECK(s.in_flight == 0);
  CHECK(ledger->not_stopped_once().empty());
}

namespace {

/// Every provider, the first and each replacement, dies on its first create.
scripted_script crash_on_first_create() {
  scripted_script script;
  script.steps[scripted_op::create] = {scripted_step{scripted_fault::crash}};
  return script;
}

} // namespace

TEST_CASE_METHOD(burst_fixture,
                 "a provider that crashes at once is restarted with backoff, "
                 "then given up") {
  supervisor_config cfg;
  cfg.max_in_flight = 1;
  // The defaults: restarts after 0, 100, 200, 400, 800, 1600, 3200 and
  // 5000 ms (capped), given up when the 8th replacement dies too.
  cfg.restart_provider = [this](caf::actor_system& sys) {
    auto hdl = spawn_scripted_provider(sys, crash_on_first_create(), ledger);
    spawned.push_back(caf::actor_cast<caf::actor>(hdl));
    return hdl;
  };
  start(crash_on_first_create(), cfg);
  submit_many("r", 20);
  run();
  collect();
  // The first provider and the immediate first replacement died at once.
  CHECK(outcomes.size() == 2);
  run_for(100ms - 1ns);
  collect();
  CHECK(outcomes.size() == 2);
  run_for(1ns);
  collect();
  CHECK(outcomes.size() == 3);
  // Each verification that reached a provider failed in create; the batch
  // waits through the backoff instead of draining as node_down.
  run_for(11300ms - 100ms - 1ns);
  collect();
  CHECK(outcomes.size() == 8);
  CHECK(stats().provider_restarts == 7);
  run_for(1ns);
  collect();
  check_exactly_once(20);
  CHECK(count(false, verification_state::create, failure_cause::node_down) ==
        9);
  CHECK(count(false, verification_state::queue, failure_cause::node_down) ==
        11);
  auto s = stats();
  CHECK(s.provider_restarts == 8);
  CHECK(s.queued == 0);
  CHECK(s.in_flight == 0);
  // Given up: later submissions fail at once.
  submit(make_request("late"));
  check_failure(reply_now(), failure_kind::provider_unavailable,
                verification_state::queue, failure_cause::node_down);
  CHECK(ledger->calls(scripted_op::create) == 9);
}

TEST_CASE_METHOD(burst_fixture,
                 "a given-up provider takes work again after the cool-down, "
                 "on probation") {
  // Issue 19 (review): once given up, the supervisor refused all work for
  // good, even when a later restart would have come up healthy.
  supervisor_config cfg;
  cfg.max_in_flight = 1;
  int calls = 0;
  cfg.restart_provider = [this, &calls](caf::actor_system& sys) {
    // The first eight replacements die at once; then it is healthy.
    auto script = ++calls <= 8 ? crash_on_first_create() : scripted_script{};
    auto hdl = spawn_scripted_provider(sys, std::move(script), ledger);
    spawned.push_back(caf::actor_cast<caf::actor>(hdl));
    return hdl;
  };
  start(crash_on_first_create(), cfg);
  submit_many("r", 20); // given up at 11.3 s (see above)
  run_for(20s);
  collect();
  check_exactly_once(20);
  CHECK(calls == 8);
  // Given up: refused at once, saying why and until when.
  submit(make_request("refused"));
  auto refused = reply_now();
  check_failure(refused, failure_kind::provider_unavailable,
                verification_state::queue, failure_cause::node_down);
  CHECK(refused.failure.message.find("given up after 8 restarts") !=
        std::string::npos);
  CHECK(refused.failure.message.find("taken again 60 s after") !=
        std::string::npos);
  run_for(52s); // 60 s after the give-up
  submit(make_request("again"));
  run();
  auto again = take<verification_outcome>();
  REQUIRE(again);
  CHECK(again->id == "again");
  CHECK(again->ok);
  CHECK(calls == 9);
  // Came through: healthy again, not on probation.
  submit(make_request("next"));
  run();
  auto next = take<verification_outcome>();
  REQUIRE(next);
  CHECK(next->ok);
}

TEST_CASE_METHOD(burst_fixture,
                 "a healthy verification resets the restart backoff") {
  supervisor_config cfg;
  cfg.max_in_flight = 1;
  // Each replacement grades one submission, then dies on its second exec.
  cfg.restart_provider = [this](caf::actor_system& sys) {
    scripted_script script;
    script.steps[scripted_op::exec] = {scripted_step{},
                                       scripted_step{scripted_fault::crash}};
    auto hdl = spawn_scripted_provider(sys, std::move(script), ledger);
    spawned.push_back(caf::actor_cast<caf::actor>(hdl));
    return hdl;
  };
  start(crash_on_first_create(), cfg);
  submit_many("h", 7);
  // No time passes: every restart follows a healthy verification, so none
  // waits for a backoff.
  run();
  collect();
  check_exactly_once(7);
  CHECK(count(true, {}, {}) == 3);
  CHECK(count(false, verification_state::create, failure_cause::node_down) ==
        1);
  CHECK(count(false, verification_state::exec, failure_cause::node_down) == 3);
  CHECK(stats().provider_restarts == 4);
  CHECK(ledger->not_stopped_once().empty());
}

TEST_CASE_METHOD(burst_fixture,
                 "a restart that throws is retried after the backoff") {
  supervisor_config cfg;
  cfg.max_in_flight = 1;
  int calls = 0;
  cfg.restart_provider = [this, &calls](caf::actor_system& sys) {
    if (++calls == 1)
      throw std::runtime_error("python not found");
    auto hdl = spawn_scripted_provider(sys, {}, ledger);
    spawned.push_back(caf::actor_cast<caf::actor>(hdl));
    return hdl;
  };
  start(crash_on_first_create(), cfg);
  submit(make_request("first"));
  submit(make_request("waits"));
  run();
  collect();
  REQUIRE(outcomes.size() == 1);
  check_failure(outcomes[0], failure_kind::provider_unavailable,
                verification_state::create, failure_cause::node_down);
  CHECK(calls == 1);
  run_for(100ms - 1ns);
  collect();
  CHECK(outcomes.size() == 1);
  run_for(1ns);
  collect();
  CHECK(calls == 2);
  REQUIRE(outcomes.size() == 2);
  CHECK(outcomes[1].id == "waits");
  CHECK(outcomes[1].ok);
  CHECK(stats().provider_restarts == 1);
}

TEST_CASE_METHOD(burst_fixture,
                 "cancel answers a queued submission at once and stops a "
                 "running one's sandbox") {
  supervisor_config cfg;
  cfg.max_in_flight = 1;
  start(hanging_execs(2), cfg);
  submit(make_request("running"));
  submit(make_request("queued"));
  run_for(1s);
  collect();
  CHECK(outcomes.empty());
  client->send(supervisor, cancel_atom::value, std::string{"queued"});
  run();
  collect();
  REQUIRE(outcomes.size() == 1);
  check_failure(outcomes[0], failure_kind::provider_unavailable,
                verification_state::queue, failure_cause::killed);
  client->send(supervisor, cancel_atom::value, std::string{"running"});
  run_until_replies(2, 5s);
  check_exactly_once(2);
  CHECK(outcomes[1].id == "running");
  CHECK(outcomes[1].failure.cause == failure_cause::killed);
  CHECK(ledger->creates() == 1);
  CHECK(ledger->not_stopped_once().empty());
  auto s = stats();
  CHECK(s.crashed == 0);
  CHECK(s.sandboxes_stopped == 1);
  CHECK(s.in_flight == 0);
}

namespace {

/// A provider that answers creates, polls and uploads and dies on its
/// first exec: work in flight fails, but it made progress.
scripted_script crash_on_first_exec() {
  scripted_script script;
  script.steps[scripted_op::exec] = {scripted_step{scripted_fault::crash}};
  return script;
}

size_t count_state(const std::vector<verification_outcome>& outcomes,
                   verification_state state) {
  size_t n = 0;
  for (auto& out : outcomes)
    if (!out.ok && out.failure.state == state)
      ++n;
  return n;
}

} // namespace

TEST_CASE_METHOD(burst_fixture,
                 "a provider that crashes on every exec backs off and is "
                 "given up, and every sandbox it created is still stopped") {
  // Issue 19 (review of item 15): each provider answers creates and dies on
  // its first exec, so no verification ever comes through. Answered creates
  // and the replacement's stops of the orphans are no progress: the
  // restarts back off (0, 100, 200, ... ms) and the work is given up after
  // eight, instead of a restart at once, forever.
  supervisor_config cfg;
  cfg.max_in_flight = 4;
  cfg.restart_provider = [this](caf::actor_system& sys) {
    auto hdl = spawn_scripted_provider(sys, crash_on_first_exec(), ledger);
    spawned.push_back(caf::actor_cast<caf::actor>(hdl));
    return hdl;
  };
  start(crash_on_first_exec(), cfg);
  submit_many("p", 40);
  run(); // no time passes: the first restart is immediate, the next waits
  collect();
  CHECK(stats().provider_restarts == 1);
  CHECK(ledger->crashes() == 2);
  run_for(100ms - 1ns);
  CHECK(stats().provider_restarts == 1);
  run_for(1ns);
  CHECK(stats().provider_restarts == 2);
  run_until_replies(40, 60s);
  run_for(10s);
  collect();
  check_exactly_once(40);
  for (auto& out : outcomes) {
    INFO(out.id << ": " << out.failure.message);
    CHECK(!out.ok);
    CHECK(out.failure.kind == failure_kind::provider_unavailable);
    CHECK(out.failure.cause == failure_cause::node_down);
  }
  // Nine providers died on an exec (the first and eight replacements);
  // the rest was refused once given up.
  CHECK(ledger->crashes() == 9);
  CHECK(count_state(outcomes, verification_state::queue) > 0);
  // One more restart, for the stops only, stops every orphan.
  auto s = stats();
  CHECK(s.provider_restarts == 9);
  CHECK(ledger->live() == 0);
  CHECK(ledger->not_stopped_once().empty());
  CHECK(s.sandboxes_created == ledger->creates());
  CHECK(s.sandboxes_stopped == ledger->creates());
  CHECK(s.stop_failures == 0);
  CHECK(s.cleanup_pending == 0);
}

TEST_CASE_METHOD(burst_fixture,
                 "a given-up provider is still restarted to stop every "
                 "sandbox it owned") {
  // The first provider dies on its first exec with four sandboxes up; the
  // next eight die on their first call (the orphans' stops come first):
  // no progress, so the work is given up. Sandboxes are still owned: one
  // more restart (the ninth, healthy) stops them all.
  supervisor_config cfg;
  cfg.max_in_flight = 4;
  int calls = 0;
  cfg.restart_provider = [this, &calls](caf::actor_system& sys) {
    scripted_script script;
    if (++calls <= 8) {
      script.steps[scripted_op::stop] = {scripted_step{scripted_fault::crash}};
      script.steps[scripted_op::create] = {
        scripted_step{scripted_fault::crash}};
    }
    auto hdl = spawn_scripted_provider(sys, std::move(script), ledger);
    spawned.push_back(caf::actor_cast<caf::actor>(hdl));
    return hdl;
  };
  start(crash_on_first_exec(), cfg);
  submit_many("g", 40);
  run_until_replies(40, 60s);
  run_for(10s);
  collect();
  check_exactly_once(40);
  for (auto& out : outcomes) {
    INFO(out.id << ": " << out.failure.message);
    CHECK(!out.ok);
    CHECK(out.failure.cause == failure_cause::node_down);
  }
  CHECK(count_state(outcomes, verification_state::exec) == 4);
  CHECK(count_state(outcomes, verification_state::queue) > 0);
  CHECK(calls == 9);
  CHECK(ledger->creates() == 4);
  CHECK(ledger->live() == 0);
  CHECK(ledger->not_stopped_once().empty());
  auto s = stats();
  CHECK(s.sandboxes_stopped == 4);
  CHECK(s.cleanup_pending == 0);
  // Given up: later submissions fail at once.
  submit(make_request("late"));
  check_failure(reply_now(), failure_kind::provider_unavailable,
                verification_state::queue, failure_cause::node_down);
  CHECK(ledger->creates() == 4);
}

TEST_CASE_METHOD(burst_fixture,
                 "a crash halves admission, verifications that come through "
                 "widen it again") {
  supervisor_config cfg;
  cfg.max_in_flight = 8;
  cfg.restart_provider = [this](caf::actor_system& sys) {
    scripted_script script;
    script.steps[scripted_op::exec].assign(
      100, scripted_step{scripted_fault::delay, 10ms});
    auto hdl = spawn_scripted_provider(sys, std::move(script), ledger);
    spawned.push_back(caf::actor_cast<caf::actor>(hdl));
    return hdl;
  };
  start(hanging_execs(8), cfg);
  submit_many("w", 40);
  run_for(1s);
  CHECK(stats().in_flight == 8);
  caf::anon_send_exit(provider, caf::exit_reason::kill);
  run(); // the replacement is up, no time passed: half as many admitted
  collect();
  CHECK(outcomes.size() == 8);
  CHECK(stats().in_flight == 4);
  // Four come through, each admits two: eight again.
  run_for(10ms);
  collect();
  CHECK(outcomes.size() == 12);
  CHECK(stats().in_flight == 8);
  run_until_replies(40, 10s);
  check_exactly_once(40);
  CHECK(count(true, {}, {}) == 32);
  CHECK(ledger->not_stopped_once().empty());
}
