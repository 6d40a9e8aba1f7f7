// The result cache (cache/): what its key covers, exactly, the SQLite
// store's hits, misses and refusals, and the front's keying of an image by
// its resolved digest. The apps' use of it (hits marked in
// output lines, failures never stored, several processes on one file) is
// tested end to end in tests/cache/e2e_cache.py.

#include "cache/detail/cache_front.hpp"
#include "cache/detail/result_cache.hpp"
#include "messages/batch_format.hpp"
#include "providers/factory.hpp"

#include <atomic>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <sqlite3.h>
#include <unistd.h>
#include <vector>

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

TEST_CASE("an image keeps results only when named by its digest, or "
          "resolved to one") {
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

TEST_CASE("an image named by a tag, layout or archive is keyed by the digest "
          "the provider resolved it to") {
  auto req = base_request();
  auto resolved = [](const std::string& digest) {
    auto id = some_identity();
    id["image_digest"] = digest;
    return id;
  };
  auto a = "sha256:" + std::string(64, 'a');
  auto b = "sha256:" + std::string(64, 'b');
  for (auto* image : {"python:3.12-slim", "127.0.0.1:5000/t/a:1",
                      "oci:/var/lib/sv/images/python:3.12",
                      "oci-archive:/srv/a.tar", "docker-archive:/srv/b.tar"}) {
    INFO(image);
    req.config.image = image;
    auto key_a = key_of(req, resolved(a));
    CHECK(key_a.size() == 64);
    CHECK(image_digest_resolved(resolved(a)));
    // The tag moved: another key.
    CHECK(key_of(req, resolved(b)) != key_a);
    CHECK(key_of(req, resolved(b)).size() == 64);
    // No digest, or not one: no key (graded, not stored).
    CHECK(key_of(req).empty());
    for (auto bad :
         {std::string{"sha256:abc"}, "sha512:" + std::string(64, 'a'),
          std::string(71, 'a'), "sha256:" + std::string(64, 'A')}) {
      INFO(bad);
      CHECK(!image_digest_resolved(resolved(bad)));
      CHECK(key_of(req, resolved(bad)).empty());
    }
    auto not_text = some_identity();
    not_text["image_digest"] = 5;
    CHECK(key_of(req, not_text).empty());
  }
  // A root file system directory: the local provider resolves none.
  req.config.image = "/srv/rootfs";
  CHECK(key_of(req).empty());
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
  // A digest of the interpreter's file, never its path or metadata.
  CHECK(id["interpreter"]["digest"].get<std::string>().rfind("sha256:", 0) ==
        0);
  CHECK(!id["interpreter"].contains("path"));
  CHECK(id.dump().find(real) == std::string::npos);
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
  CHECK(id_d["interpreter"]["digest"] != id["interpreter"]["digest"]);
  CHECK(id_d["settings"] == id["settings"]);
  CHECK(key_of(base_request(), id_d) != key_of(base_request(), id));
  // A name the provider does not map: the program it finds, by file.
  if (real.rfind("/usr/bin/", 0) == 0 || real.rfind("/bin/", 0) == 0 ||
      real.rfind("/usr/local/bin/", 0) == 0) {
    auto other = identity_of(*d, real);
    CHECK(other["interpreter"].contains("digest"));
    CHECK(!other["interpreter"].contains("path"));
    CHECK(!other["interpreter"].contains("version"));
    CHECK(other["interpreter"]["digest"] != id_d["interpreter"]["digest"]);
  }
  a->shut_down();
  b->shut_down();
  c->shut_down();
  d->shut_down();
}

TEST_CASE("a caller's interpreter path is no host path oracle: outside the "
          "sandbox's PATH there is no identity") {
  // Issue 19 (review): any path a client gave as `python` was resolved and
  // stat'ed as root, and its real path, size, mtime and inode returned
  // (GET /v1/identity, and across nodes).
  temp_dir tmp;
  auto d = local_backend(tmp, "r", json{{"python", SV_PYTHON}});
  auto secret = tmp.file("secret");
  std::ofstream{secret} << "x";
  for (auto& path : {secret, std::string{"/etc/shadow"},
                     std::string{"/usr/bin/../../etc/shadow"},
                     std::string{"/root/.pyenv/versions/3.11.9/bin/python"},
                     std::string{"/usr/bin/no/such"}}) {
    INFO(path);
    CHECK_THROWS_WITH(identity_of(*d, path),
                      Catch::Contains("only in the sandbox's PATH"));
  }
  // In the sandbox's PATH: a digest; one that is not there says so.
  auto sh = identity_of(*d, "/bin/sh");
  CHECK(sh["interpreter"].contains("digest"));
  CHECK(sh["interpreter"].size() == 1);
  CHECK(identity_of(*d, "/usr/bin/sv-no-such-program")["interpreter"].size() ==
        1);
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

// -- the front: a key holding a resolved digest -------------------------------

namespace {

/// The front over a stand-in supervisor that grades every submission `ok`
/// (counting them), with a grade identity that holds `digest` as the
/// image's resolved digest and an image check that answers `still`.
struct front_rig {
  temp_dir tmp; // outlives the actor system, which joins the front
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  std::shared_ptr<result_cache> cache =
    std::make_shared<result_cache>(tmp.file("c.sqlite"));
  std::shared_ptr<std::atomic<int>> graded =
    std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<std::mutex> mtx = std::make_shared<std::mutex>();
  std::shared_ptr<std::string> digest =
    std::make_shared<std::string>("sha256:" + std::string(64, 'a'));
  std::shared_ptr<std::atomic<bool>> still =
    std::make_shared<std::atomic<bool>>(true);
  /// What the check was asked: image and digest.
  std::shared_ptr<std::vector<std::string>> asked =
    std::make_shared<std::vector<std::string>>();
  supervisor_actor supervisor;
  supervisor_actor front;

  explicit front_rig(bool with_check = true) {
    auto graded_ = graded;
    // One argument: CAF 0.17's init_fun_factory dereferences a null argument
    // tuple for a function actor spawned with none (UBSan reports it).
    supervisor = sys.spawn(
      [graded_](supervisor_actor::pointer,
                int) -> supervisor_actor::behavior_type {
        return {
          [=](verify_atom, verification_request& req) {
            ++*graded_;
            verification_outcome out;
            out.id = req.id;
            out.ok = true;
            out.result = json{{"reward", 1.0}};
            return out;
          },
          [](stats_atom) { return supervisor_stats{}; },
          [](cancel_atom, std::string&) {},
        };
      },
      0);
    auto m = mtx;
    auto d = digest;
    auto s = still;
    auto a = asked;
    image_check_fn check;
    if (with_check)
      check = [m, s, a](const std::string& image, const std::string& dg,
                        std::chrono::steady_clock::time_point) {
        std::lock_guard<std::mutex> guard{*m};
        a->push_back(image + " " + dg);
        return s->load();
      };
    front = spawn_cache_front(
      sys, supervisor, cache,
      [m, d](const verification_config&) {
        std::lock_guard<std::mutex> guard{*m};
        auto id = some_identity();
        id["image_digest"] = *d;
        return id;
      },
      {}, check);
  }

  ~front_rig() {
    caf::anon_send_exit(front, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(supervisor, caf::exit_reason::user_shutdown);
  }

  /// Whether the submission (of a tagged image) was answered from the cache.
  bool cached() {
    auto req = base_request();
    req.config.image = "127.0.0.1:5000/t/a:1";
    caf::scoped_actor self{sys};
    bool out = false;
    self->request(front, std::chrono::seconds{30}, verify_atom::value, req)
      .receive(
        [&](verification_outcome& o) {
          CHECK(o.ok);
          CHECK(o.id == "a");
          out = o.cached;
        },
        [&](caf::error& err) { FAIL(sys.render(err)); });
    return out;
  }
};

} // namespace

TEST_CASE("the front keys a tagged image by its resolved digest and stores "
          "a result only while the image named it") {
  front_rig rig;
  CHECK_FALSE(rig.cached()); // graded, stored
  CHECK(rig.cache->counters().stored == 1);
  CHECK(*rig.asked ==
        std::vector<std::string>{"127.0.0.1:5000/t/a:1 " + *rig.digest});
  CHECK(rig.cached()); // the same digest: from the cache
  CHECK(*rig.graded == 1);
  // The tag moved: another key, graded afresh.
  {
    std::lock_guard<std::mutex> guard{*rig.mtx};
    *rig.digest = "sha256:" + std::string(64, 'b');
  }
  // ... and moved again while it was graded: not stored.
  rig.still->store(false);
  CHECK_FALSE(rig.cached());
  CHECK_FALSE(rig.cached());
  CHECK(*rig.graded == 3);
  CHECK(rig.cache->counters().stored == 1);
  // Unchanged since: stored, then served.
  rig.still->store(true);
  CHECK_FALSE(rig.cached());
  CHECK(rig.cached());
  CHECK(*rig.graded == 4);
  CHECK(rig.cache->counters().stored == 2);
}

TEST_CASE("a front without an image check never stores a result keyed by a "
          "resolved digest") {
  front_rig rig{false};
  CHECK_FALSE(rig.cached());
  CHECK_FALSE(rig.cached());
  CHECK(*rig.graded == 2);
  CHECK(rig.cache->counters().stored == 0);
}
