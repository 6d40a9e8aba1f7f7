// The C++ facade (facade/grader.hpp) on the scripted provider: results come
// back through a future or a callback, failures as a
// sandbox_verification_error with the seed's failure_kind, and destroying
// the grader with a call in flight answers that call.

#include "facade/grader.hpp"
#include "messages/enums.hpp"
#include "messages/json.hpp"

#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <string>

using namespace sv;

namespace {

/// Short deadlines: a hang costs a second, never a test's budget.
verification_config fast_config() {
  verification_config c;
  c.ready_timeout_s = 0.5;
  c.upload_timeout_s = 0.5;
  c.download_timeout_s = 0.5;
  c.stop_timeout_s = 0.5;
  c.exec_grace_s = 0.5;
  return c;
}

const file_map runner{{"sandbox_runner.py", ""}};

json scripted(json steps) {
  return json{{"scripted", {{"steps", std::move(steps)}}}};
}

/// The future's value, or FAIL after 30 s (nothing here takes 2).
template <class T>
T get(std::future<T>& f) {
  REQUIRE(f.wait_for(std::chrono::seconds{30}) == std::future_status::ready);
  return f.get();
}

/// The failure a future ends with.
verification_failure failure_of(std::future<json>& f) {
  REQUIRE(f.wait_for(std::chrono::seconds{30}) == std::future_status::ready);
  try {
    f.get();
  } catch (const sandbox_verification_error& e) {
    CHECK(std::string{e.what()} == e.failure().message);
    return e.failure();
  }
  FAIL("the call succeeded");
  return {};
}

} // namespace

TEST_CASE("grader: a graded submission's result comes back in the future") {
  grader g{scripted(json::object())};
  auto f = g.run_verification_sandbox(fast_config(), runner, {{"q", 1}}, 0.5);
  CHECK(get(f) == json{{"reward", 1.0}});
  CHECK(g.stats().succeeded == 1);
}

TEST_CASE("grader: parse_result turns the result into the return value") {
  grader g{scripted(json::object())};
  auto f = g.run_verification_sandbox(
    fast_config(), runner, json::object(), 0.5,
    [](const json& r) { return r.at("reward").get<double>() * 2; });
  CHECK(get(f) == 2.0);
}

TEST_CASE("grader: a parse_result that throws is a verifier_error of parse") {
  grader g{scripted(json::object())};
  auto f = g.run_verification_sandbox(
    fast_config(), runner, json::object(), 0.5,
    [](const json&) -> json { throw std::runtime_error("no answer field"); });
  auto fail = failure_of(f);
  CHECK(fail.kind == failure_kind::verifier_error);
  CHECK(fail.state == verification_state::parse);
  CHECK(fail.cause == failure_cause::invalid_result);
  CHECK(fail.message == "parse_result failed: no answer field");
}

TEST_CASE("grader: a create error is provider_unavailable, by name too") {
  grader g{scripted({{"create", {"error"}}})};
  auto f =
    g.run_verification_sandbox(fast_config(), runner, json::object(), 0.5);
  REQUIRE(f.wait_for(std::chrono::seconds{30}) == std::future_status::ready);
  try {
    f.get();
    FAIL("the call succeeded");
  } catch (const sandbox_verification_error& e) {
    CHECK(e.failure_kind_name() == "provider_unavailable");
    CHECK(e.failure().state == verification_state::create);
    CHECK(e.failure().cause == failure_cause::error);
  }
  // The next call is graded: the grader goes on.
  auto ok =
    g.run_verification_sandbox(fast_config(), runner, json::object(), 0.5);
  CHECK(get(ok) == json{{"reward", 1.0}});
}

TEST_CASE("grader: a request without sandbox_runner.py is invalid_request") {
  grader g{scripted(json::object())};
  auto f = g.run_verification_sandbox(fast_config(), {{"x.py", ""}},
                                      json::object(), 0.5);
  auto fail = failure_of(f);
  CHECK(fail.kind == failure_kind::invalid_request);
  CHECK(fail.state == verification_state::validate);
}

TEST_CASE("grader: the callback form answers once, result or error") {
  grader g{scripted({{"download", {"ok", "garbage"}}})};
  std::promise<std::pair<json, bool>> first, second;
  auto answer = [](std::promise<std::pair<json, bool>>& p) {
    return [&p](json result, std::exception_ptr error) {
      p.set_value({std::move(result), error != nullptr});
    };
  };
  g.run_verification_sandbox(fast_config(), runner, json::object(), 0.5, {},
                             json::object(), "calls", answer(first));
  auto a = first.get_future();
  CHECK(get(a) == std::make_pair(json{{"reward", 1.0}}, false));
  g.run_verification_sandbox(fast_config(), runner, json::object(), 0.5, {},
                             json::object(), "calls", answer(second));
  auto b = second.get_future();
  CHECK(get(b) == std::make_pair(json(nullptr), true));
}

TEST_CASE("grader: destroyed with a call in flight, it answers that call") {
  std::future<json> f;
  {
    grader g{scripted({{"exec", {"hang"}}})};
    verification_config c = fast_config();
    f = g.run_verification_sandbox(c, runner, json::object(), 30);
    // Nothing waits for the hang: the destructor stops the supervisor.
  }
  auto fail = failure_of(f);
  CHECK(fail.kind == failure_kind::provider_unavailable);
}

TEST_CASE("grader: a bad provider block is refused at construction") {
  auto make = [](const json& block) { grader g{block}; };
  CHECK_THROWS_AS(make(json{{"nosuch", json::object()}}), json_error);
  CHECK_THROWS_AS(make(scripted({{"bogus", {"ok"}}})), json_error);
}
