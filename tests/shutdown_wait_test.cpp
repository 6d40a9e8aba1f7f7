// The shutdown waits, on the deterministic scheduler: each is one request
// answered by the actor that knows (the supervisor for its stops, the nodes
// provider for joining nodes, a node actor for its drain) when the
// condition holds, at the wait, or when that actor exits. Never polled.

#include "actors/supervisor.hpp"
#include "grading_fixture.hpp"
#include "providers/factory.hpp"
#include "providers/nodes/detail/node_protocol.hpp"
#include "providers/nodes/detail/nodes_provider.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <catch2/catch.hpp>
#include <vector>

using namespace sv;
using namespace std::chrono_literals;

using test::make_request;

namespace {

struct stops_fixture : test::grading_fixture {
  /// Stops answer after these delays, in the order they are called.
  void start_with_stops(std::vector<caf::timespan> delays,
                        supervisor_config cfg = {}) {
    scripted_script script;
    for (auto d : delays)
      script.steps[scripted_op::stop].push_back(
        scripted_step{scripted_fault::delay, d, false});
    start(std::move(script), std::move(cfg));
  }

  void await(caf::timespan wait) {
    client->send(caf::actor_cast<stop_waiter_actor>(supervisor),
                 await_stops_atom::value, wait);
  }

  /// Every answer of the waiters in the client's mailbox, in order.
  std::vector<uint64_t> answers() {
    std::vector<uint64_t> out;
    while (auto n = take<uint64_t>())
      out.push_back(*n);
    return out;
  }
};

using u64s = std::vector<uint64_t>;

} // namespace

TEST_CASE_METHOD(stops_fixture,
                 "await_stops with nothing outstanding is answered 0 at once",
                 "[shutdown]") {
  start();
  await(60s);
  run();
  CHECK(answers() == u64s{0});
}

TEST_CASE_METHOD(stops_fixture,
                 "await_stops is answered when the last stop behind a reply "
                 "ends, not before",
                 "[shutdown]") {
  start_with_stops({7s, 9s});
  submit(make_request("a"));
  submit(make_request("b"));
  run();
  REQUIRE(take<verification_outcome>());
  REQUIRE(take<verification_outcome>());
  CHECK(stats().stopping == 2);
  await(60s);
  run_for(7s);
  CHECK(answers().empty()); // one stop is still running
  CHECK(stats().stopping == 1);
  run_for(2s - 1ns);
  CHECK(answers().empty());
  run_for(1ns);
  CHECK(answers() == u64s{0});
  auto s = stats();
  CHECK(s.stopping == 0);
  CHECK(s.sandboxes_stopped == 2);
  run_for(60s); // the waiter's timer fires into nothing
  CHECK(answers().empty());
}

TEST_CASE_METHOD(stops_fixture,
                 "await_stops at its wait answers the stops still running",
                 "[shutdown]") {
  scripted_script script;
  script.steps[scripted_op::stop] = {scripted_step{scripted_fault::hang},
                                     scripted_step{scripted_fault::hang}};
  start(std::move(script));
  submit(make_request("a"));
  submit(make_request("b"));
  run();
  await(5s);
  run_for(5s - 1ns);
  CHECK(answers().empty());
  run_for(1ns);
  CHECK(answers() == u64s{2});
  // The stops keep their own deadline (stop_timeout_s, 50 s).
  run_for(45s);
  auto s = stats();
  CHECK(s.stopping == 0);
  CHECK(s.stop_failures == 2);
}

TEST_CASE_METHOD(stops_fixture,
                 "several await_stops: each answered once, at its own wait or "
                 "when the stops end",
                 "[shutdown]") {
  start_with_stops({7s});
  submit();
  run();
  REQUIRE(take<verification_outcome>());
  await(3s);
  await(60s);
  await(20s);
  run_for(3s);
  CHECK(answers() == u64s{1}); // the first wait is over, one stop runs
  run_for(4s);
  CHECK(answers() == u64s{0, 0}); // the stop ended: both others
  run_for(120s);
  CHECK(answers().empty()); // nobody is answered twice
}

TEST_CASE_METHOD(stops_fixture,
                 "await_stops with a zero wait answers what is outstanding "
                 "now",
                 "[shutdown]") {
  start_with_stops({7s});
  submit();
  run();
  await(0s);
  run();
  CHECK(answers() == u64s{1});
}

TEST_CASE_METHOD(stops_fixture,
                 "await_stops counts a late create until its sandbox is "
                 "stopped",
                 "[shutdown]") {
  scripted_script script;
  script.steps[scripted_op::create] = {
    scripted_step{scripted_fault::delay, 15s, false}};
  start(std::move(script));
  submit();
  auto out = reply_exactly_at(10s); // ready deadline: the create is late
  CHECK(out.failure.state == verification_state::create);
  CHECK(stats().cleanup_pending == 1);
  await(60s);
  run_for(5s - 1ns);
  CHECK(answers().empty());
  run_for(1ns); // the late sandbox comes and is stopped at once
  CHECK(answers() == u64s{0});
  expect_all_stopped_once();
}

TEST_CASE_METHOD(stops_fixture,
                 "await_stops counts an orphan until the replacement "
                 "provider stopped it",
                 "[shutdown]") {
  scripted_script script;
  script.steps[scripted_op::exec] = {scripted_step{scripted_fault::crash}};
  supervisor_config cfg;
  cfg.restart_backoff_min = 2s;
  start(std::move(script), restarting(cfg));
  submit();
  run();
  REQUIRE(take<verification_outcome>()); // node_down at once
  await(60s);
  run();
  // The first restart is immediate: the orphan is stopped there.
  CHECK(answers() == u64s{0});
  auto s = stats();
  CHECK(s.provider_restarts == 1);
  CHECK(s.cleanup_pending == 0);
  expect_all_stopped_once();
}

TEST_CASE_METHOD(stops_fixture,
                 "a supervisor that exits answers its waiters with what is "
                 "still outstanding",
                 "[shutdown]") {
  start(test::fault_at(scripted_op::stop, scripted_fault::hang));
  submit();
  run();
  REQUIRE(take<verification_outcome>());
  await(60s);
  await(30s);
  run();
  CHECK(answers().empty());
  caf::anon_send_exit(supervisor, caf::exit_reason::user_shutdown);
  run();
  CHECK(answers() == u64s{1, 1});
  run_for(60s);
  CHECK(answers().empty());
}

TEST_CASE("await_stops (blocking) on real threads: true at once when "
          "nothing is outstanding, false for a supervisor that is gone",
          "[shutdown]") {
  test::quiet_logs();
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto world = std::make_shared<scripted_world>();
  auto provider = spawn_scripted_provider(sys, {}, world);
  auto sup = spawn_supervisor(sys, provider);
  auto t0 = std::chrono::steady_clock::now();
  CHECK(await_stops(sys, sup, 30s));
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  {
    caf::scoped_actor self{sys};
    self->monitor(sup);
    caf::anon_send_exit(sup, caf::exit_reason::user_shutdown);
    self->receive([](const caf::down_msg&) {},
                  caf::after(std::chrono::seconds{10}) >> [] {});
  }
  t0 = std::chrono::steady_clock::now();
  CHECK_FALSE(await_stops(sys, sup, 30s));
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  caf::anon_send_exit(provider, caf::exit_reason::user_shutdown);
}

// -- the nodes provider's join wait -------------------------------------------

namespace {

struct join_fixture : test::deterministic_fixture {
  std::shared_ptr<provider_backend> backend;
  node_actor node;
  provider_actor provider;
  sandbox_spec spec;

  /// A nodes provider without endpoints (nodes can only join) and one
  /// node actor of `capacity` that has not joined yet.
  void start(uint32_t capacity) {
    auto block = parse_provider_block(json{{"scripted", json::object()}});
    backend = prepare_provider(block);
    auto inner = keep(backend->spawn(sys));
    node_limits limits;
    limits.capacity = capacity;
    node = keep(spawn_node_actor(sys, inner, limits));
    provider = keep(spawn_nodes_provider(sys, nodes_settings{}, {}));
  }

  void ask_capacity(caf::timespan wait) {
    client->send(caf::actor_cast<caf::actor>(provider),
                 nodes_capacity_atom::value, wait);
  }

  void join(const std::string& name) {
    client->send(caf::actor_cast<caf::actor>(provider), join_atom::value, name,
                 caf::actor_cast<caf::actor>(node));
  }

  std::vector<uint64_t> answers() {
    std::vector<uint64_t> out;
    while (auto n = take<uint64_t>())
      out.push_back(*n);
    return out;
  }
};

} // namespace

TEST_CASE_METHOD(join_fixture,
                 "the join wait is answered when a node joins, with its "
                 "capacity",
                 "[shutdown][nodes]") {
  start(3);
  ask_capacity(30s);
  ask_capacity(10s);
  run_for(4s);
  CHECK(answers().empty());
  join("j1");
  run();
  CHECK(take<ok_atom>());
  CHECK(answers() == u64s{3, 3});
  run_for(60s);
  CHECK(answers().empty());
  // Once a node is up, the question is answered at once.
  ask_capacity(30s);
  run();
  CHECK(answers() == u64s{3});
}

TEST_CASE_METHOD(join_fixture,
                 "the join wait ends at its wait with 0 when no node joins",
                 "[shutdown][nodes]") {
  start(3);
  ask_capacity(30s);
  run_for(30s - 1ns);
  CHECK(answers().empty());
  run_for(1ns);
  CHECK(answers() == u64s{0});
}

TEST_CASE_METHOD(join_fixture,
                 "a nodes provider that exits answers its join waiters",
                 "[shutdown][nodes]") {
  start(3);
  ask_capacity(30s);
  run();
  caf::anon_send_exit(provider, caf::exit_reason::user_shutdown);
  run();
  CHECK(answers() == u64s{0});
}

// -- a node's drain -----------------------------------------------------------

TEST_CASE_METHOD(join_fixture,
                 "a node's drain is answered when its last sandbox is "
                 "stopped, or at its wait with those still in use",
                 "[shutdown][nodes]") {
  start(3);
  std::vector<sandbox_handle> made;
  for (int i = 0; i < 2; ++i) {
    client->send(node, create_atom::value, spec);
    run();
    auto hdl = take<sandbox_handle>();
    REQUIRE(hdl);
    made.push_back(*hdl);
  }
  auto drainer = caf::actor_cast<node_drainer_actor>(node);
  client->send(drainer, drain_atom::value, caf::timespan{5s});
  client->send(drainer, drain_atom::value, caf::timespan{60s});
  run_for(5s);
  auto first = take<uint32_t>();
  REQUIRE(first);
  CHECK(*first == 2); // the short wait is over: two still in use
  CHECK_FALSE(take<uint32_t>());
  // Draining: no new sandbox.
  client->send(node, create_atom::value, spec);
  run();
  CHECK(take<caf::error>());
  client->send(node, stop_atom::value, made[0]);
  run();
  CHECK(take<ok_atom>());
  CHECK_FALSE(take<uint32_t>()); // one still in use
  client->send(node, stop_atom::value, made[1]);
  run();
  CHECK(take<ok_atom>());
  auto second = take<uint32_t>();
  REQUIRE(second);
  CHECK(*second == 0);
  run_for(60s);
  CHECK_FALSE(take<uint32_t>());
}
