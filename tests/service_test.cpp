// The one runtime assembly (service/service.hpp) on the scripted provider:
// it supervises with restarts from its backend, drains and shuts down in
// one order, and what depends on a backend is asked of the backend.

#include "messages/json.hpp"
#include "providers/factory.hpp"
#include "service/service.hpp"

#include <caf/scoped_actor.hpp>
#include <catch2/catch.hpp>
#include <chrono>

using namespace sv;

namespace {

verification_request quick_request(std::string id) {
  verification_request req;
  req.id = std::move(id);
  req.files["sandbox_runner.py"] = "";
  req.request = {{"q", 1}};
  req.exec_timeout_s = 0.5;
  req.config.ready_timeout_s = 0.5;
  req.config.upload_timeout_s = 0.5;
  req.config.download_timeout_s = 0.5;
  req.config.stop_timeout_s = 0.5;
  req.config.exec_grace_s = 0.5;
  return req;
}

verification_outcome verify(service& svc, verification_request req) {
  verification_outcome out;
  caf::scoped_actor self{svc.system()};
  self
    ->request(svc.entry(), std::chrono::seconds{30}, verify_atom::value,
              std::move(req))
    .receive([&](verification_outcome& o) { out = std::move(o); },
             [](caf::error&) { FAIL("no outcome"); });
  return out;
}

provider_block scripted(json steps) {
  return parse_provider_block(
    json{{"scripted", {{"steps", std::move(steps)}}}});
}

} // namespace

TEST_CASE("service: grades through its supervisor, drains, shuts down once",
          "[service]") {
  service svc{scripted(json::object())};
  svc.supervise({});
  auto out = verify(svc, quick_request("a"));
  CHECK(out.ok);
  CHECK(svc.drain(std::chrono::seconds{10}));
  auto stats = svc.stats();
  REQUIRE(stats);
  CHECK(stats->sandboxes_created == 1);
  CHECK(stats->sandboxes_stopped == 1);
  svc.shut_down(std::chrono::seconds{1});
  svc.shut_down(std::chrono::seconds{1}); // once: nothing left to stop
}

TEST_CASE("service: a provider that dies is replaced from the same backend",
          "[service]") {
  service svc{scripted(json{{"exec", json::array({"crash"})}})};
  svc.supervise({});
  auto first = svc.first_provider();
  auto out = verify(svc, quick_request("a"));
  CHECK_FALSE(out.ok);
  // The next submission runs on the replacement (its script: the same).
  verify(svc, quick_request("b"));
  CHECK(svc.latest_provider() != first);
  auto stats = svc.stats();
  REQUIRE(stats);
  CHECK(stats->provider_restarts >= 1);
}

TEST_CASE("service: a front before the supervisor is where submissions go",
          "[service]") {
  service svc{scripted(json::object())};
  supervisor_actor seen;
  svc.supervise({}, [&](caf::actor_system&, const supervisor_actor& sup,
                        const provider_backend& backend) {
    seen = sup;
    CHECK(backend.grade_identity({}).at("name") == "scripted");
    return sup; // a front that is the supervisor itself
  });
  CHECK(seen == svc.supervisor());
  CHECK(verify(svc, quick_request("a")).ok);
}

TEST_CASE("backends answer what the apps used to decide by name", "[service]") {
  CHECK(servable_by_node(scripted(json::object())));
  CHECK(servable_by_node(parse_provider_block(json{{"local", {}}})));
  CHECK_FALSE(servable_by_node(parse_provider_block(json{
    {"nodes",
     {{"endpoints", json::array({"127.0.0.1:1"})}, {"insecure", true}}}})));
  auto nodes = prepare_provider(
    parse_provider_block(json{{"nodes",
                               {{"endpoints", json::array({"127.0.0.1:1"})},
                                {"insecure", true},
                                {"retry_infra", 2}}}}));
  CHECK(nodes->retry_defaults().max_retries == 2);
  auto plain = prepare_provider(scripted(json::object()));
  CHECK(plain->retry_defaults().max_retries == 0);
}
