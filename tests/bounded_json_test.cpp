// Reading untrusted JSON within limits (messages/bounded_json.hpp).

#include "messages/bounded_json.hpp"

#include <catch2/catch.hpp>
#include <string>

using namespace sv;

namespace {

std::string nested(size_t depth, const std::string& open = "[",
                   const std::string& close = "]") {
  std::string s;
  for (size_t i = 0; i < depth; ++i)
    s += open;
  for (size_t i = 0; i < depth; ++i)
    s += close;
  return s;
}

std::string parse_error(const std::string& text, json_limits limits = {}) {
  json out;
  return parse_bounded(text, out, limits);
}

std::string check_error(const std::string& text, json_limits limits = {}) {
  json_text_info info;
  return check_bounded(text, info, limits);
}

} // namespace

TEST_CASE("a document within the limits parses like nlohmann's parser") {
  auto text = R"({"a": [1, -2, 3.5, "x", true, null, {"b": {}}], "c": []})";
  json out;
  REQUIRE(parse_bounded(text, out).empty());
  CHECK(out == json::parse(text));
  json_text_info info;
  CHECK(check_bounded(text, info).empty());
  CHECK(info.is_object);
}

TEST_CASE("depth up to the limit is accepted, one more is not") {
  json_limits limits;
  limits.max_depth = 5;
  CHECK(parse_error(nested(5), limits).empty());
  CHECK(check_error(nested(5), limits).empty());
  CHECK(parse_error(nested(6), limits) ==
        "nested deeper than 5 levels at [0][0][0][0][0]");
  CHECK(check_error(nested(6), limits) ==
        "nested deeper than 5 levels at [0][0][0][0][0]");
}

TEST_CASE("a 100,000-deep document is rejected without recursing") {
  auto text = nested(100000);
  CHECK(parse_error(text).rfind("nested deeper than 256 levels", 0) == 0);
  CHECK(check_error(text).rfind("nested deeper than 256 levels", 0) == 0);
  std::string objects;
  for (int i = 0; i < 100000; ++i)
    objects += "{\"a\":";
  CHECK(parse_error(objects).rfind("nested deeper than 256 levels at a.a.a",
                                   0) == 0);
}

TEST_CASE("the path of a depth error names keys and indexes") {
  json_limits limits;
  limits.max_depth = 3;
  CHECK(parse_error(R"({"request": [1, {"x": [[]]}]})", limits) ==
        "nested deeper than 3 levels at request[1].x");
}

TEST_CASE("duplicate keys are refused, naming the key and where") {
  CHECK(parse_error(R"({"id": "a", "id": "b"})") == "duplicate key \"id\"");
  CHECK(check_error(R"({"id": "a", "id": "b"})") == "duplicate key \"id\"");
  CHECK(parse_error(R"({"a": {"k": 1, "k": 2}})") ==
        "duplicate key \"k\" at a");
  CHECK(check_error(R"([{}, {"k": 1, "k": 2}])") ==
        "duplicate key \"k\" at [1]");
  // The same key in sibling objects is fine.
  CHECK(parse_error(R"([{"k": 1}, {"k": 2}])").empty());
  CHECK(check_error(R"([{"k": 1}, {"k": 2}])").empty());
}

TEST_CASE("bytes after the value are refused, a NUL byte too") {
  CHECK_FALSE(parse_error(R"({"a": 1} x)").empty());
  CHECK_FALSE(check_error(R"({"a": 1} {})").empty());
  std::string nul = std::string{R"({"a": 1})"} + '\0' + "junk";
  CHECK(parse_error(nul) ==
        "a NUL byte at offset 8 (JSON text must not contain one)");
  CHECK(check_error(nul) ==
        "a NUL byte at offset 8 (JSON text must not contain one)");
  CHECK(parse_error("{\"a\": 1}  \n").empty());
}

TEST_CASE("a text over the size limit is refused before parsing") {
  json_limits limits;
  limits.max_bytes = 4;
  CHECK(parse_error("[1,2]", limits) ==
        "the JSON text is 5 bytes, more than the limit of 4");
}

TEST_CASE("error messages quote at most a few hundred bytes") {
  std::string huge = "[1e" + std::string(5000, '9') + "]";
  auto err = parse_error(huge);
  CHECK_FALSE(err.empty());
  CHECK(err.size() < 400);
  std::string key(5000, 'k');
  err = parse_error("{\"" + key + "\": 1, \"" + key + "\": 2}");
  CHECK(err.rfind("duplicate key \"kkk", 0) == 0);
  CHECK(err.size() < 300);
}

TEST_CASE("the validation pass finds the top-level reward") {
  json_text_info info;
  REQUIRE(
    check_bounded(R"({"x": {"reward": 3}, "reward": 0.5})", info).empty());
  CHECK(info.is_object);
  REQUIRE(info.reward);
  CHECK(*info.reward == 0.5);
  REQUIRE(check_bounded("[1]", info).empty());
  CHECK_FALSE(info.is_object);
  CHECK_FALSE(info.reward);
}

TEST_CASE("minify drops whitespace outside strings only") {
  auto out = minify_json_text("{ \"a b\" :\n [1, \"x \\\" y\" ] }\n");
  CHECK(std::string(out.begin(), out.end()) == R"({"a b":[1,"x \" y"]})");
}

TEST_CASE("a text value carries its compact text and reward") {
  auto text = minify_json_text(R"({"reward": 1, "big": [1, 2]})");
  auto value = make_json_text_value(text, 1.0);
  auto got = json_text_of(value);
  REQUIRE(got != nullptr);
  CHECK(*got == text);
  CHECK(value["reward"] == 1.0);
  CHECK(json_text_of(json::parse(R"({"sv.json_text": "x"})")) == nullptr);
  CHECK(json_text_of(json(nullptr)) == nullptr);
}

TEST_CASE("truncate_for_message keeps short text and notes what it cut") {
  CHECK(truncate_for_message("abc", 5) == "abc");
  CHECK(truncate_for_message("abcdefgh", 5) == "abcde... (3 more bytes)");
}

TEST_CASE("a document of more values than the limit is refused while built") {
  json_limits limits;
  limits.max_values = 4;
  // [[],[],[]]: the array and its three: 4 values.
  CHECK(parse_error("[[],[],[]]", limits).empty());
  CHECK(parse_error("[[],[],[],[]]", limits) ==
        "more than 4 values in one document at [3]");
  // An object member counts as well as its value.
  CHECK(parse_error(R"({"a": 1, "b": 2})", limits) ==
        "more than 4 values in one document at b");
  // The validation pass builds nothing and does not count.
  CHECK(check_error("[[],[],[],[],[],[]]", limits).empty());
  // The default: a million, [[],[],...] of a million and one is refused.
  std::string many = "[";
  for (size_t i = 0; i < default_max_json_values; ++i)
    many += i ? ",0" : "0";
  many += "]";
  CHECK(parse_error(many).rfind("more than 1000000 values in one document "
                                "at [999999]",
                                0) == 0);
}
