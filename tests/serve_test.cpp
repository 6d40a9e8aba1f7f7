// sv-serve's parts without sockets: bearer tokens (constant-time compare,
// the file format, reload keeping the old set on failure), the Prometheus
// text of its metrics, and the sandbox API's actor on the deterministic
// scheduler with the scripted provider (every call's reply and the
// provider's ledger).

#include "apps/sv_serve/metrics.hpp"
#include "apps/sv_serve/sandboxes.hpp"
#include "apps/sv_serve/tokens.hpp"
#include "deterministic_fixture.hpp"
#include "messages/json.hpp"
#include "providers/scripted.hpp"

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <unistd.h>

using namespace sv;
using namespace sv::serve;

namespace {

struct token_file {
  std::string path;
  token_file() {
    char tmpl[] = "/tmp/sv-serve-tokens-XXXXXX";
    auto fd = ::mkstemp(tmpl);
    REQUIRE(fd >= 0);
    ::close(fd);
    path = tmpl;
  }
  ~token_file() { std::remove(path.c_str()); }
  void write(const std::string& text) const {
    std::ofstream out{path, std::ios::trunc};
    out << text;
  }
};

} // namespace

TEST_CASE("token equality looks at lengths and every byte") {
  CHECK(token_set::equal("abc", "abc"));
  CHECK_FALSE(token_set::equal("abc", "abd"));
  CHECK_FALSE(token_set::equal("abc", "abcd"));
  CHECK_FALSE(token_set::equal("", "a"));
  CHECK(token_set::equal("", ""));
}

TEST_CASE("without a token file every request is accepted") {
  token_set tokens;
  CHECK_FALSE(tokens.required());
  CHECK(tokens.accepts(""));
}

TEST_CASE("tokens are one a line, blank lines and spaces ignored") {
  token_file file;
  file.write("alpha\n\n  beta \r\n");
  token_set tokens{file.path};
  CHECK(tokens.required());
  CHECK(tokens.accepts("Bearer alpha"));
  CHECK(tokens.accepts("Bearer beta"));
  CHECK_FALSE(tokens.accepts("Bearer gamma"));
  CHECK_FALSE(tokens.accepts("alpha"));
  CHECK_FALSE(tokens.accepts("Basic alpha"));
  CHECK_FALSE(tokens.accepts("Bearer "));
  CHECK_FALSE(tokens.accepts(""));
}

TEST_CASE("a reload replaces the tokens, and a failed one keeps them") {
  token_file file;
  file.write("old\n");
  token_set tokens{file.path};
  file.write("new\n");
  CHECK(tokens.reload().empty());
  CHECK(tokens.accepts("Bearer new"));
  CHECK_FALSE(tokens.accepts("Bearer old"));
  file.write("\n\n");
  CHECK(tokens.reload().find("no token") != std::string::npos);
  CHECK(tokens.accepts("Bearer new"));
}

TEST_CASE("a token file that cannot be read is an error at start") {
  CHECK_THROWS_AS(token_set{"/nonexistent/sv-serve-tokens"},
                  std::runtime_error);
}

TEST_CASE("metrics render as Prometheus text with the outcome labels") {
  metrics m;
  m.count_http(200);
  m.count_http(200);
  m.count_http(404);
  m.started();
  m.started();
  verification_outcome ok;
  ok.ok = true;
  ok.timings.create = 5;
  ok.timings.total = 20;
  m.finished(ok);
  verification_outcome bad;
  bad.failure.kind = failure_kind::verifier_error;
  bad.failure.state = verification_state::exec;
  bad.failure.cause = failure_cause::timeout;
  bad.timings.total = 2000;
  m.finished(bad);
  m.started();
  m.cancelled(1);
  supervisor_stats stats;
  stats.sandboxes_created = 3;
  stats.sandboxes_stopped = 2;
  stats.provider_restarts = 1;
  auto text = m.render(stats);
  std::regex sample{R"(^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[^}]*\})? \S+$)"};
  std::istringstream lines{text};
  std::string line;
  while (std::getline(lines, line)) {
    INFO(line);
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0)
      continue;
    CHECK(std::regex_match(line, sample));
  }
  auto has = [&](const std::string& s) {
    INFO(s);
    CHECK(text.find(s + "\n") != std::string::npos);
  };
  has(
    R"(sv_verifications_total{outcome="ok",failure_kind="",state="",cause=""} 1)");
  has(
    R"(sv_verifications_total{outcome="failed",failure_kind="verifier_error",state="exec",cause="timeout"} 1)");
  has(R"(sv_http_requests_total{code="200"} 2)");
  has(R"(sv_http_requests_total{code="404"} 1)");
  has("sv_in_flight 0");
  has("sv_cancelled_total 1");
  has("sv_sandboxes_live 1");
  has("sv_provider_restarts_total 1");
  has(R"(sv_state_seconds_bucket{state="create",le="0.005"} 1)");
  has(R"(sv_verification_seconds_bucket{le="1"} 1)");
  has(R"(sv_verification_seconds_bucket{le="2.5"} 2)");
  has(R"(sv_verification_seconds_bucket{le="+Inf"} 2)");
  has("sv_verification_seconds_count 2");
}

TEST_CASE("without supervisor stats the sandbox gauges are left out") {
  metrics m;
  auto text = m.render(std::nullopt);
  CHECK(text.find("sv_sandboxes_live") == std::string::npos);
  CHECK(text.find("sv_in_flight 0\n") != std::string::npos);
}

// -- the sandbox API ----------------------------------------------------------

TEST_CASE("idempotency keys are 1 to 200 characters of [A-Za-z0-9._:-]") {
  CHECK(valid_idempotency_key("a"));
  CHECK(valid_idempotency_key("2f1c-9a.b_c:d"));
  CHECK(valid_idempotency_key(std::string(200, 'k')));
  CHECK_FALSE(valid_idempotency_key(""));
  CHECK_FALSE(valid_idempotency_key(std::string(201, 'k')));
  CHECK_FALSE(valid_idempotency_key("a b"));
  CHECK_FALSE(valid_idempotency_key("a/b"));
  CHECK_FALSE(valid_idempotency_key("\xc3\xa9"));
}

TEST_CASE("media types match without case or parameters") {
  CHECK(is_media_type("application/octet-stream", "application/octet-stream"));
  CHECK(is_media_type(" Application/Octet-Stream ; x=1",
                      "application/octet-stream"));
  CHECK_FALSE(is_media_type("application/json", "application/octet-stream"));
  CHECK_FALSE(is_media_type("", "application/octet-stream"));
  CHECK_FALSE(
    is_media_type("application/octet-streams", "application/octet-stream"));
}

TEST_CASE("the sandbox API's paths") {
  CHECK(is_sandbox_path("/v1/sandboxes"));
  CHECK(is_sandbox_path("/v1/sandboxes/"));
  CHECK(is_sandbox_path("/v1/sandboxes/x/exec"));
  CHECK_FALSE(is_sandbox_path("/v1/sandboxesx"));
  CHECK_FALSE(is_sandbox_path("/v1/sandbox"));
  CHECK_FALSE(is_sandbox_path("/v1/verify"));
}

namespace {

using namespace std::chrono_literals;

/// The sandbox API over a scripted provider, all on the test scheduler.
struct api_fixture : sv::test::deterministic_fixture {
  std::shared_ptr<scripted_world> world = std::make_shared<scripted_world>();
  metrics counters;
  std::unique_ptr<sandbox_api> api;

  explicit api_fixture(scripted_script script = {},
                       sandbox_api_options opts = {}) {
    auto provider =
      keep(spawn_scripted_provider(sys, std::move(script), world));
    api = std::make_unique<sandbox_api>(
      sys, [provider] { return provider; }, opts, &counters);
    run();
  }

  ~api_fixture() {
    api->begin_shut_down();
    run_for(1s);
    api.reset(); // ended: no wait
  }

  using reply_slot = std::shared_ptr<std::optional<sandbox_reply>>;

  /// Sends a call; its reply lands in the slot once the scheduler ran.
  reply_slot send(std::string method, std::string target, std::string body = {},
                  std::string owner = "alice", std::string key = {}) {
    sandbox_call c;
    c.method = std::move(method);
    c.target = std::move(target);
    c.body = std::move(body);
    c.owner = std::move(owner);
    c.has_idempotency_key = !key.empty();
    c.idempotency_key = std::move(key);
    auto slot = std::make_shared<std::optional<sandbox_reply>>();
    api->handle(std::move(c),
                [slot](sandbox_reply r) { *slot = std::move(r); });
    return slot;
  }

  sandbox_reply call(std::string method, std::string target,
                     std::string body = {}, std::string owner = "alice",
                     std::string key = {}) {
    auto slot = send(std::move(method), std::move(target), std::move(body),
                     std::move(owner), std::move(key));
    run();
    REQUIRE(slot->has_value());
    return **slot;
  }

  std::string create(std::string owner = "alice") {
    auto r = call("POST", "/v1/sandboxes", "{}", std::move(owner));
    REQUIRE(r.status == 201);
    return json::parse(r.body).at("sandbox_id").get<std::string>();
  }
};

std::string error_code_of(const sandbox_reply& r) {
  return json::parse(r.body).at("error").at("code").get<std::string>();
}

} // namespace

TEST_CASE("each route calls the provider once and answers as the contract "
          "says") {
  scripted_script script;
  script.result_text = "bytes";
  api_fixture f{script};
  auto r = f.call("POST", "/v1/sandboxes", R"({"ttl_s": 5})");
  REQUIRE(r.status == 201);
  auto made = json::parse(r.body);
  auto id = made.at("sandbox_id").get<std::string>();
  CHECK(id.rfind("sbx-", 0) == 0);
  CHECK(id.size() == 36);
  CHECK(made.at("ttl_s") == 5.0);
  CHECK(made.at("provider_name") == "scripted");
  auto base = "/v1/sandboxes/" + id;
  r = f.call("GET", base);
  CHECK(r.status == 200);
  CHECK(json::parse(r.body) == json{{"status", "running"}});
  r = f.call("PUT", base + "/files", R"({"dir": "", "files": {"a": "b"}})");
  CHECK(r.status == 204);
  CHECK(r.body.empty());
  r = f.call("POST", base + "/exec", R"({"argv": ["true"], "timeout_s": 1})");
  CHECK(r.status == 200);
  CHECK(json::parse(r.body).get<exec_result>().return_code == 0);
  r = f.call("GET", base + "/files?path=r%2Ejson");
  CHECK(r.status == 200);
  CHECK(r.body == "bytes");
  CHECK(r.content_type == "application/octet-stream");
  CHECK(f.counters.api.live == 1);
  r = f.call("DELETE", base);
  CHECK(r.status == 204);
  CHECK(f.world->stopped() == 1);
  CHECK(f.counters.api.live == 0);
  r = f.call("DELETE", base);
  CHECK(r.status == 204); // idempotent for its owner
  CHECK(f.world->stops() == 1);
  r = f.call("GET", base);
  CHECK(r.status == 404);
  CHECK(error_code_of(r) == "no_such_sandbox");
  CHECK(f.world->creates() == 1);
  CHECK(f.world->calls(scripted_op::exec) == 1);
  CHECK(f.world->calls(scripted_op::download) == 1);
}

TEST_CASE("another token's sandbox is 404 on every route and untouched") {
  api_fixture f;
  auto id = f.create("alice");
  auto base = "/v1/sandboxes/" + id;
  for (auto& [method, target, body] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
         {"GET", base, ""},
         {"PUT", base + "/files", R"({"dir": "", "files": {}})"},
         {"POST", base + "/exec", R"({"argv": ["true"], "timeout_s": 1})"},
         {"GET", base + "/files?path=x", ""},
         {"DELETE", base, ""}}) {
    INFO(method << ' ' << target);
    auto r = f.call(method, target, body, "bob");
    CHECK(r.status == 404);
    CHECK(error_code_of(r) == "no_such_sandbox");
  }
  CHECK(f.world->stops() == 0);
  CHECK(f.world->calls(scripted_op::exec) == 0);
  CHECK(f.call("GET", base, "", "alice").status == 200);
}

TEST_CASE("creates with one key join the first while it is in flight: one "
          "sandbox") {
  scripted_script script;
  script.steps[scripted_op::create] = {
    {scripted_fault::delay, caf::timespan{200ms}, false}};
  api_fixture f{script};
  std::vector<api_fixture::reply_slot> slots;
  for (int i = 0; i < 5; ++i)
    slots.push_back(f.send("POST", "/v1/sandboxes", "{}", "alice", "k-1"));
  f.run();
  for (auto& s : slots)
    CHECK_FALSE(s->has_value()); // all wait for the one create
  f.run_for(200ms);
  std::set<std::string> ids;
  std::multiset<unsigned> statuses;
  for (auto& s : slots) {
    REQUIRE(s->has_value());
    statuses.insert((*s)->status);
    ids.insert(json::parse((*s)->body).at("sandbox_id").get<std::string>());
  }
  CHECK(statuses == std::multiset<unsigned>{200, 200, 200, 200, 201});
  CHECK(ids.size() == 1);
  CHECK(f.world->creates() == 1);
  CHECK(f.counters.api.created == 1);
  // Later: the same body again; another spec is 422; another token's key
  // is its own.
  auto r = f.call("POST", "/v1/sandboxes", "{ }", "alice", "k-1");
  CHECK(r.status == 200);
  CHECK(ids.count(json::parse(r.body).at("sandbox_id").get<std::string>()));
  r = f.call("POST", "/v1/sandboxes", R"({"ttl_s": 9})", "alice", "k-1");
  CHECK(r.status == 422);
  CHECK(error_code_of(r) == "idempotency_key_reused");
  auto bob = f.send("POST", "/v1/sandboxes", "{}", "bob", "k-1");
  f.run_for(200ms);
  REQUIRE(bob->has_value());
  CHECK((*bob)->status == 201);
  CHECK(f.world->creates() == 2);
}

TEST_CASE("a failed create fails every caller that joined it and forgets "
          "the key") {
  scripted_script script;
  script.steps[scripted_op::create] = {
    {scripted_fault::error, caf::timespan{0}, false}};
  api_fixture f{script};
  auto a = f.send("POST", "/v1/sandboxes", "{}", "alice", "k");
  auto b = f.send("POST", "/v1/sandboxes", "{}", "alice", "k");
  f.run();
  REQUIRE(a->has_value());
  REQUIRE(b->has_value());
  CHECK((*a)->status == 500);
  CHECK(error_code_of(**a) == "sandbox_error");
  CHECK((*b)->status == 500);
  auto r = f.call("POST", "/v1/sandboxes", "{}", "alice", "k");
  CHECK(r.status == 201);
  CHECK(f.world->creates() == 1);
}

TEST_CASE("provider errors keep their names, a lost reply is 504") {
  scripted_script script;
  script.steps[scripted_op::exec] = {
    {scripted_fault::error, caf::timespan{0}, false}};
  script.steps[scripted_op::status] = {
    {scripted_fault::hang, caf::timespan{0}, false}};
  sandbox_api_options opts;
  opts.call_timeout = 1s;
  api_fixture f{script, opts};
  auto base = "/v1/sandboxes/" + f.create();
  auto r = f.call("POST", base + "/exec", R"({"argv": ["x"], "timeout_s": 1})");
  CHECK(r.status == 500);
  CHECK(error_code_of(r) == "sandbox_error");
  auto slot = f.send("GET", base);
  f.run_for(999ms);
  CHECK_FALSE(slot->has_value());
  f.run_for(1ms);
  REQUIRE(slot->has_value());
  CHECK((*slot)->status == 504);
  CHECK(error_code_of(**slot) == "timeout");
}

TEST_CASE("bad bodies and routes are answered without a provider call") {
  api_fixture f;
  auto base = "/v1/sandboxes/" + f.create();
  struct bad {
    const char* method;
    std::string target;
    std::string body;
    unsigned status;
    const char* code;
  };
  for (auto& b : std::vector<bad>{
         {"POST", "/v1/sandboxes", "{", 400, "invalid_request"},
         {"POST", "/v1/sandboxes", R"({"x": 1})", 400, "invalid_request"},
         {"POST", "/v1/sandboxes", "[[[[1]]]]", 400, "invalid_request"},
         {"PUT", base + "/files", R"({"dir": ""})", 400, "invalid_request"},
         {"POST", base + "/exec", R"({"argv": ["x"]})", 400, "invalid_request"},
         {"GET", base + "/files?path=%4", "", 400, "invalid_request"},
         {"GET", base + "/files?other=1", "", 400, "invalid_request"},
         {"GET", base + "/nope", "", 404, "no_such_endpoint"},
         {"PATCH", base, "", 405, "method_not_allowed"},
         {"GET", "/v1/sandboxes", "", 405, "method_not_allowed"},
         {"GET", "/v1/sandboxes/\xff", "", 404, "no_such_sandbox"}}) {
    INFO(b.method << ' ' << b.target << ' ' << b.body);
    auto r = f.call(b.method, b.target, b.body);
    CHECK(r.status == b.status);
    CHECK(error_code_of(r) == b.code);
  }
  CHECK(f.world->calls(scripted_op::upload) == 0);
  CHECK(f.world->calls(scripted_op::exec) == 0);
  CHECK(f.world->calls(scripted_op::download) == 0);
  CHECK(f.world->creates() == 1);
}

TEST_CASE("per-token limit: 429 with Retry-After beyond it") {
  sandbox_api_options opts;
  opts.max_per_owner = 2;
  api_fixture f{{}, opts};
  f.create("alice");
  auto second = f.create("alice");
  auto r = f.call("POST", "/v1/sandboxes", "{}", "alice");
  CHECK(r.status == 429);
  CHECK(error_code_of(r) == "too_many_sandboxes");
  REQUIRE(r.headers.size() == 1);
  CHECK(r.headers[0] ==
        std::pair<std::string, std::string>{"Retry-After", "1"});
  f.create("bob");
  CHECK(f.call("DELETE", "/v1/sandboxes/" + second).status == 204);
  f.create("alice");
  CHECK(f.world->creates() == 4);
}

TEST_CASE("draining refuses creates, shutting down stops every sandbox") {
  api_fixture f;
  f.create("alice");
  f.create("bob");
  f.api->drain();
  auto r = f.call("POST", "/v1/sandboxes", "{}");
  CHECK(r.status == 503);
  CHECK(error_code_of(r) == "draining");
  f.api->begin_shut_down();
  f.run();
  CHECK(f.api->ended());
  CHECK(f.world->live() == 0);
  CHECK(f.world->stopped() == 2);
  r = f.call("GET", "/v1/sandboxes/x");
  CHECK(r.status == 503); // refused at once: nobody to answer
}
