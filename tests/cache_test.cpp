// The result cache (cache/): what its key covers, exactly, and the SQLite
// store's hits, misses and refusals. The apps' use of it (hits marked in
// output lines, failures never stored, several processes on one file) is
// tested end to end in tests/cache/e2e_cache.py.

#include "cache/result_cache.hpp"
#include "messages/batch_format.hpp"
#include "providers/factory.hpp"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sqlite3.h>
#include <unistd.h>

using namespace sv;

namespace {

verification_request base_request() {
  verification_request req;
  req.id = "a";
  req.files["sandbox_runner.py"] = "print(1)";
  req.files["harness.py"] = "x = 1";
  req.request = {{"answer", 42}, {"tests", {1, 2}}};
  req.exec_timeout_s = 30;
  return req;
}

provider_block local_block() {
  provider_block b;
  b.name = "local";
  b.settings = {{"isolation", "bwrap"},
                {"max_processes", 64},
                {"root", "/var/tmp/a"},
                {"io_threads", 4}};
  return b;
}

std::string key_of(const verification_request& req,
                   const provider_block& block = local_block()) {
  return cache_key(req, provider_identity(block));
}

struct temp_dir {
  std::filesystem::path path;
  temp_dir() {
    char tmpl[] = "/tmp/sv-cache-test-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~temp_dir() { std::filesystem::remove_all(path); }
  std::string file(const char* name) const { return (path / name).string(); }
};

} // namespace

TEST_CASE("the cache key is a SHA-256 of a canonical text") {
  auto key = key_of(base_request());
  CHECK(key.size() == 64);
  CHECK(key.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(key == key_of(base_request()));
  // Key order in the request does not matter (canonical text).
  auto req = base_request();
  req.request = json::parse(R"({"tests": [1, 2], "answer": 42})");
  CHECK(key_of(req) == key);
}

TEST_CASE("the cache key changes with every input that decides the "
          "outcome") {
  auto key = key_of(base_request());
  std::vector<
    std::pair<const char*, std::function<void(verification_request&)>>>
    changes = {
      {"a file's text", [](auto& r) { r.files["harness.py"] = "x = 2"; }},
      {"another file", [](auto& r) { r.files["extra.py"] = ""; }},
      {"the request", [](auto& r) { r.request["answer"] = 41; }},
      {"an int vs a float", [](auto& r) { r.request["answer"] = 42.0; }},
      {"exec_timeout_s", [](auto& r) { r.exec_timeout_s = 31; }},
      {"work_dir", [](auto& r) { r.work_dir = "other"; }},
      {"config.python", [](auto& r) { r.config.python = "/usr/bin/python3"; }},
      {"config.env", [](auto& r) { r.config.env["SEED"] = "1"; }},
      {"config.image", [](auto& r) { r.config.image = "img"; }},
      {"config.resources",
       [](auto& r) { r.config.resources.memory_mib = 512; }},
      {"config.provider_options",
       [](auto& r) {
         r.config.provider_options = {{"x", 1}};
       }},
      {"config.ready_timeout_s", [](auto& r) { r.config.ready_timeout_s = 5; }},
    };
  for (auto& [what, change] : changes) {
    INFO(what);
    auto req = base_request();
    change(req);
    CHECK(key_of(req) != key);
  }
}

TEST_CASE("the cache key ignores ids and metadata") {
  auto key = key_of(base_request());
  auto req = base_request();
  req.id = "b";
  req.metadata = {{"task", "t"}};
  req.config.metadata = {{"run", 7}};
  CHECK(key_of(req) == key);
}

TEST_CASE("the cache key covers the provider's isolation and limits, not "
          "its paths and threads") {
  auto key = key_of(base_request());
  auto block = local_block();
  block.settings["root"] = "/elsewhere";
  block.settings["io_threads"] = 8;
  block.settings["stop_attempts"] = 2;
  block.default_metadata = {{"grader", "ci"}};
  CHECK(key_of(base_request(), block) == key);
  for (auto [name, value] : {std::pair<const char*, json>{"isolation", "none"},
                             {"max_processes", 65},
                             {"default_memory_mib", 256},
                             {"python", "/usr/bin/python3"}}) {
    INFO(name);
    auto changed = local_block();
    changed.settings[name] = value;
    CHECK(key_of(base_request(), changed) != key);
  }
  auto other = local_block();
  other.name = "scripted";
  CHECK(key_of(base_request(), other) != key);
}

TEST_CASE("the cache stores and finds results, and counts") {
  temp_dir tmp;
  auto path = tmp.file("c.sqlite");
  {
    result_cache cache{path};
    CHECK_FALSE(cache.lookup("k1").has_value());
    cache.store("k1", R"({"reward":1.0})");
    auto hit = cache.lookup("k1");
    REQUIRE(hit.has_value());
    CHECK(*hit == R"({"reward":1.0})");
    CHECK(cache.counters().hits == 1);
    CHECK(cache.counters().misses == 1);
    CHECK(cache.counters().stored == 1);
    CHECK(cache.counters().errors == 0);
  }
  // Another process (here: another connection) sees it.
  result_cache again{path};
  CHECK(again.lookup("k1").has_value());
  CHECK_FALSE(again.lookup("k2").has_value());
}

TEST_CASE("a file that cannot be a cache is a clear error") {
  temp_dir tmp;
  auto garbage = tmp.file("garbage");
  std::ofstream{garbage} << std::string(8192, 'x');
  CHECK_THROWS_WITH(result_cache{garbage}, Catch::Contains("garbage") &&
                                             Catch::Contains("not a database"));
  CHECK_THROWS_AS(result_cache{tmp.path.string()}, cache_error);
  CHECK_THROWS_AS(result_cache{tmp.file("no/such/dir/c.sqlite")}, cache_error);
}

TEST_CASE("a database of something else is refused, not written") {
  temp_dir tmp;
  auto path = tmp.file("other.sqlite");
  {
    result_cache cache{path}; // ours: reopened fine
  }
  CHECK_NOTHROW(result_cache{path});
  auto foreign = tmp.file("foreign.sqlite");
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(foreign.c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db, "CREATE TABLE users (name TEXT)", nullptr, nullptr,
                       nullptr) == SQLITE_OK);
  sqlite3_close(db);
  CHECK_THROWS_WITH(result_cache{foreign}, Catch::Contains("something else"));
}

TEST_CASE("a cached outcome is marked in its output line, others are not") {
  batch_entry entry;
  entry.line = 3;
  entry.outcome.id = "a";
  entry.outcome.ok = true;
  entry.outcome.result = {{"reward", 1.0}};
  auto plain = render_output_line(entry);
  CHECK(plain.find("cached") == std::string::npos);
  entry.outcome.cached = true;
  auto line = render_output_line(entry);
  CHECK(line.find(R"(,"cached":true,"attempts":1,"line":3})") !=
        std::string::npos);
  auto back = json::parse(line);
  back.erase("line");
  auto out = back.get<verification_outcome>();
  CHECK(out.cached);
  CHECK(out.result == json{{"reward", 1.0}});
}
