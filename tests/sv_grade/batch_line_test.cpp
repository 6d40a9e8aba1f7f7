// The batch format of sv-grade, line by line (DESIGN.md: a contract).

#include "apps/sv_grade/batch_line.hpp"
#include "messages/json.hpp"

#include <catch2/catch.hpp>

using namespace sv;
using namespace sv::grade;

namespace {

const char* good_line = R"({"id": "t#1", "files": {"sandbox_runner.py": "x"},)"
                        R"( "request": {"a": 1}})";

/// The output line of a rejected input line, parsed back.
json rejected_output(const std::string& text, uint64_t line_no = 7) {
  auto parsed = parse_batch_line(text, line_no);
  REQUIRE_FALSE(parsed.ok);
  return json::parse(render_output_line(parsed.rejected));
}

std::string message_of(const std::string& text) {
  return rejected_output(text)["failure"]["message"].get<std::string>();
}

} // namespace

TEST_CASE("a good line becomes a request with defaults") {
  auto parsed = parse_batch_line(good_line, 1);
  REQUIRE(parsed.ok);
  CHECK(parsed.request.id == "t#1");
  CHECK(parsed.request.files.at("sandbox_runner.py") == "x");
  CHECK(parsed.request.request == json{{"a", 1}});
  CHECK(parsed.request.work_dir == "calls");
  CHECK(parsed.request.exec_timeout_s == 30);
}

TEST_CASE("a trailing carriage return is ignored") {
  CHECK(parse_batch_line(std::string{good_line} + "\r", 1).ok);
}

TEST_CASE("the default work_dir applies only to lines that set none") {
  auto parsed = parse_batch_line(good_line, 1, "mine");
  REQUIRE(parsed.ok);
  CHECK(parsed.request.work_dir == "mine");
  std::string own = R"({"id": "t", "files": {"sandbox_runner.py": ""},)"
                    R"( "request": {}, "work_dir": "theirs"})";
  parsed = parse_batch_line(own, 1, "mine");
  REQUIRE(parsed.ok);
  CHECK(parsed.request.work_dir == "theirs");
}

TEST_CASE("a rejected line is an invalid_request output line") {
  auto out = rejected_output("not json", 7);
  CHECK(out["id"].is_null());
  CHECK(out["ok"] == false);
  CHECK(out["mask_sample"] == true);
  CHECK(out["result"].is_null());
  CHECK(out["line"] == 7);
  CHECK(out["failure"]["failure_kind"] == "invalid_request");
  CHECK(out["failure"]["state"] == "validate");
  CHECK(out["failure"]["cause"] == "invalid_request");
  CHECK(out["timings_ms"].is_object());
  auto msg = out["failure"]["message"].get<std::string>();
  CHECK(msg.rfind("line 7: not valid JSON: ", 0) == 0);
  CHECK(msg.find("json.exception") == std::string::npos);
}

TEST_CASE("an empty line is rejected, not skipped") {
  CHECK(message_of("") == "line 7: empty line (expected a JSON object)");
  CHECK(message_of("  \r") == "line 7: empty line (expected a JSON object)");
}

TEST_CASE("a line that is not an object is rejected") {
  CHECK(message_of("[1, 2]").rfind("line 7: expected a", 0) == 0);
}

TEST_CASE("missing required fields are named") {
  CHECK(message_of(R"({"files": {"sandbox_runner.py": ""}, "request": {}})") ==
        "line 7: id: missing required field");
  CHECK(message_of(R"({"id": "a", "request": {}})") ==
        "line 7: files: missing required field");
  CHECK(message_of(R"({"id": "a", "files": {"sandbox_runner.py": ""}})") ==
        "line 7: request: missing required field");
}

TEST_CASE("the id of a rejected line is kept when it can be read") {
  auto out = rejected_output(R"({"id": "a", "request": {}})");
  CHECK(out["id"] == "a");
  out = rejected_output(R"({"id": 5, "request": {}})");
  CHECK(out["id"].is_null());
  CHECK(out["failure"]["message"] ==
        "line 7: id: expected a string, got number");
}

TEST_CASE("validation failures name the field") {
  CHECK(message_of(R"({"id": "a", "files": {"h.py": ""}, "request": {}})") ==
        "line 7: files: missing sandbox_runner.py");
  auto msg = message_of(R"({"id": "a", "request": {},)"
                        R"( "files": {"sandbox_runner.py": "", "../x": ""}})");
  CHECK(msg == "line 7: files: path \"../x\" escapes the sandbox");
  // An absolute work_dir is the seed's form (its provider says whether it
  // can write there); one that climbs out is refused at the line.
  msg = message_of(R"({"id": "a", "request": {}, "work_dir": "/tmp/../etc",)"
                   R"( "files": {"sandbox_runner.py": ""}})");
  CHECK(msg.rfind("line 7: work_dir: \"/tmp/../etc\" escapes the sandbox", 0) ==
        0);
}

TEST_CASE("unknown keys and wrong types are named") {
  auto msg = message_of(std::string{good_line}.insert(1, R"("bogus": 1, )"));
  CHECK(msg.rfind("line 7: bogus: unknown key", 0) == 0);
  msg =
    message_of(std::string{good_line}.insert(1, R"("exec_timeout_s": "3", )"));
  CHECK(msg == "line 7: exec_timeout_s: expected a number, got string");
  msg = message_of(
    std::string{good_line}.insert(1, R"("config": {"python": 3}, )"));
  CHECK(msg == "line 7: config.python: expected a string, got number");
}

TEST_CASE("a graded outcome renders with its line number") {
  batch_entry entry;
  entry.line = 3;
  entry.outcome.id = "x";
  entry.outcome.ok = true;
  entry.outcome.result = json{{"reward", 1.0}};
  entry.outcome.timings.exec = 5;
  entry.outcome.timings.total = 6;
  auto out = json::parse(render_output_line(entry));
  CHECK(out == json{{"id", "x"},
                    {"ok", true},
                    {"mask_sample", false},
                    {"result", {{"reward", 1.0}}},
                    {"failure", nullptr},
                    {"timings_ms", {{"exec", 5.0}, {"total", 6.0}}},
                    {"attempts", 1},
                    {"line", 3}});
  // A retried verification on a node says so (DESIGN.md, batch format).
  entry.outcome.attempts = 2;
  entry.outcome.node = "127.0.0.1:7101";
  auto line = render_output_line(entry);
  CHECK(line.find(R"("attempts":2,"node":"127.0.0.1:7101","line":3})") !=
        std::string::npos);
}

TEST_CASE("hostile lines are invalid_request, naming what is wrong") {
  std::string deep;
  for (int i = 0; i < 75000; ++i)
    deep += "[";
  auto line = std::string{good_line}.insert(1, "\"x\": " + deep);
  CHECK(message_of(line).rfind(
          "line 7: not valid JSON: nested deeper than 256 levels at x", 0) ==
        0);
  CHECK(message_of(R"({"id": "a", "id": "b"})") ==
        "line 7: not valid JSON: duplicate key \"id\"");
  CHECK(message_of(std::string{good_line} + std::string(1, '\0') + "junk") ==
        "line 7: not valid JSON: a NUL byte at offset 71 (JSON text must "
        "not contain one)");
  json_limits limits;
  limits.max_depth = 2;
  auto parsed = parse_batch_line(good_line, 1, "", limits);
  CHECK(parsed.ok);
  limits.max_depth = 1;
  CHECK_FALSE(parse_batch_line(good_line, 1, "", limits).ok);
}

TEST_CASE("a small result becomes a DOM, a large one stays compact text") {
  json result;
  std::string error;
  CHECK(parse_result_text(R"({"reward": 1.0})", result, error));
  CHECK(result == json{{"reward", 1.0}});
  std::string big = "{\"reward\": 0.5, \"xs\": [";
  for (int i = 0; i < 1000; ++i)
    big += "1, ";
  big += "1]}\n";
  REQUIRE(parse_result_text(big, result, error, {}, 100));
  REQUIRE(json_text_of(result) != nullptr);
  CHECK(result["reward"] == 0.5);
  batch_entry entry;
  entry.outcome.ok = true;
  entry.outcome.result = result;
  auto out = json::parse(render_output_line(entry));
  CHECK(out["result"] == json::parse(big));
}

TEST_CASE("a deep, duplicate-keyed or non-object result is rejected") {
  json result;
  std::string error;
  std::string deep(100000, '[');
  for (size_t dom_max : {size_t{1} << 20, size_t{10}}) {
    CHECK_FALSE(parse_result_text(deep, result, error, {}, dom_max));
    CHECK(error.rfind("nested deeper than 256 levels", 0) == 0);
    CHECK_FALSE(
      parse_result_text(R"({"a": 1, "a": 2})", result, error, {}, dom_max));
    CHECK(error == "duplicate key \"a\"");
    CHECK_FALSE(
      parse_result_text("[1, 2, 3, 4, 5]", result, error, {}, dom_max));
    CHECK(error.rfind("expected a JSON object", 0) == 0);
  }
}

TEST_CASE("invalid UTF-8 in an outcome does not break the line") {
  batch_entry entry;
  entry.outcome = make_failed_outcome("x", failure_kind::verifier_error,
                                      verification_state::exec,
                                      failure_cause::error, "bad \xff byte");
  auto text = render_output_line(entry);
  CHECK(json::parse(text)["failure"]["failure_kind"] == "verifier_error");
}

TEST_CASE("the reply timeout sums the state deadlines plus a margin") {
  verification_request req;
  req.exec_timeout_s = 30;
  req.config.ready_timeout_s = 1;
  req.config.upload_timeout_s = 2;
  req.config.exec_grace_s = 3;
  req.config.download_timeout_s = 4;
  req.config.stop_timeout_s = 5.5;
  CHECK(reply_timeout(req, std::chrono::seconds{10}) ==
        std::chrono::milliseconds{55500});
}

TEST_CASE("request errors are invalid_request naming the field") {
  auto with = [](const char* field) {
    return message_of(std::string{good_line}.insert(1, field));
  };
  CHECK(with(R"("config": {"env": {"A=B": "1"}}, )") ==
        "line 7: config.env: \"A=B\" is not a variable name (empty, or has "
        "'=' or a NUL byte)");
  CHECK(with(R"("exec_timeout_s": 1e-320, )") ==
        "line 7: exec_timeout_s: must be at least 0.001 s (1 ms)");
  CHECK(with(R"("exec_timeout_s": 604800, )") ==
        "line 7: exec_timeout_s: with config.ready_timeout_s and the 300 s "
        "margin, the sandbox TTL would exceed 604800 s");
  CHECK(parse_batch_line(std::string{good_line}.insert(
                           1, R"("exec_timeout_s": 604000, )"
                              R"("config": {"ready_timeout_s": 1}, )"),
                         7)
          .ok);
  auto files = [](const std::string& extra) {
    return message_of(R"({"id": "t", "request": {}, "files": {)"
                      R"("sandbox_runner.py": "", )" +
                      extra + "}}");
  };
  CHECK(files("\"" + std::string(300, 'x') + "\": \"\"") ==
        "line 7: files: path \"" + std::string(200, 'x') +
          "... (100 more bytes)\" has a component of 300 bytes (at most 255)");
  CHECK(files(R"("a": "", "a/b/c": "")") ==
        "line 7: files: \"a\" is a file and also the directory of \"a/b/c\"");
  CHECK(parse_batch_line(R"({"id": "t", "request": {}, "files": {)"
                         R"("sandbox_runner.py": "", "a/b": "", "a/c": ""}})",
                         7)
          .ok);
}
