// The nodes provider at the message level (deterministic scheduler): real
// node actors over scripted providers stand in for sv-node processes, given
// to the nodes provider by handle (no middleman).

#include "actors/supervisor.hpp"
#include "deterministic_fixture.hpp"
#include "grading_fixture.hpp"
#include "messages/errors.hpp"
#include "providers/factory.hpp"
#include "providers/nodes/node_protocol.hpp"
#include "providers/nodes/nodes_provider.hpp"

#include <catch2/catch.hpp>
#include <map>

using namespace sv;

namespace {

struct nodes_fixture : test::deterministic_fixture {
  std::vector<std::shared_ptr<provider_backend>> backends;
  std::vector<node_actor> nodes;
  provider_actor provider;
  sandbox_spec spec;

  /// `count` nodes of `capacity` each, their scripted providers running
  /// `steps`; then the nodes provider over them.
  void start(size_t count, uint32_t capacity, json steps = json::object(),
             std::map<size_t, json> steps_of = {}) {
    nodes_settings settings;
    for (size_t i = 0; i < count; ++i) {
      auto own = steps_of.count(i) > 0 ? steps_of[i] : steps;
      auto block =
        parse_provider_block(json{{"scripted", json{{"steps", own}}}});
      backends.push_back(prepare_provider(block));
      auto inner = keep(backends.back()->spawn(sys));
      node_limits limits;
      limits.capacity = capacity;
      nodes.push_back(keep(spawn_node_actor(sys, inner, limits)));
      settings.endpoints.push_back("n" + std::to_string(i) + ":1");
    }
    provider = keep(spawn_nodes_provider(sys, settings, nodes));
    run(); // every node answers its capacity
  }

  sandbox_handle create() {
    client->send(provider, create_atom::value, spec);
    run();
    auto hdl = take<sandbox_handle>();
    REQUIRE(hdl);
    return *hdl;
  }
};

std::map<std::string, int>
count_by_node(const std::vector<sandbox_handle>& xs) {
  std::map<std::string, int> out;
  for (auto& x : xs)
    ++out[x.state];
  return out;
}

} // namespace

TEST_CASE_METHOD(nodes_fixture, "creates spread over nodes by free capacity",
                 "[nodes]") {
  start(3, 2);
  std::vector<sandbox_handle> made;
  for (int i = 0; i < 6; ++i)
    made.push_back(create());
  auto by_node = count_by_node(made);
  CHECK(by_node ==
        std::map<std::string, int>{{"n0:1", 2}, {"n1:1", 2}, {"n2:1", 2}});
  for (auto& h : made) {
    CHECK(h.provider_name == "nodes");
    CHECK(h.sandbox_id.rfind(h.state + "/", 0) == 0); // pinned: names its node
  }
  // The cluster is full: the next create waits, and gets the first slot
  // that a stop frees.
  client->send(provider, create_atom::value, spec);
  run();
  CHECK_FALSE(take<sandbox_handle>());
  client->send(provider, stop_atom::value, made[4]);
  run();
  CHECK(take<ok_atom>());
  auto late = take<sandbox_handle>();
  REQUIRE(late);
  CHECK(late->state == made[4].state);
  // Calls are routed to the sandbox's node.
  client->send(provider, status_atom::value, made[0]);
  run();
  CHECK(take<sandbox_status>());
  sandbox_handle unknown{"n0:1/sb-999", "nodes", "n0:1"};
  client->send(provider, status_atom::value, unknown);
  run();
  auto err = take<caf::error>();
  REQUIRE(err);
  CHECK(provider_error_code(*err) ==
        static_cast<uint8_t>(provider_errc::no_such_sandbox));
}

TEST_CASE_METHOD(nodes_fixture, "a node over capacity answers overloaded",
                 "[nodes]") {
  start(1, 1);
  create();
  // Directly to the node, past the nodes provider's own accounting.
  client->send(nodes[0], create_atom::value, spec);
  run();
  auto err = take<caf::error>();
  REQUIRE(err);
  CHECK(provider_error_code(*err) ==
        static_cast<uint8_t>(provider_errc::unavailable));
  CHECK(describe(*err).find("overloaded") != std::string::npos);
}

TEST_CASE_METHOD(nodes_fixture,
                 "a lost node fails its in-flight calls at once and is not "
                 "used again",
                 "[nodes]") {
  start(3, 2, json{{"exec", json::array({"hang"})}});
  auto a = create(); // n0
  auto b = create(); // n1
  REQUIRE(a.state == "n0:1");
  REQUIRE(b.state == "n1:1");
  exec_request req;
  req.argv = {"true"};
  client->send(provider, exec_atom::value, a, req);
  client->send(provider, exec_atom::value, b, req);
  run();
  CHECK_FALSE(take<exec_result>()); // both hang
  caf::anon_send_exit(nodes[0], caf::exit_reason::kill);
  run();
  // At once, without any clock moving: the exec on n0 fails unavailable.
  auto err = take<caf::error>();
  REQUIRE(err);
  CHECK(provider_error_code(*err) ==
        static_cast<uint8_t>(provider_errc::unavailable));
  CHECK(describe(*err).find("n0:1 lost") != std::string::npos);
  CHECK_FALSE(take<caf::error>()); // b's exec on n1 still runs
  // Later calls for the lost node's sandbox: unavailable; its stop is ok.
  client->send(provider, status_atom::value, a);
  run();
  err = take<caf::error>();
  REQUIRE(err);
  CHECK(provider_error_code(*err) ==
        static_cast<uint8_t>(provider_errc::unavailable));
  client->send(provider, stop_atom::value, a);
  run();
  CHECK(take<ok_atom>());
  // New sandboxes go to the survivors only.
  for (int i = 0; i < 3; ++i)
    CHECK(create().state != "n0:1");
}

TEST_CASE_METHOD(nodes_fixture,
                 "a create in flight on a lost node is placed on another",
                 "[nodes]") {
  // n0's provider never answers a create; n1 answers at once.
  nodes_settings settings;
  for (int i = 0; i < 2; ++i) {
    json steps =
      i == 0 ? json{{"create", json::array({"hang"})}} : json::object();
    backends.push_back(prepare_provider(
      parse_provider_block(json{{"scripted", json{{"steps", steps}}}})));
    auto inner = keep(backends.back()->spawn(sys));
    nodes.push_back(keep(spawn_node_actor(sys, inner, node_limits{})));
    settings.endpoints.push_back("n" + std::to_string(i) + ":1");
  }
  provider = keep(spawn_nodes_provider(sys, settings, nodes));
  run();
  client->send(provider, create_atom::value, spec);
  run();
  CHECK_FALSE(take<sandbox_handle>()); // on n0, hanging
  caf::anon_send_exit(nodes[0], caf::exit_reason::kill);
  run();
  auto hdl = take<sandbox_handle>();
  REQUIRE(hdl);
  CHECK(hdl->state == "n1:1");
}

TEST_CASE_METHOD(nodes_fixture,
                 "a verification on a lost node is retried on another node",
                 "[nodes][retry]") {
  // n0's exec never answers; n1's does.
  start(2, 2, json::object(), {{0, json{{"exec", json::array({"hang"})}}}});
  supervisor_config cfg;
  cfg.retry.max_retries = 1;
  auto sup = keep(spawn_supervisor(sys, provider, cfg));
  client->send(sup, verify_atom::value, test::make_request("r"));
  run();
  CHECK_FALSE(take<verification_outcome>()); // hanging on n0
  caf::anon_send_exit(nodes[0], caf::exit_reason::kill);
  run(); // no clock moves: the loss fails it, the retry runs on n1
  auto out = take<verification_outcome>();
  REQUIRE(out);
  INFO(out->failure.message);
  CHECK(out->ok);
  CHECK(out->attempts == 2);
  CHECK(out->node == "n1:1");
  client->send(sup, stats_atom::value);
  run();
  auto s = take<supervisor_stats>();
  REQUIRE(s);
  CHECK(s->retries == 1);
  CHECK(s->sandboxes_created == 2);
  CHECK(s->sandboxes_stopped == 1);
  CHECK(s->sandboxes_left_to_node == 1); // n0's, for n0's reapers
  CHECK(s->stop_failures == 0);
}

TEST_CASE_METHOD(nodes_fixture,
                 "without a retry, a lost node's verification fails node_down "
                 "and names the node",
                 "[nodes][retry]") {
  start(2, 2, json{{"exec", json::array({"hang"})}});
  auto sup = keep(spawn_supervisor(sys, provider, supervisor_config{}));
  client->send(sup, verify_atom::value, test::make_request("r"));
  run();
  caf::anon_send_exit(nodes[0], caf::exit_reason::kill);
  run();
  auto out = take<verification_outcome>();
  REQUIRE(out);
  test::check_failure(*out, failure_kind::provider_unavailable,
                      verification_state::exec, failure_cause::node_down);
  CHECK(out->attempts == 1);
  CHECK(out->node == "n0:1");
  client->send(sup, stats_atom::value);
  run();
  auto s = take<supervisor_stats>();
  REQUIRE(s);
  CHECK(s->sandboxes_left_to_node == 1);
  CHECK(s->sandboxes_stopped == 0);
  CHECK(s->stop_failures == 0);
}

TEST_CASE_METHOD(
  nodes_fixture,
  "a node that joins is used, and when lost replaced by the next "
  "join under its name",
  "[nodes][join]") {
  start(1, 1); // n0:1, full after one create
  auto join = [&](const std::string& name) {
    backends.push_back(prepare_provider(
      parse_provider_block(json{{"scripted", json::object()}})));
    auto inner = keep(backends.back()->spawn(sys));
    node_limits limits;
    limits.capacity = 1;
    auto node = keep(spawn_node_actor(sys, inner, limits));
    client->send(caf::actor_cast<caf::actor>(provider), join_atom::value, name,
                 caf::actor_cast<caf::actor>(node));
    run();
    CHECK(take<ok_atom>());
    return node;
  };
  auto j = join("j");
  CHECK(create().state == "n0:1");
  CHECK(create().state == "j"); // n0 is full
  // A configured endpoint's name cannot be taken by a join.
  client->send(caf::actor_cast<caf::actor>(provider), join_atom::value,
               std::string{"n0:1"}, caf::actor_cast<caf::actor>(j));
  run();
  CHECK(take<caf::error>());
  caf::anon_send_exit(j, caf::exit_reason::kill);
  run();
  join("j"); // the node restarted and joined again
  CHECK(create().state == "j");
  client->send(caf::actor_cast<caf::actor>(provider), nodes_stats_atom::value);
  run();
  auto text = take<std::string>();
  REQUIRE(text);
  auto table = json::parse(*text);
  REQUIRE(table.size() == 2);
  CHECK(table[1]["endpoint"] == "j");
  CHECK(table[1]["up"] == true);
  CHECK(table[1]["losses"] == 1);
}
