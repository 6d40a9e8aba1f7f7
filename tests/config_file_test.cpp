// Provider config files in YAML and JSON (messages/config_file.hpp): both
// shapes NeMo Gym users write, and every malformed document refused with
// its line and column.

#include "messages/config_file.hpp"
#include "providers/factory.hpp"

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

using namespace sv;

namespace {

/// The message `parse_yaml_config(text)` throws, or "" when it parses.
std::string yaml_error(const std::string& text,
                       const yaml_limits& limits = {}) {
  try {
    parse_yaml_config(text, limits);
  } catch (const config_error& e) {
    return e.what();
  }
  return "";
}

/// A file in a directory of its own, removed at the end of the test.
struct temp_file {
  std::filesystem::path dir;
  std::string path;

  temp_file(const std::string& name, const std::string& text) {
    char tmpl[] = "/tmp/sv-config-test-XXXXXX";
    dir = ::mkdtemp(tmpl);
    path = (dir / name).string();
    std::ofstream{path} << text;
  }

  ~temp_file() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

const std::vector<std::string> providers = provider_names();

} // namespace

TEST_CASE("yaml: scalars are typed by the core schema") {
  auto doc = parse_yaml_config("a: 1\n"
                               "b: -2.5\n"
                               "c: true\n"
                               "d: ~\n"
                               "e: yes\n"
                               "f: \"1\"\n"
                               "g: 0x1f\n"
                               "h: [x, 'y', 3]\n"
                               "i: {}\n"
                               "j: !!str 12\n"
                               "k: 1e3\n")
               .value;
  CHECK(doc == json::parse(R"({"a": 1, "b": -2.5, "c": true, "d": null,
    "e": "yes", "f": "1", "g": 31, "h": ["x", "y", 3], "i": {}, "j": "12",
    "k": 1000.0})"));
  CHECK(doc["a"].is_number_integer());
  CHECK(doc["k"].is_number_float());
}

TEST_CASE("yaml: positions are recorded by path") {
  auto doc = parse_yaml_config("sandbox:\n"
                               "  local:\n"
                               "    limits: [1, 2]\n");
  CHECK(doc.locate("sandbox.local") == "line 2, column 3");
  CHECK(doc.locate("sandbox.local.limits") == "line 3, column 5");
  CHECK(doc.locate("sandbox.local.limits[1]") == "line 3, column 17");
  // An unknown path is placed at its nearest known parent.
  CHECK(doc.locate("sandbox.local.nosuch") == "line 2, column 3");
}

TEST_CASE("yaml: duplicate keys are refused with both places") {
  CHECK(yaml_error("local: {}\ndefault_metadata: {}\nlocal: {}\n") ==
        "line 3, column 1: duplicate key \"local\" (first at line 1, "
        "column 1)");
  CHECK(yaml_error("a:\n  b: 1\n  b: 2\n") ==
        "line 3, column 3: duplicate key \"b\" (first at line 2, column 3)");
  CHECK(yaml_error("{x: 1, x: 1}") ==
        "line 1, column 8: duplicate key \"x\" (first at line 1, column 2)");
}

TEST_CASE("yaml: syntax errors name the line and column") {
  auto err = yaml_error("local:\n  a: [1, 2\n");
  CHECK(err.rfind("line ", 0) == 0);
  CHECK(err.find("column") != std::string::npos);
  CHECK(yaml_error("a: 1\n---\nb: 2\n") ==
        "more than one YAML document (--- separates them)");
  CHECK(yaml_error("") == "line 1, column 1: empty document");
  CHECK(yaml_error("a: .inf\n") ==
        "line 1, column 4: JSON has no infinity or NaN: .inf");
  CHECK(yaml_error("a: 99999999999999999999\n") ==
        "line 1, column 4: integer out of range: 99999999999999999999");
  CHECK(yaml_error("? [a]\n: 1\n") ==
        "line 1, column 3: a key must be a string, got a collection");
  CHECK(yaml_error("a: !custom 1\n") ==
        "line 1, column 4: unsupported tag !custom");
  CHECK(yaml_error("a: !!int x\n") ==
        "line 1, column 4: \"x\" is not a valid !!int");
  CHECK(yaml_error("<<: {a: 1}\n") ==
        "line 1, column 1: merge keys (<<) are not supported");
}

TEST_CASE("yaml: nesting deeper than the limit is refused") {
  yaml_limits limits;
  limits.json.max_depth = 4;
  CHECK(yaml_error("a: {b: {c: 1}}", limits).empty());
  CHECK(yaml_error("a: {b: {c: [1]}}", limits) ==
        "line 1, column 13: nested deeper than 4 levels");
  CHECK(yaml_error("a: {b: {c: {d: 1}}}", limits) ==
        "line 1, column 16: nested deeper than 4 levels");
  // Far deeper than the parser's own guard: refused at the limit.
  std::string deep =
    "a: " + std::string(100000, '[') + std::string(100000, ']');
  CHECK(yaml_error(deep) == "line 1, column 259: nested deeper than 256 "
                            "levels");
  // An alias cannot smuggle depth in.
  CHECK(yaml_error("x: &d {b: {c: 1}}\ny: {z: *d}\n", limits) ==
        "line 2, column 8: nested deeper than 4 levels (through an alias)");
}

TEST_CASE("yaml: aliases copy, within a budget of values (billion laughs)") {
  auto doc = parse_yaml_config("base: &b {python: /usr/bin/python3}\n"
                               "other: *b\n")
               .value;
  CHECK(doc["other"] == doc["base"]);
  std::string bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  for (char c = 'b'; c <= 'j'; ++c) {
    std::string prev(1, char(c - 1));
    bomb += std::string(1, c) + ": &" + c + " [*" + prev + ", *" + prev +
            ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" +
            prev + ", *" + prev + ", *" + prev + ", *" + prev + "]\n";
  }
  auto err = yaml_error(bomb);
  CHECK(err.find("more than 100000 values (aliases count what they copy)") !=
        std::string::npos);
  INFO(err);
  CHECK(err.rfind("line 5, column ", 0) == 0);
  CHECK(yaml_error("a: &a [*a]\n") ==
        "line 1, column 8: an alias to a node that contains it");
}

TEST_CASE("provider config: the block itself, in YAML") {
  temp_file f{"sandbox.yaml", "default_metadata:\n"
                              "  team: x\n"
                              "local:\n"
                              "  python: /usr/bin/python3\n"};
  auto cfg = load_provider_config(f.path, providers);
  CHECK(cfg.is_yaml);
  CHECK(cfg.binding.empty());
  auto block = parse_provider_block(cfg.block);
  CHECK(block.name == "local");
  CHECK(block.settings == json{{"python", "/usr/bin/python3"}});
  CHECK(block.default_metadata == json{{"team", "x"}});
}

TEST_CASE("provider config: one named binding, in YAML") {
  temp_file f{"config.yml", "sandbox:\n"
                            "  default_metadata: {team: x}\n"
                            "  scripted:\n"
                            "    steps: {create: [error]}\n"};
  auto cfg = load_provider_config(f.path, providers);
  CHECK(cfg.binding == "sandbox");
  auto block = parse_provider_block(cfg.block);
  CHECK(block.name == "scripted");
  CHECK(block.default_metadata == json{{"team", "x"}});
  CHECK(block.settings == json::parse(R"({"steps": {"create": ["error"]}})"));
}

TEST_CASE("provider config: unknown settings are named with the allowed "
          "keys and placed") {
  temp_file f{"config.yaml", "sandbox:\n"
                             "  scripted:\n"
                             "    stepz: {}\n"};
  auto cfg = load_provider_config(f.path, providers);
  auto block = parse_provider_block(cfg.block);
  std::string msg;
  try {
    prepare_provider(block);
  } catch (const json_error& e) {
    msg = cfg.describe(e);
  }
  CHECK(msg.rfind("line 3, column 5: sandbox.scripted.stepz: unknown key", 0) ==
        0);
  CHECK(msg.find("allowed: ") != std::string::npos);
  CHECK(msg.find("steps") != std::string::npos);
}

TEST_CASE("provider config: two providers in a block are refused, placed") {
  temp_file f{"config.yaml", "local: {}\nscripted: {}\n"};
  auto cfg = load_provider_config(f.path, providers);
  std::string msg;
  try {
    parse_provider_block(cfg.block);
  } catch (const json_error& e) {
    msg = cfg.describe(e);
  }
  CHECK(msg.rfind("line 1, column 1: a provider block names exactly one "
                  "provider",
                  0) == 0);
}

TEST_CASE("provider config: a misspelt provider is not taken for a "
          "binding") {
  temp_file f{"config.yaml", "locl: {python: x}\n"};
  auto cfg = load_provider_config(f.path, providers);
  CHECK(cfg.binding.empty());
  std::string msg;
  try {
    parse_provider_block(cfg.block);
  } catch (const json_error& e) {
    msg = cfg.describe(e);
  }
  CHECK(msg.rfind("line 1, column 1: locl: unknown provider (known "
                  "providers: ",
                  0) == 0);
}

TEST_CASE("provider config: JSON keeps working, by extension or content") {
  temp_file a{"config.json", R"({"sandbox": {"local": {}}})"};
  auto cfg = load_provider_config(a.path, providers);
  CHECK_FALSE(cfg.is_yaml);
  CHECK(cfg.binding == "sandbox");
  CHECK(parse_provider_block(cfg.block).name == "local");
  temp_file b{"config", "  {\"local\": {}, \"local\": {}}"};
  try {
    load_provider_config(b.path, providers);
    FAIL("a duplicate key was accepted");
  } catch (const config_error& e) {
    CHECK(std::string{e.what()}.find("not valid JSON: duplicate key "
                                     "\"local\"") == 0);
  }
  temp_file j{"config.json",
              "{\"sandbox\": {\n  \"scripted\": {\"stepz\": 1}}}"};
  auto placed = load_provider_config(j.path, providers);
  std::string msg;
  try {
    prepare_provider(parse_provider_block(placed.block));
  } catch (const json_error& e) {
    msg = placed.describe(e);
  }
  CHECK(msg.rfind("line 2, column 16: sandbox.scripted.stepz: unknown key",
                  0) == 0);
  temp_file c{"config", "local: {}\n"};
  CHECK(load_provider_config(c.path, providers).is_yaml);
}

TEST_CASE("provider config: a file too large is refused unread") {
  temp_file f{"config.yaml",
              "local: {python: " + std::string(5000, 'x') + "}\n"};
  yaml_limits limits;
  limits.json.max_bytes = 1000;
  CHECK_THROWS_WITH(load_provider_config(f.path, providers, limits),
                    "larger than 1000 bytes");
}
