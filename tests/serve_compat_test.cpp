// sv-serve's compatible front doors without sockets or actors
// (docs/compat.md): base64, the language table, SandboxFusion's /run_code
// request and its status rules, NeMo-Skills' /execute, the built-in
// runner's request, and which routes are open to whom.

#include "apps/sv_serve/base64.hpp"
#include "apps/sv_serve/execute.hpp"
#include "apps/sv_serve/languages.hpp"
#include "apps/sv_serve/open_routes.hpp"
#include "apps/sv_serve/run_code.hpp"
#include "apps/sv_serve/runner_job.hpp"
#include "messages/json.hpp"

#include <catch2/catch.hpp>
#include <stdexcept>
#include <string>

using namespace sv;
using namespace sv::serve;

namespace {

json body_of(const sandbox_reply& r) {
  return json::parse(r.body);
}

/// An `ok` outcome whose result.json is `result`.
verification_outcome answered(json result) {
  verification_outcome out;
  out.ok = true;
  out.result = std::move(result);
  return out;
}

json command(const char* status, json code, const char* out = "",
             const char* err = "") {
  return json{{"status", status},
              {"execution_time", 0.5},
              {"return_code", code},
              {"stdout", out},
              {"stderr", err}};
}

json ran(json compile, json run) {
  return json{{"compile_result", std::move(compile)},
              {"run_result", std::move(run)},
              {"files", json::object()}};
}

verification_outcome failed(failure_kind kind, failure_cause cause) {
  verification_outcome out;
  out.failure.kind = kind;
  out.failure.state = verification_state::create;
  out.failure.cause = cause;
  out.failure.message = "it broke";
  return out;
}

/// A /run_code call of `lang` read from `body`; REQUIREs that it is valid.
runner_call run_code_call(compat_settings& settings, json body) {
  runner_call call;
  auto refusal = read_run_code(body, settings, call);
  INFO((refusal ? refusal->body : std::string{}));
  REQUIRE(!refusal);
  return call;
}

std::string refusal_of(compat_settings& settings, json body) {
  runner_call call;
  auto refusal = read_run_code(body, settings, call);
  REQUIRE(refusal);
  CHECK(refusal->status == 400);
  auto j = body_of(*refusal);
  CHECK(j["status"] == "SandboxError");
  return j["message"].get<std::string>();
}

} // namespace

// -- base64 -------------------------------------------------------------------

TEST_CASE("base64 round-trips every byte at every length") {
  for (size_t n = 0; n < 300; n += 7) {
    std::string bytes;
    for (size_t i = 0; i < n; ++i)
      bytes += static_cast<char>((i * 37 + n) & 0xff);
    std::string back, why;
    REQUIRE(base64_decode(base64_encode(bytes), back, why));
    CHECK(back == bytes);
  }
  CHECK(base64_encode("foobar") == "Zm9vYmFy");
  CHECK(base64_encode("f") == "Zg==");
  CHECK(base64_encode("fo") == "Zm8=");
}

TEST_CASE("base64 skips line breaks and refuses anything else, saying why") {
  std::string out, why;
  CHECK(base64_decode("Zm9v\r\nYmFy\n", out, why));
  CHECK(out == "foobar");
  CHECK_FALSE(base64_decode("Zg=", out, why));
  CHECK(why == "its length is not a multiple of 4");
  CHECK_FALSE(base64_decode("Z===", out, why));
  CHECK(why == "misplaced '=' at offset 1");
  CHECK_FALSE(base64_decode("Zg==Zg==", out, why));
  CHECK(why == "data after the padding at offset 4");
  CHECK_FALSE(base64_decode("Zg=a", out, why));
  CHECK(why == "data after the padding at offset 3");
  CHECK_FALSE(base64_decode("Zm9v YmFy", out, why));
  CHECK(why == "a character outside the base64 alphabet at offset 4");
}

// -- the language table
// ---------------------------------------------------------

TEST_CASE("the shipped languages are SandboxFusion's main ones and C") {
  auto t = language_table::defaults();
  CHECK(t.names() == std::vector<std::string>{"bash", "c", "cpp", "go", "java",
                                              "nodejs", "python", "rust"});
  CHECK(t.find("cpp")->source == "main.cpp");
  CHECK(t.find("python")->run.front() == "{python}");
  // What the probe looks for: neither the runner's interpreter nor what the
  // compile makes.
  CHECK(t.programs("") == std::vector<std::string>{"bash", "g++", "gcc", "go",
                                                   "java", "javac", "node",
                                                   "rustc"});
  CHECK_FALSE(t.state("cpp").known);
}

TEST_CASE("a config adds, replaces and removes languages, and its errors "
          "name the field") {
  auto t = language_table::defaults();
  t.merge(json::parse(R"({"go": null, "lua": {"source": "main.lua",
    "run": ["lua5.4", "main.lua"], "env": {"LUA_PATH": "./?.lua"}}})"));
  CHECK(t.find("go") == nullptr);
  REQUIRE(t.find("lua") != nullptr);
  CHECK(t.find("lua")->env.at("LUA_PATH") == "./?.lua");
  auto error_of = [&](const char* text) {
    try {
      t.merge(json::parse(text));
    } catch (const json_error& e) {
      return std::string{e.what()};
    }
    return std::string{"no error"};
  };
  CHECK(error_of(R"({"x": {"source": "a", "runn": ["a"]}})") ==
        "languages.x.runn: unknown key in language (allowed: source, "
        "compile, run, image, env)");
  CHECK(error_of(R"({"x": {"source": "a"}})") ==
        "languages.x.run: missing (the command that runs the code)");
  CHECK(error_of(R"({"x": {"source": "a", "run": []}})") ==
        "languages.x.run: must name a program");
  CHECK(error_of(R"({"x": {"source": "../a", "run": ["a"]}})")
          .rfind("languages.x.source:", 0) == 0);
  CHECK(error_of(R"({"x": {"source": "result.json", "run": ["a"]}})")
          .rfind("languages.x.source:", 0) == 0);
  CHECK(error_of(R"({"a b": {"source": "a", "run": ["a"]}})")
          .rfind("languages.a b:", 0) == 0);
  CHECK(error_of(R"({"x": {"source": "a", "run": ["a"],
                  "env": {"LD_PRELOAD": "x"}}})")
          .rfind("languages.x.env.LD_PRELOAD:", 0) == 0);
}

TEST_CASE("the probe marks a language whose program is missing, naming it") {
  auto t = language_table::defaults();
  t.apply_probe("", json{{"g++", "/usr/bin/g++"}, {"gcc", nullptr}});
  CHECK(t.state("cpp").known);
  CHECK(t.state("cpp").available);
  CHECK_FALSE(t.state("c").available);
  CHECK(t.state("c").reason == "its toolchain is missing here: program "
                               "\"gcc\" not found in the sandbox");
  CHECK(t.state("python").available); // needs nothing but the runner's own
  auto listed = t.describe()["languages"];
  CHECK(listed[1]["name"] == "c");
  CHECK(listed[1]["available"] == false);
  t.probe_failed("", "provider_unavailable in create (error): down");
  CHECK_FALSE(t.state("c").known);
  CHECK(t.state("c").available);
}

// -- /run_code
// ------------------------------------------------------------------

TEST_CASE("a /run_code body becomes a call of the built-in runner") {
  compat_settings settings;
  auto call = run_code_call(settings, json::parse(R"js({
    "code": "print(1)", "language": "python", "compile_timeout": 3,
    "run_timeout": 2.5, "memory_limit_MB": 512, "stdin": "x",
    "files": {"d/a.bin": "AAEC", "gone": null}, "fetch_files": ["out"]
})js"));
  CHECK(call.lang->name == "python");
  CHECK(call.run_timeout_s == 2.5);
  CHECK(call.memory_mib == 512);
  CHECK(call.stdin_text == std::optional<std::string>{"x"});
  CHECK(call.files == file_map{{"d/a.bin", std::string{"\0\1\2", 3}}});
  CHECK(call.fetch_files == std::vector<std::string>{"out"});
  auto req = make_runner_request(call, settings);
  CHECK(req.files.at("main.py") == "print(1)");
  CHECK(req.files.at("sandbox_runner.py") == std::string{runner_source()});
  CHECK(req.files.at("d/a.bin").size() == 3);
  CHECK(req.config.resources.memory_mib == 512);
  CHECK(req.request["compile"].is_null()); // python compiles nothing
  CHECK(req.request["stdin"] == "x");
  CHECK(req.exec_timeout_s == 2.5 + settings.runner_margin_s);
  auto defaults = run_code_call(settings, json{{"code", "int main(){}"},
                                               {"language", "cpp"},
                                               {"memory_limit_MB", -1},
                                               {"stdin", nullptr}});
  CHECK(defaults.compile_timeout_s == 10);
  CHECK(defaults.run_timeout_s == 10);
  CHECK(defaults.memory_mib == 0);
  CHECK_FALSE(defaults.stdin_text);
  CHECK(make_runner_request(defaults, settings).exec_timeout_s ==
        20 + settings.runner_margin_s);
}

TEST_CASE("a /run_code body that breaks the contract is refused naming the "
          "field") {
  compat_settings settings;
  settings.languages.apply_probe("", json{{"go", nullptr}});
  CHECK(refusal_of(settings, json{{"language", "python"}}) ==
        "code: required, a string");
  CHECK(refusal_of(settings, json{{"code", "1"}, {"language", "go"}}) ==
        "language: \"go\": its toolchain is missing here: program \"go\" "
        "not found in the sandbox");
  CHECK(refusal_of(settings, json{{"code", "1"}, {"language", "cobol"}})
          .rfind("language: \"cobol\" is not served here (served: bash, c,",
                 0) == 0);
  CHECK(refusal_of(
          settings,
          json{{"code", "1"}, {"language", "python"}, {"run_timeout", 7200}}) ==
        "run_timeout: expected seconds in (0, 3600.0]");
  CHECK(refusal_of(
          settings,
          json{{"code", "1"}, {"language", "python"}, {"memory_limit_MB", 1.5}})
          .rfind("memory_limit_MB:", 0) == 0);
  CHECK(refusal_of(settings, json{{"code", "1"},
                                  {"language", "python"},
                                  {"files", {{"a", "Zg="}}}}) ==
        "files.a: not base64: its length is not a multiple of 4");
  CHECK(refusal_of(settings, json{{"code", "1"},
                                  {"language", "python"},
                                  {"files", {{"main.py", "Zg=="}}}}) ==
        "files.main.py: is the source file of language python");
  CHECK(refusal_of(settings, json{{"code", "1"},
                                  {"language", "python"},
                                  {"fetch_files", {"../etc"}}})
          .rfind("fetch_files[0]: must be a relative path", 0) == 0);
  CHECK(refusal_of(settings,
                   json{{"code", "1"}, {"language", "python"}, {"lang", 1}})
          .rfind("lang: unknown key in run_code request", 0) == 0);
}

TEST_CASE("/run_code's status rules are SandboxFusion's") {
  compat_settings settings;
  auto call = run_code_call(settings, json{{"code", "x"}, {"language", "c"}});
  auto reply = [&](verification_outcome out) {
    return run_code_reply(out, call, settings.languages);
  };
  auto ok = reply(
    answered(ran(command("Finished", 0), command("Finished", 0, "42\n"))));
  CHECK(ok.status == 200);
  CHECK(ok.body.rfind(R"({"status":"Success","message":"","compile_result":)",
                      0) == 0);
  CHECK(body_of(ok)["run_result"]["stdout"] == "42\n");
  CHECK(body_of(ok)["executor_pod_name"].is_null());
  // A nodes provider names the node that ran it: SandboxFusion's
  // executor_pod_name.
  auto on_node =
    answered(ran(command("Finished", 0), command("Finished", 0, "42\n")));
  on_node.node = "node-2";
  CHECK(body_of(reply(on_node))["executor_pod_name"] == "node-2");
  auto tle = reply(answered(
    ran(command("Finished", 0), command("TimeLimitExceeded", nullptr))));
  CHECK(tle.status == 200);
  CHECK(body_of(tle)["status"] == "Failed");
  auto crash = reply(answered(ran(nullptr, command("Finished", -11))));
  CHECK(body_of(crash)["status"] == "Failed");
  auto compile = reply(answered(ran(command("Finished", 1), nullptr)));
  CHECK(body_of(compile)["status"] == "Failed");
  CHECK(body_of(compile)["run_result"].is_null());
  auto error = reply(
    answered(ran(nullptr, command("Error", nullptr, "", "cannot run ./main"))));
  CHECK(error.status == 504);
  CHECK(body_of(error)["status"] == "SandboxError");
  CHECK(body_of(error)["message"] == "cannot run ./main");
  CHECK(body_of(error)["mask_sample"] == true);
}

TEST_CASE("/run_code: infrastructure failures are 504 and masked, a bad "
          "request 400") {
  compat_settings settings;
  auto call = run_code_call(settings, json{{"code", "x"}, {"language", "c"}});
  auto reply = [&](verification_outcome out) {
    return run_code_reply(out, call, settings.languages);
  };
  auto down =
    reply(failed(failure_kind::provider_unavailable, failure_cause::timeout));
  CHECK(down.status == 504);
  CHECK(body_of(down)["message"] ==
        "sandbox error (provider_unavailable in create (timeout): it "
        "broke); the call may be retried");
  CHECK(body_of(down)["failure_kind"] == "provider_unavailable");
  CHECK(down.headers.empty());
  auto busy = reply(
    failed(failure_kind::provider_unavailable, failure_cause::overloaded));
  CHECK(busy.status == 504);
  CHECK(busy.headers ==
        std::vector<std::pair<std::string, std::string>>{{"Retry-After", "1"}});
  auto runner =
    reply(failed(failure_kind::verifier_error, failure_cause::invalid_result));
  CHECK(runner.status == 504);
  auto invalid = reply(
    failed(failure_kind::invalid_request, failure_cause::invalid_request));
  CHECK(invalid.status == 400);
  auto garbage = reply(answered(json{{"run_result", 5}}));
  CHECK(garbage.status == 504);
  CHECK(body_of(garbage)["failure_kind"] == "verifier_error");
  auto missing = reply(answered(json{{"missing_program", "gcc"}}));
  CHECK(missing.status == 400);
  CHECK(body_of(missing)["message"] ==
        "language: \"c\": its toolchain is missing here: program \"gcc\" "
        "not found in the sandbox");
  CHECK_FALSE(settings.languages.state("c").available);
}

// -- /execute
// -------------------------------------------------------------------

TEST_CASE("/execute answers as NeMo-Skills' sandbox does") {
  compat_settings settings;
  auto read = [&](json body) {
    execute_call call;
    auto refusal = read_execute(body, false, settings, call);
    INFO((refusal ? refusal->body : std::string{}));
    REQUIRE(!refusal);
    return call;
  };
  auto py = read(json{{"generated_code", "x"},
                      {"language", "python3"},
                      {"timeout", 1.0},
                      {"max_output_characters", 3}});
  CHECK(py.call.lang->name == "python");
  CHECK(py.call.stdin_text == std::optional<std::string>{""});
  auto reply = [&](const execute_call& c, json result) {
    return body_of(
      execute_reply(answered(std::move(result)), c, settings.languages));
  };
  CHECK(reply(py, ran(nullptr, command("Finished", 1, "abcdef", "é"))) ==
        json{{"process_status", "completed"},
             {"stdout", "abc<output cut>"},
             {"stderr", "é"}});
  CHECK(reply(py, ran(nullptr, command("TimeLimitExceeded", nullptr))) ==
        json{{"process_status", "timeout"},
             {"stdout", ""},
             {"stderr", "Execution timed out after 1.0 seconds\n"}});
  auto sh =
    read(json{{"generated_code", "x"}, {"language", "shell"}, {"timeout", 2}});
  CHECK(sh.call.lang->name == "bash");
  CHECK(reply(sh, ran(nullptr, command("Finished", 2)))["process_status"] ==
        "error");
  CHECK(
    reply(sh, ran(nullptr, command("TimeLimitExceeded", nullptr)))["stderr"] ==
    "Execution timed out after 2 seconds\n");
  auto down = execute_reply(
    failed(failure_kind::provider_unavailable, failure_cause::error), sh,
    settings.languages);
  CHECK(down.status == 504);
  CHECK(body_of(down)["process_status"] == "error");
  CHECK(body_of(down)["mask_sample"] == true);
}

TEST_CASE("/execute refuses what it cannot honour, naming it") {
  compat_settings settings;
  auto refusal = [&](json body, bool session = false) {
    execute_call call;
    auto r = read_execute(body, session, settings, call);
    REQUIRE(r);
    CHECK(r->status == 400);
    return body_of(*r)["error"].get<std::string>();
  };
  json base{{"generated_code", "1"}, {"timeout", 5}, {"language", "python"}};
  CHECK(refusal(json{{"generated_code", "1"}, {"timeout", 5}})
          .rfind("language: \"ipython\"", 0) == 0);
  CHECK(refusal(base, true).rfind("X-Session-ID:", 0) == 0);
  auto verbose = base;
  verbose["traceback_verbosity"] = "Verbose";
  CHECK(refusal(verbose).rfind("traceback_verbosity:", 0) == 0);
  auto no_timeout = base;
  no_timeout.erase("timeout");
  CHECK(refusal(no_timeout) == "timeout: required, seconds");
  CHECK(cut_output("ééé", 2) == "éé<output cut>");
  CHECK(cut_output("ééé", 3) == "ééé");
  CHECK(cut_output("a", 0) == "<output cut>");
}

// -- open routes
// ----------------------------------------------------------------

TEST_CASE("open routes: loopback always, listed networks too, nothing else") {
  open_routes none;
  CHECK(none.none());
  CHECK_FALSE(none.open_to("/run_code", "127.0.0.1"));
  open_routes open{"run_code", "10.0.0.0/8, 2001:db8::/32"};
  CHECK(open.open_to("/run_code", "127.0.0.1"));
  CHECK(open.open_to("/run_code", "127.1.2.3"));
  CHECK(open.open_to("/run_code", "::1"));
  CHECK(open.open_to("/run_code", "::ffff:10.1.2.3"));
  CHECK(open.open_to("/v1/languages", "10.255.0.1"));
  CHECK(open.open_to("/run_code", "2001:db8::5"));
  CHECK_FALSE(open.open_to("/run_code", "11.0.0.1"));
  CHECK_FALSE(open.open_to("/execute", "127.0.0.1")); // not declared
  CHECK_FALSE(open.open_to("/v1/verify", "127.0.0.1"));
  CHECK_FALSE(open.open_to("/run_code", "not an address"));
  CHECK(open.describe() == "/run_code, /v1/languages served WITHOUT a token "
                           "to 127.0.0.0/8, ::1/128, 10.0.0.0/8, "
                           "2001:db8::/32");
  auto error_of = [](const char* routes, const char* nets) {
    try {
      open_routes{routes, nets};
    } catch (const std::invalid_argument& e) {
      return std::string{e.what()};
    }
    return std::string{"no error"};
  };
  CHECK(error_of("run_code,sandboxes", "") ==
        "--open-routes run_code,sandboxes: unknown route \"sandboxes\" "
        "(allowed: run_code, execute)");
  CHECK(error_of("execute", "10.0.0.0/33") ==
        "--open-from 10.0.0.0/33: the prefix length must be 0 to 32");
  CHECK(error_of("", "10.0.0.0/8") == "--open-from needs --open-routes");
}
