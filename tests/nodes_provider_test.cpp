// The nodes provider at the message level (deterministic scheduler): real
// node actors over scripted providers stand in for sv-node processes, given
// to the nodes provider by handle (no middleman).

#include "deterministic_fixture.hpp"
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
  void start(size_t count, uint32_t capacity, json steps = json::object()) {
    nodes_settings settings;
    for (size_t i = 0; i < count; ++i) {
      auto block =
        parse_provider_block(json{{"scripted", json{{"steps", steps}}}});
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
