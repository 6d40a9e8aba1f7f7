// The protocol: JSON round trips, strict JSON validation (unknown keys and
// wrong types name the field), submission validation, and CAF's binary
// serialization of every type (what crosses a node boundary).

#include "messages/errors.hpp"
#include "messages/json.hpp"
#include "messages/registry.hpp"
#include "messages/validation.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <catch2/catch.hpp>

using namespace sv;

namespace {

verification_request sample_request() {
  verification_request req;
  req.id = "HumanEval/0#1";
  req.files = {{"sandbox_runner.py", "print(1)"}, {"lib/harness.py", "x = 1"}};
  req.request = {{"task_id", "HumanEval/0"}, {"tests", {1, 2, 3}}};
  req.exec_timeout_s = 12.5;
  req.metadata = {{"task", "humaneval"}};
  req.work_dir = "calls";
  req.config.python = "/usr/bin/python3";
  req.config.ready_timeout_s = 60;
  req.config.env = {{"A", "b"}};
  req.config.metadata = {{"owner", "rl"}};
  req.config.provider_options = {{"pool", "fast"}};
  req.config.resources.cpu = 2;
  req.config.resources.memory_mib = 512;
  return req;
}

verification_outcome sample_failure() {
  verification_outcome out;
  out.id = "x";
  out.failure = {failure_kind::verifier_error, verification_state::exec,
                 failure_cause::timeout, "runner overran its 2 s deadline",
                 "Traceback..."};
  out.timings.create = 3.5;
  out.timings.exec = 2000;
  out.timings.total = 2010.25;
  return out;
}

/// The message of the json_error that reading `j` as T throws.
template <class T>
std::string error_of(const json& j) {
  try {
    T x;
    from_json(j, x);
  } catch (const json_error& e) {
    return e.what();
  }
  return "no error";
}

template <class T>
T json_round_trip(const T& x) {
  json j = x;
  T y;
  from_json(json::parse(j.dump()), y);
  return y;
}

struct binary_fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;

  binary_fixture() {
    register_protocol(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
  }

  template <class T>
  T round_trip(T x) {
    std::vector<char> buf;
    caf::binary_serializer sink{*sys, buf};
    REQUIRE(!sink(x));
    T y{};
    caf::binary_deserializer source{*sys, buf};
    REQUIRE(!source(y));
    return y;
  }
};

} // namespace

// -- JSON round trips ---------------------------------------------------------

TEST_CASE("verification_request survives a JSON round trip") {
  auto req = sample_request();
  auto back = json_round_trip(req);
  CHECK(json(back) == json(req));
  CHECK(back.files == req.files);
  CHECK(back.config.resources.memory_mib == 512);
  CHECK(back.config.python == "/usr/bin/python3");
}

TEST_CASE("defaults fill what a submission leaves out") {
  verification_request req;
  from_json(json::parse(R"({"id": "a", "files": {"sandbox_runner.py": ""},
                            "request": {}})"),
            req);
  CHECK(req.exec_timeout_s == 30);
  CHECK(req.config.python == "python3");
  CHECK(req.config.ready_timeout_s == 600);
  CHECK(req.work_dir == "calls");
  CHECK(req.metadata == json::object());
}

TEST_CASE("sandbox types survive a JSON round trip") {
  sandbox_spec spec;
  spec.image = "img";
  spec.ttl_s = 960;
  spec.env = {{"K", "V"}};
  spec.metadata = {{"m", 1}};
  spec.resources.disk_gib = 1.5;
  spec.resources.gpu = 1;
  spec.resources.gpu_type = "a100";
  CHECK(json(json_round_trip(spec)) == json(spec));
  // An unset TTL (0: the provider's default) comes back as it went out;
  // a negative one is refused by name.
  sandbox_spec unset;
  CHECK(json_round_trip(unset).ttl_s == 0);
  CHECK_THROWS_WITH(json({{"ttl_s", -1}}).get<sandbox_spec>(),
                    Catch::Contains("ttl_s"));
  sandbox_handle h{"sb-1", "local", "opaque"};
  CHECK(json(json_round_trip(h)) == json(h));
  exec_request cmd{{"python3", "r.py"}, "calls/x", {{"A", "1"}}, 5, "log"};
  CHECK(json(json_round_trip(cmd)) == json(cmd));
  exec_result res{"out", "err", 137, exec_error_type::killed, "killed", "tail"};
  CHECK(json(json_round_trip(res)) == json(res));
  CHECK(json(res)["error_type"] == "killed");
}

TEST_CASE("outcomes are the batch format's output lines") {
  auto failure = sample_failure();
  json j = failure;
  CHECK(j["ok"] == false);
  CHECK(j["mask_sample"] == true);
  CHECK(j["result"].is_null());
  CHECK(j["failure"]["failure_kind"] == "verifier_error");
  CHECK(j["failure"]["state"] == "exec");
  CHECK(j["failure"]["cause"] == "timeout");
  CHECK(j["failure"]["log_tail"] == "Traceback...");
  CHECK(j["timings_ms"] ==
        json{{"create", 3.5}, {"exec", 2000.0}, {"total", 2010.25}});
  CHECK(json(json_round_trip(failure)) == j);
  verification_outcome ok;
  ok.id = "y";
  ok.ok = true;
  ok.result = {{"reward", 1.0}};
  json k = ok;
  CHECK(k["mask_sample"] == false);
  CHECK(k["failure"].is_null());
  CHECK(json(json_round_trip(ok)) == k);
}

TEST_CASE("enums read and write their wire names") {
  for (auto name : {"starting", "running", "stopped", "error", "unknown"}) {
    sandbox_status s;
    from_json(json(name), s);
    CHECK(json(s) == name);
  }
  CHECK(error_of<exec_result>({{"return_code", 0}, {"error_type", "boom"}}) ==
        "error_type: unknown value \"boom\" (allowed: none, timeout, oom, "
        "killed, runtime, sandbox)");
}

// -- JSON validation errors ---------------------------------------------------

TEST_CASE("unknown keys are errors naming the key and the allowed keys") {
  CHECK(error_of<verification_request>(
          {{"id", "a"}, {"files", json::object()}, {"request", 1}, {"x", 1}}) ==
        "x: unknown key in verification_request (allowed: id, config, "
        "files, request, exec_timeout_s, metadata, work_dir)");
  CHECK(error_of<verification_request>({{"id", "a"},
                                        {"files", json::object()},
                                        {"request", 1},
                                        {"config", {{"pyhton", "x"}}}})
          .rfind("config.pyhton: unknown key in verification_config "
                 "(allowed: env, image,",
                 0) == 0);
  CHECK(error_of<sandbox_resources>({{"ram", 1}}) ==
        "ram: unknown key in sandbox_resources (allowed: cpu, memory_mib, "
        "disk_gib, gpu, gpu_type)");
  CHECK(
    error_of<sandbox_spec>({{"imgae", ""}}).rfind("imgae: unknown key", 0) ==
    0);
  CHECK(error_of<sandbox_handle>({{"id", ""}}).rfind("id: unknown key", 0) ==
        0);
  CHECK(error_of<exec_request>({{"argv", {"a"}}, {"timeout_s", 1}, {"x", 0}})
          .rfind("x: unknown key in exec_request", 0) == 0);
  CHECK(error_of<exec_result>({{"return_code", 0}, {"rc", 0}})
          .rfind("rc: unknown key in exec_result", 0) == 0);
  CHECK(error_of<verification_failure>({{"kind", "x"}})
          .rfind("kind: unknown key in verification_failure", 0) == 0);
  CHECK(error_of<verification_outcome>({{"id", "a"}, {"ok", true}, {"y", 1}})
          .rfind("y: unknown key in verification_outcome", 0) == 0);
}

TEST_CASE("missing and mistyped fields name the field") {
  CHECK(error_of<verification_request>({{"files", json::object()}}) ==
        "id: missing required field");
  CHECK(error_of<verification_request>({{"id", "a"}, {"request", 1}}) ==
        "files: missing required field");
  CHECK(
    error_of<verification_request>({{"id", "a"}, {"files", json::object()}}) ==
    "request: missing required field");
  CHECK(error_of<verification_request>({{"id", 7}}) ==
        "id: expected a string, got number");
  CHECK(error_of<verification_request>(
          {{"id", "a"}, {"files", {{"x.py", 1}}}, {"request", 1}}) ==
        "files.x.py: expected a string (text) or {\"base64\": \"...\"} "
        "(bytes), got number");
  CHECK(error_of<verification_request>({{"id", "a"},
                                        {"files", json::object()},
                                        {"request", 1},
                                        {"exec_timeout_s", -1}}) ==
        "exec_timeout_s: must be a number of seconds in (0, 604800]");
  CHECK(error_of<verification_request>(
          {{"id", "a"},
           {"files", json::object()},
           {"request", 1},
           {"config", {{"resources", {{"memory_mib", "lots"}}}}}}) ==
        "config.resources.memory_mib: expected an integer, got string");
  CHECK(error_of<exec_request>({{"argv", {"a", 2}}, {"timeout_s", 1}}) ==
        "argv[1]: expected a string, got number");
  CHECK(error_of<exec_request>({{"argv", json::array()}, {"timeout_s", 1}}) ==
        "argv: must not be empty");
  CHECK(error_of<verification_outcome>({{"id", "a"}, {"ok", false}}) ==
        "failure: missing required field");
  CHECK(error_of<verification_outcome>(
          {{"id", "a"}, {"ok", true}, {"mask_sample", true}}) ==
        "mask_sample: must be the opposite of ok");
  CHECK(error_of<verification_request>(json::array()) ==
        "expected a verification_request object, got array");
}

// -- submission validation ----------------------------------------------------

TEST_CASE("confined paths") {
  CHECK(is_confined_path("a"));
  CHECK(is_confined_path("a/b.py"));
  CHECK(is_confined_path(".hidden"));
  CHECK_FALSE(is_confined_path(""));
  CHECK_FALSE(is_confined_path("/etc/passwd"));
  CHECK_FALSE(is_confined_path(".."));
  CHECK_FALSE(is_confined_path("a/../../b"));
  CHECK_FALSE(is_confined_path("a//b"));
  CHECK_FALSE(is_confined_path("a/./b"));
  CHECK_FALSE(is_confined_path("a/"));
  CHECK_FALSE(is_confined_path(std::string("a\0b", 3)));
}

TEST_CASE("paths in a sandbox: confined, or absolute with a confined rest") {
  CHECK(is_path_in_sandbox("a/b"));
  CHECK(is_path_in_sandbox("/sandbox"));
  CHECK(is_path_in_sandbox("/tmp/x/bin.dat"));
  CHECK_FALSE(is_path_in_sandbox("/"));
  CHECK_FALSE(is_path_in_sandbox(""));
  CHECK_FALSE(is_path_in_sandbox("//etc"));
  CHECK_FALSE(is_path_in_sandbox("/tmp/../etc"));
  CHECK_FALSE(is_path_in_sandbox("/tmp/"));
}

// -- files: text or {"base64": ...} -------------------------------------------

TEST_CASE("files carry bytes as base64 and text as strings") {
  std::string bytes{"\0\xff\x80"
                    "bin\xfe",
                    7};
  auto req = sample_request();
  req.files["fixture.bin"] = bytes;
  req.files["nul.txt"] = std::string{"a\0b", 3}; // valid UTF-8, with a NUL
  json j = req;
  CHECK(j["files"]["fixture.bin"] == json{{"base64", "AP+AYmlu/g=="}});
  CHECK(j["files"]["nul.txt"] == std::string{"a\0b", 3});
  CHECK(j["files"]["sandbox_runner.py"] == "print(1)");
  // It dumps (nlohmann throws on invalid UTF-8) and reads back exactly.
  auto back = json::parse(j.dump()).get<verification_request>();
  CHECK(back.files == req.files);
  CHECK(
    error_of<verification_request>({{"id", "a"},
                                    {"files", {{"x.bin", {{"base64", "AAA"}}}}},
                                    {"request", 1}}) ==
    "files.x.bin.base64: not base64: its length is not a multiple of 4");
  CHECK(
    error_of<verification_request>(
      {{"id", "a"}, {"files", {{"x.bin", {{"base64", 1}}}}}, {"request", 1}}) ==
    "files.x.bin.base64: expected a string, got number");
  CHECK(error_of<verification_request>(
          {{"id", "a"},
           {"files", {{"x.bin", {{"base64", "AA=="}, {"mode", 1}}}}},
           {"request", 1}}) ==
        "files.x.bin: expected a string (text) or {\"base64\": \"...\"} "
        "(bytes), got another object");
}

TEST_CASE("is_utf8 takes UTF-8 and nothing else") {
  CHECK(is_utf8(""));
  CHECK(is_utf8("plain"));
  CHECK(is_utf8("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80")); // é € 😀
  CHECK(is_utf8(std::string{"\0", 1}));
  CHECK_FALSE(is_utf8("\xff"));
  CHECK_FALSE(is_utf8("\xc3"));             // cut
  CHECK_FALSE(is_utf8("\xc0\xaf"));         // overlong '/'
  CHECK_FALSE(is_utf8("\xed\xa0\x80"));     // a surrogate
  CHECK_FALSE(is_utf8("\xf4\x90\x80\x80")); // past U+10FFFF
  CHECK_FALSE(is_utf8("a\x80"));
}

TEST_CASE("validate names what is wrong with a submission") {
  auto req = sample_request();
  CHECK(validate(req).empty());
  auto bad = req;
  bad.files.erase("sandbox_runner.py");
  CHECK(validate(bad) == "files: missing sandbox_runner.py");
  bad = req;
  bad.files["/etc/x"] = "";
  CHECK(validate(bad) == "files: path \"/etc/x\" escapes the sandbox");
  bad = req;
  bad.files["request.json"] = "";
  CHECK(validate(bad) == "files: \"request.json\" is reserved for the call "
                         "itself");
  bad = req;
  bad.work_dir = "../up";
  CHECK(validate(bad) == "work_dir: \"../up\" escapes the sandbox (empty or "
                         "'/', or a '.', '..' or empty component)");
  for (auto dir : {"/", "/sandbox/../etc", "//x", "/a/./b", "/a/"}) {
    bad.work_dir = dir;
    CHECK(validate(bad) == "work_dir: \"" + std::string{dir} +
                             "\" escapes the sandbox (empty or '/', or a '.', "
                             "'..' or empty component)");
  }
  // The seed's absolute work_dir: whether the sandbox can write there is
  // its provider's to say.
  for (auto dir : {"/sandbox", "/tmp/work", "/usr/x", "calls/deep"}) {
    auto ok = req;
    ok.work_dir = dir;
    CHECK(validate(ok).empty());
  }
  bad = req;
  bad.config.stop_timeout_s = 0;
  CHECK(validate(bad) ==
        "config.stop_timeout_s: must be a number of seconds in (0, 604800]");
  bad = req;
  bad.id.clear();
  CHECK(validate(bad) == "id: must not be empty");
}

// -- provider errors ----------------------------------------------------------

TEST_CASE("provider errors carry their code and message") {
  auto err = make_error(provider_errc::not_found, "result.json: no such file");
  CHECK(provider_error_code(err) ==
        static_cast<uint8_t>(provider_errc::not_found));
  CHECK(describe(err) == "result.json: no such file");
  CHECK(provider_error_code(caf::make_error(caf::sec::request_timeout)) == 0);
  CHECK(describe(caf::make_error(caf::sec::request_timeout)) ==
        "request_timeout");
}

// -- CAF serialization (what crosses nodes) -----------------------------------

TEST_CASE_METHOD(binary_fixture, "every type survives CAF serialization") {
  auto req = sample_request();
  CHECK(json(round_trip(req)) == json(req));
  auto out = sample_failure();
  CHECK(json(round_trip(out)) == json(out));
  sandbox_spec spec;
  spec.metadata = {{"nested", {{"a", {1, 2}}}}};
  CHECK(json(round_trip(spec)) == json(spec));
  exec_result res{"o", "e", 3, exec_error_type::timeout, "m", "t"};
  CHECK(json(round_trip(res)) == json(res));
  CHECK(round_trip(sandbox_status::running) == sandbox_status::running);
  supervisor_stats stats;
  stats.submitted = 7;
  CHECK(round_trip(stats).submitted == 7);
}

// -- enums off the wire -------------------------------------------------------

namespace {

/// Serializes `x` with CAF's binary serializer and loads it into `y`.
template <class T>
caf::error load_from_wire(caf::actor_system& sys, T x, T& y) {
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  REQUIRE(!sink(x));
  caf::binary_deserializer source{sys, buf};
  return source(y);
}

template <class Enum>
Enum raw(unsigned value) {
  return static_cast<Enum>(value);
}

} // namespace

TEST_CASE("is_valid knows every enumerator and nothing past them") {
  CHECK(is_valid(sandbox_status::unknown));
  CHECK_FALSE(is_valid(raw<sandbox_status>(5)));
  CHECK(is_valid(exec_error_type::sandbox));
  CHECK_FALSE(is_valid(raw<exec_error_type>(6)));
  CHECK(is_valid(failure_kind::invalid_request));
  CHECK_FALSE(is_valid(raw<failure_kind>(3)));
  CHECK(is_valid(verification_state::stop));
  CHECK_FALSE(is_valid(raw<verification_state>(9)));
  CHECK(is_valid(failure_cause::invalid_request));
  CHECK_FALSE(is_valid(raw<failure_cause>(9)));
  CHECK_FALSE(is_valid(raw<exec_error_type>(42)));
  CHECK_FALSE(is_valid(raw<exec_error_type>(255)));
}

TEST_CASE_METHOD(binary_fixture, "an exec result with an unknown error_type "
                                 "loads as a sandbox failure naming it") {
  exec_result res{"o", "e", 3, raw<exec_error_type>(42), "boom", "t"};
  exec_result got;
  REQUIRE(!load_from_wire(*sys, res, got));
  CHECK(got.error_type == exec_error_type::sandbox);
  CHECK(got.message ==
        "the provider sent an unknown exec error_type 42 (boom)");
  CHECK(got.return_code == 3);
  CHECK(got.log_tail == "t");
  exec_result fine{"o", "e", 0, exec_error_type::oom, "", ""};
  REQUIRE(!load_from_wire(*sys, fine, got));
  CHECK(got.error_type == exec_error_type::oom);
  CHECK(got.message.empty());
}

TEST_CASE_METHOD(binary_fixture, "a failure with an unknown kind, state or "
                                 "cause fails to load") {
  auto bad_kind = sample_failure();
  bad_kind.failure.kind = raw<failure_kind>(42);
  auto bad_state = sample_failure();
  bad_state.failure.state = raw<verification_state>(42);
  auto bad_cause = sample_failure();
  bad_cause.failure.cause = raw<failure_cause>(200);
  for (auto& out : {bad_kind, bad_state, bad_cause}) {
    verification_outcome got;
    CHECK(load_from_wire(*sys, out, got) == caf::sec::invalid_argument);
    verification_failure failure;
    CHECK(load_from_wire(*sys, out.failure, failure) ==
          caf::sec::invalid_argument);
  }
  verification_outcome got;
  CHECK(!load_from_wire(*sys, sample_failure(), got));
}

TEST_CASE_METHOD(binary_fixture, "a bare sandbox_status loads unchecked (no "
                                 "hook in CAF 0.17): is_valid tells") {
  sandbox_status got = sandbox_status::running;
  REQUIRE(!load_from_wire(*sys, raw<sandbox_status>(42), got));
  CHECK(static_cast<unsigned>(got) == 42);
  CHECK_FALSE(is_valid(got));
}

// -- JSON from another node ---------------------------------------------------

TEST_CASE_METHOD(binary_fixture,
                 "JSON from another node is parsed within the bounds: too "
                 "deep or a duplicate key fails to load") {
  auto load = [&](const std::string& text) {
    // What a peer would send: the value's text, as json's inspect writes.
    std::vector<char> buf;
    caf::binary_serializer sink{*sys, buf};
    auto copy = text;
    REQUIRE(!sink(copy));
    json out;
    caf::binary_deserializer source{*sys, buf};
    return std::make_pair(!source(out), out);
  };
  auto ok = load(R"({"reward": 1.0})");
  CHECK(ok.first);
  CHECK(ok.second == json{{"reward", 1.0}});
  std::string deep(100000, '[');
  deep += std::string(100000, ']');
  CHECK_FALSE(load(deep).first);
  CHECK_FALSE(load(R"({"id": "a", "id": "b"})").first);
  CHECK_FALSE(load("{} junk").first);
}
