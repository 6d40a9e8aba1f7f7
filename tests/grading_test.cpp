// The whole path with real processes: a supervisor on the local provider
// grades runners that misbehave in every way the verdict must survive, and
// each verdict is checked exactly (kind, state, cause, message, log tail),
// as is what the sandbox leaves behind (nothing).

#include "actors/supervisor.hpp"
#include "local_provider_fixture.hpp"
#include "messages/atoms.hpp"
#include "outcome_checks.hpp"

#include <caf/scoped_actor.hpp>

using namespace sv;
using namespace sv::test;

namespace {

struct grading_fixture : fixture {
  supervisor_actor supervisor;

  explicit grading_fixture(
    std::function<void(local_provider_config&)> tweak = {})
      : fixture([&](local_provider_config& c) {
          // Host pids stay visible, so the tests can look for leftovers.
          c.isolation = "none";
          if (tweak)
            tweak(c);
        }) {
    supervisor = spawn_supervisor(sys, provider);
  }

  ~grading_fixture() {
    caf::anon_send_exit(supervisor, caf::exit_reason::user_shutdown);
  }

  verification_outcome grade(const std::string& runner,
                             double exec_timeout_s = 20) {
    verification_request req;
    req.id = "t";
    req.files["sandbox_runner.py"] = runner;
    req.request = {{"question", 6 * 7}};
    req.exec_timeout_s = exec_timeout_s;
    return grade(std::move(req));
  }

  verification_outcome grade(verification_request req) {
    verification_outcome out;
    bool answered = false;
    self->request(supervisor, deadline, verify_atom::value, std::move(req))
      .receive(
        [&](verification_outcome& x) {
          out = std::move(x);
          answered = true;
        },
        [&](caf::error& err) { FAIL("no reply: " << describe(err)); });
    REQUIRE(answered);
    return out;
  }

  supervisor_stats stats() {
    supervisor_stats out;
    self->request(supervisor, deadline, stats_atom::value)
      .receive([&](supervisor_stats& x) { out = x; },
               [&](caf::error& err) { FAIL("no stats: " << describe(err)); });
    return out;
  }

  /// The stops run after the replies: waits (bounded) until none is left.
  bool stops_done() {
    return eventually([&] { return stats().stopping == 0; });
  }
};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

} // namespace

TEST_CASE("a runner's result.json is the result") {
  grading_fixture f;
  auto out = f.grade(R"(import json, sys
request = json.load(open(sys.argv[1]))
json.dump({"reward": 1.0, "answer": request["question"]}, open(sys.argv[2], "w"))
)");
  INFO(out.failure.message);
  REQUIRE(out.ok);
  CHECK(out.result == json{{"reward", 1.0}, {"answer", 42}});
  CHECK_FALSE(out.timings.create < 0);
  CHECK_FALSE(out.timings.ready < 0);
  CHECK_FALSE(out.timings.upload < 0);
  CHECK(out.timings.exec > 0);
  CHECK_FALSE(out.timings.download < 0);
  // The stop runs after the reply: the caller did not wait for it.
  CHECK(out.timings.stop < 0);
  CHECK(out.timings.stop_after_reply);
  CHECK(out.timings.total >= out.timings.exec);
}

TEST_CASE("sandbox processes run at the configured niceness") {
  grading_fixture f{[](local_provider_config& c) { c.sandbox_nice = 7; }};
  auto out = f.grade(R"(import json, os, sys
json.dump({"reward": 1.0, "nice": os.nice(0)}, open(sys.argv[2], "w"))
)");
  INFO(out.failure.message);
  REQUIRE(out.ok);
  CHECK(out.result.at("nice") == 7);
}

TEST_CASE("a runner exiting non-zero is a verifier_error with the log tail") {
  grading_fixture f;
  auto out = f.grade(R"(import sys
sys.stdout.write("x" * 3000 + "\n")
sys.stdout.flush()
sys.stderr.write("the runner gives up\n")
sys.exit(3)
)");
  check_failure(out, failure_kind::verifier_error, verification_state::exec,
                failure_cause::error);
  CHECK(out.failure.message == "runner exited with status 3"); // said once
  CHECK(out.failure.log_tail.size() == log_tail_bytes);
  CHECK(out.failure.log_tail.substr(out.failure.log_tail.size() - 20) ==
        "the runner gives up\n");
  CHECK(out.result.is_null());
}

TEST_CASE("a runner overrunning its deadline is a verifier_error timeout and "
          "leaves no process") {
  grading_fixture f;
  // The case needs a runner that started its child and said so before its
  // deadline: at niceness 10 on a busy machine Python's start alone may
  // take a second. A deadline that came first is doubled (the test of a
  // kill that leaves no process and keeps the log is the run that got
  // there); a kill that loses the log fails at the last.
  verification_outcome out;
  double deadline_s = 1;
  for (;; deadline_s *= 2) {
    out = f.grade(R"(import subprocess, time
subprocess.Popen(["sleep", "1000"])
print("started a child, now sleeping", flush=True)
time.sleep(1000)
)",
                  deadline_s);
    if (contains(out.failure.log_tail, "started a child") || deadline_s >= 16)
      break;
    CHECK(f.stops_done());
  }
  check_failure(out, failure_kind::verifier_error, verification_state::exec,
                failure_cause::timeout);
  CHECK(contains(out.failure.message,
                 "runner overran its " +
                   std::to_string(static_cast<int>(deadline_s)) +
                   " s deadline"));
  CHECK(contains(out.failure.log_tail, "started a child"));
  CHECK(processes_with_env_prefix(own_marker_prefix()).empty());
}

TEST_CASE("a runner that writes no result.json is a verifier_error") {
  grading_fixture f;
  auto out = f.grade("print('forgot the result')\n");
  check_failure(out, failure_kind::verifier_error, verification_state::download,
                failure_cause::invalid_result);
  CHECK(out.failure.message == "runner wrote no result.json");
  CHECK(contains(out.failure.log_tail, "forgot the result"));
}

TEST_CASE("an invalid result.json is a verifier_error in parse") {
  grading_fixture f;
  auto out =
    f.grade("import sys\nopen(sys.argv[2], 'w').write('{\"reward\": ')\n");
  check_failure(out, failure_kind::verifier_error, verification_state::parse,
                failure_cause::invalid_result);
  CHECK_THAT(out.failure.message,
             Catch::StartsWith("result.json rejected: not valid JSON: parse "
                               "error at line 1, column 12"));
}

TEST_CASE("a result.json that is not an object is rejected") {
  grading_fixture f;
  auto out = f.grade("import sys\nopen(sys.argv[2], 'w').write('[1, 2]')\n");
  check_failure(out, failure_kind::verifier_error, verification_state::parse,
                failure_cause::invalid_result);
  CHECK(out.failure.message ==
        "result.json rejected: expected a JSON object, got array");
}

TEST_CASE("a symlinked result.json is refused, not followed") {
  grading_fixture f;
  auto out =
    f.grade("import os, sys\nos.symlink('/etc/passwd', sys.argv[2])\n");
  check_failure(out, failure_kind::verifier_error, verification_state::download,
                failure_cause::invalid_result);
  CHECK(contains(out.failure.message, "symlink"));
  CHECK_FALSE(contains(out.failure.message, "root:"));
}

TEST_CASE("a result.json over the download cap is refused") {
  grading_fixture f{
    [](local_provider_config& c) { c.max_download_bytes = 1024; }};
  auto out = f.grade("import sys\nopen(sys.argv[2], 'w').write('{\"pad\": \"' "
                     "+ 'x' * 4096 + '\"}')\n");
  check_failure(out, failure_kind::verifier_error, verification_state::download,
                failure_cause::invalid_result);
  CHECK(contains(out.failure.message, "1024 byte download cap"));
}

TEST_CASE("children a successful runner left running are gone after stop") {
  grading_fixture f;
  auto out = f.grade(R"(import json, subprocess, sys
child = subprocess.Popen(["setsid", "sleep", "1000"])
json.dump({"reward": 1.0, "child": child.pid}, open(sys.argv[2], "w"))
)");
  INFO(out.failure.message);
  REQUIRE(out.ok);
  auto child = out.result.at("child").get<pid_t>();
  CHECK(child > 0);
  REQUIRE(f.stops_done()); // the stop runs after the reply
  CHECK_FALSE(process_alive(child));
  CHECK(processes_with_env_prefix(own_marker_prefix()).empty());
}

TEST_CASE("paths escaping the sandbox are refused before any sandbox "
          "exists") {
  // No pool filled at start: any entry of the root would be a sandbox.
  grading_fixture f{
    [](local_provider_config& c) { c.warm_pool_start = false; }};
  verification_request req;
  req.id = "escape";
  req.files["sandbox_runner.py"] = "print(1)";
  req.files["../../etc/evil.py"] = "print(2)";
  req.request = json::object();
  auto out = f.grade(std::move(req));
  check_failure(out, failure_kind::invalid_request,
                verification_state::validate, failure_cause::invalid_request);
  CHECK(out.failure.message ==
        "files: path \"../../etc/evil.py\" escapes the sandbox");
  CHECK(std::filesystem::is_empty(f.root.path));
}
