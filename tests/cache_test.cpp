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

/// A provider's grade identity (provider_backend::grade_identity).
json some_identity() {
  return settings_identity("local", {{"isolation", "bwrap"}}, {});
}

std::string key_of(const verification_request& req,
                   const json& identity = some_identity()) {
  return cache_key(req, identity);
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

TEST_CASE("an image keeps results only when named by its digest") {
  auto req = base_request();
  std::string digest(64, 'a');
  for (auto* image : {"python:3.12-slim", "127.0.0.1:5000/t/a:1",
                      "oci:/var/lib/sv/images/python:3.12", "/srv/rootfs",
                      "python@sha256:abc"}) {
    req.config.image = image;
    INFO(image);
    CHECK(key_of(req).empty());
  }
  req.config.image = "python@sha256:" + digest;
  auto pinned = key_of(req);
  CHECK(pinned.size() == 64);
  req.config.image = "127.0.0.1:5000/t/a@sha256:" + digest;
  CHECK(key_of(req) != pinned); // the name is in the key too
  req.config.image = "python@sha256:" + std::string(64, 'b');
  CHECK(key_of(req) != pinned);
}

TEST_CASE("the cache key ignores ids and metadata") {
  auto key = key_of(base_request());
  auto req = base_request();
  req.id = "b";
  req.metadata = {{"task", "t"}};
  req.config.metadata = {{"run", 7}};
  CHECK(key_of(req) == key);
}

TEST_CASE("the cache key changes with the provider's grade identity") {
  auto key = key_of(base_request());
  CHECK(key_of(base_request(), some_identity()) == key);
  CHECK(key_of(base_request(),
               settings_identity("local", {{"isolation", "none"}}, {})) != key);
  CHECK(key_of(base_request(),
               settings_identity("scripted", {{"isolation", "bwrap"}}, {})) !=
        key);
}

namespace {

/// A local backend on its own root (isolation none) with `settings`.
std::shared_ptr<provider_backend>
local_backend(const temp_dir& tmp, const std::string& root, json settings) {
  settings["root"] = tmp.file(root.c_str());
  settings["isolation"] = "none";
  settings["warm_pool"] = 0;
  return prepare_provider(
    parse_provider_block(json{{"local", std::move(settings)}}));
}

json identity_of(const provider_backend& backend, const std::string& python) {
  verification_config cfg;
  cfg.python = python;
  return backend.grade_identity(cfg);
}

} // namespace

TEST_CASE("a local backend's grade identity: its isolation and limits and "
          "the interpreter python3 resolves to, not its paths and threads") {
  temp_dir tmp;
  namespace fs = std::filesystem;
  // `py` is the provider's python setting, a symlink: first to the
  // interpreter the tests run, then to a copy of it (another install, as a
  // pyenv switch makes it); the submissions say "python3" throughout.
  auto real = fs::canonical(SV_PYTHON).string();
  auto link = tmp.file("py");
  fs::create_symlink(real, link);
  json settings{{"python", link}};
  auto a = local_backend(tmp, "r1", settings);
  auto id = identity_of(*a, "python3");
  CHECK(id["name"] == "local");
  CHECK(id["interpreter"]["path"] == real);
  CHECK(id["interpreter"]["version"].get<std::string>().rfind("3.", 0) == 0);
  CHECK(id == identity_of(*a, "python"));
  CHECK(id == identity_of(*a, link)); // its own setting's name
  // Paths, threads and patience do not decide a grade.
  auto b = local_backend(tmp, "r2",
                         json{{"python", link},
                              {"io_threads", 2},
                              {"stop_attempts", 2},
                              {"warm_pool_start", false}});
  auto id_b = identity_of(*b, "python3");
  CHECK(id_b["interpreter"] == id["interpreter"]);
  id_b["settings"].erase("io_threads");
  id_b["settings"].erase("stop_attempts");
  id_b["settings"].erase("warm_pool_start");
  CHECK(id_b == id);
  CHECK(key_of(base_request(), identity_of(*b, "python3")) ==
        key_of(base_request(), id));
  // A limit does.
  auto c =
    local_backend(tmp, "r3", json{{"python", link}, {"max_processes", 65}});
  CHECK(key_of(base_request(), identity_of(*c, "python3")) !=
        key_of(base_request(), id));
  // The same name, another interpreter: another key.
  auto copy = tmp.file("copy-python3");
  fs::copy_file(real, copy);
  fs::permissions(copy, fs::perms::owner_all);
  fs::remove(link);
  fs::create_symlink(copy, link);
  auto d = local_backend(tmp, "r4", settings);
  auto id_d = identity_of(*d, "python3");
  CHECK(id_d["interpreter"]["path"] == copy);
  CHECK(id_d["settings"] == id["settings"]);
  CHECK(key_of(base_request(), id_d) != key_of(base_request(), id));
  // A name the provider does not map: the program it finds, by file.
  auto other = identity_of(*d, real);
  CHECK(other["interpreter"]["path"] == real);
  CHECK(!other["interpreter"].contains("version"));
  a->shut_down();
  b->shut_down();
  c->shut_down();
  d->shut_down();
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
