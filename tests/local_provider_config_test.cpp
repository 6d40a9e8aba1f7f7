// The local provider's settings and the provider factory.

#include "local_provider_fixture.hpp"
#include "messages/json.hpp"
#include "providers/factory.hpp"

#include <caf/send.hpp>
#include <sys/stat.h>

using namespace sv;
using namespace sv::test;

TEST_CASE("an unknown python fails at start with an actionable message") {
  test_config cfg;
  caf::actor_system sys{cfg};
  temp_dir root;
  local_provider_config c;
  c.root = root.path;
  c.python = "no-such-python-sv";
  CHECK_THROWS_WITH(spawn_local_provider(sys, c),
                    Catch::Contains("\"no-such-python-sv\" not found on PATH"));
}

TEST_CASE_METHOD(fixture, "execs in several sandboxes run side by side") {
  std::vector<sandbox_handle> hs;
  for (int i = 0; i < 6; ++i)
    hs.push_back(create());
  std::vector<std::string> out(hs.size());
  using handle_t = decltype(self->request(provider, deadline, exec_atom::value,
                                          hs[0], exec_request{}));
  std::vector<handle_t> pending;
  for (size_t i = 0; i < hs.size(); ++i)
    pending.push_back(self->request(
      provider, deadline, exec_atom::value, hs[i],
      exec_request{{"sh", "-c", "echo " + std::to_string(i)}, "", {}, 30, ""}));
  for (size_t i = 0; i < hs.size(); ++i)
    pending[i].receive([&](exec_result& r) { out[i] = r.stdout_text; },
                       [&](caf::error& e) { out[i] = describe(e); });
  for (size_t i = 0; i < hs.size(); ++i)
    CHECK(out[i] == std::to_string(i) + "\n");
}

// -- configuration
// --------------------------------------------------------------

TEST_CASE("local provider settings are strict") {
  auto cfg = parse_local_provider_config(json{{"root", "/x"},
                                              {"python", "py"},
                                              {"max_download_bytes", 5},
                                              {"io_threads", 3}});
  CHECK(cfg.root == "/x");
  CHECK(cfg.python == "py");
  CHECK(cfg.max_download_bytes == 5);
  CHECK(cfg.io_threads == 3);
  CHECK_THROWS_WITH(
    parse_local_provider_config(json{{"rooot", "/x"}}),
    "rooot: unknown key in local provider settings (allowed: "
    "root, python, max_download_bytes, io_threads, isolation, "
    "hide_paths, max_processes, max_log_bytes, "
    "default_memory_mib, default_disk_mib, max_memory_mib, max_disk_mib, "
    "max_cpu, sandbox_nice, uid_base, "
    "uid_count, cgroup_parent, allow_user_namespaces, stop_attempts, "
    "stop_retry_ms, warm_pool, warm_pool_start, warm_python, image_store, "
    "image_store_max_mib, insecure_registries, image_dirs, image_tag_ttl_s)");
  auto images = parse_local_provider_config(
    json{{"image_store", "/var/lib/sv/images"},
         {"image_store_max_mib", 1024},
         {"insecure_registries", {"127.0.0.1:5000"}},
         {"image_dirs", {"/srv/rootfs"}},
         {"image_tag_ttl_s", 0}});
  CHECK(images.image_store == "/var/lib/sv/images");
  CHECK(images.image_store_max_mib == 1024);
  CHECK(images.insecure_registries ==
        std::vector<std::string>{"127.0.0.1:5000"});
  CHECK(images.image_tag_ttl_s == 0);
  CHECK(images.image_dirs == std::vector<std::string>{"/srv/rootfs"});
  CHECK(parse_local_provider_config(json::object()).image_dirs.empty());
  CHECK_THROWS_WITH(parse_local_provider_config(json{{"image_dirs", {"srv"}}}),
                    "image_dirs: \"srv\" is not an absolute, normalized path "
                    "other than /");
  CHECK_THROWS_WITH(
    parse_local_provider_config(json{{"insecure_registries", {"a/b"}}}),
    "insecure_registries: \"a/b\" is not HOST or HOST:PORT");
  CHECK_THROWS_AS(parse_local_provider_config(json{{"image_store", "rel"}}),
                  json_error);
  CHECK_THROWS_AS(parse_local_provider_config(json{{"io_threads", 0}}),
                  json_error);
  CHECK_THROWS_AS(parse_local_provider_config(json{{"python", ""}}),
                  json_error);
  CHECK_THROWS_AS(parse_local_provider_config(json::array()), json_error);
}

TEST_CASE("isolation and limit settings are strict") {
  auto cfg =
    parse_local_provider_config(json{{"isolation", "none"},
                                     {"hide_paths", {"/root", "/etc/sv"}},
                                     {"max_processes", 64},
                                     {"max_log_bytes", 65536},
                                     {"default_memory_mib", 0},
                                     {"default_disk_mib", 10},
                                     {"uid_base", 200000},
                                     {"uid_count", 16},
                                     {"cgroup_parent", "sv/test"}});
  CHECK(cfg.isolation == "none");
  CHECK(cfg.hide_paths == std::vector<std::string>{"/root", "/etc/sv"});
  CHECK(cfg.max_processes == 64);
  CHECK(cfg.max_log_bytes == 65536);
  CHECK(cfg.default_memory_mib == 0);
  CHECK(cfg.default_disk_mib == 10);
  CHECK(cfg.uid_base == 200000);
  CHECK(cfg.uid_count == 16);
  CHECK(cfg.cgroup_parent == "sv/test");
  auto defaults = parse_local_provider_config(json::object());
  CHECK(defaults.isolation.empty());
  CHECK(defaults.max_processes == 256);
  CHECK(defaults.max_log_bytes == 1024 * 1024);
  CHECK_THROWS_WITH(parse_local_provider_config(json{{"isolation", "docker"}}),
                    "isolation: expected \"bwrap\" or \"none\", got "
                    "\"docker\"");
  CHECK_THROWS_WITH(
    parse_local_provider_config(json{{"hide_paths", {"etc"}}}),
    "hide_paths: \"etc\" is not an absolute, normalized path other than /");
  CHECK_THROWS_AS(
    parse_local_provider_config(json{{"hide_paths", {"/a/../b"}}}), json_error);
  CHECK_THROWS_AS(parse_local_provider_config(json{{"max_log_bytes", 100}}),
                  json_error);
  CHECK_THROWS_AS(parse_local_provider_config(json{{"uid_base", 999}}),
                  json_error);
  CHECK_THROWS_AS(parse_local_provider_config(json{{"cgroup_parent", "/abs"}}),
                  json_error);
  CHECK_THROWS_AS(parse_local_provider_config(json{{"cgroup_parent", "../up"}}),
                  json_error);
}

TEST_CASE("provider blocks name exactly one known provider") {
  CHECK(provider_names() ==
        std::vector<std::string>{"local", "scripted", "nodes", "remote"});
  auto block = parse_provider_block(
    json{{"local", {{"root", "/x"}}}, {"default_metadata", {{"a", 1}}}});
  CHECK(block.name == "local");
  CHECK(block.settings == json{{"root", "/x"}});
  CHECK(block.default_metadata == json{{"a", 1}});
  CHECK_THROWS_WITH(
    parse_provider_block(json{{"docker", json::object()}}),
    "docker: unknown provider (known providers: local, scripted, nodes, "
    "remote)");
  CHECK_THROWS_WITH(parse_provider_block(json{{"local", json::object()},
                                              {"remote", json::object()}}),
                    Catch::Contains("exactly one provider"));
  CHECK_THROWS_WITH(parse_provider_block(
                      json{{"local", json::object()}, {"default_metadata", 3}}),
                    "default_metadata: expected an object, got number");
  CHECK_THROWS_WITH(parse_provider_block(json::object()),
                    Catch::Contains("no provider key"));
}

TEST_CASE("spawn_provider starts the local provider of a block") {
  temp_dir root;
  test_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto block = parse_provider_block(json{{"local", {{"root", root.path}}}});
  auto provider = spawn_provider(sys, block);
  bool created = false;
  sandbox_spec spec;
  self->request(provider, deadline, create_atom::value, spec)
    .receive([&](sandbox_handle& h) { created = h.provider_name == "local"; },
             [&](caf::error& e) { FAIL(describe(e)); });
  CHECK(created);
  caf::anon_send_exit(provider, caf::exit_reason::user_shutdown);
  block.settings["bogus"] = 1;
  CHECK_THROWS_WITH(spawn_provider(sys, block),
                    Catch::StartsWith("local.bogus: unknown key"));
}

TEST_CASE("actors spawned from one prepared backend share its sandboxes") {
  temp_dir root;
  test_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto backend = prepare_provider(
    parse_provider_block(json{{"local", {{"root", root.path}}}}));
  auto first = backend->spawn(sys);
  sandbox_handle h;
  sandbox_spec spec;
  self->request(first, deadline, create_atom::value, spec)
    .receive([&](sandbox_handle& x) { h = x; },
             [&](caf::error& e) { FAIL(describe(e)); });
  REQUIRE(!h.sandbox_id.empty());
  // A crash, then a replacement from the same backend: it knows the sandbox.
  self->monitor(first);
  caf::anon_send_exit(first, caf::exit_reason::kill);
  self->receive([](caf::down_msg&) {}, caf::after(deadline) >> [] {});
  auto second = backend->spawn(sys);
  bool stopped = false;
  self->request(second, deadline, stop_atom::value, h)
    .receive([&](ok_atom) { stopped = true; },
             [&](caf::error& e) { FAIL(describe(e)); });
  CHECK(stopped);
  // Stray messages are logged and dropped; the actor goes on.
  caf::anon_send(caf::actor_cast<caf::actor>(second), stats_atom::value);
  bool answered = false;
  self->request(second, deadline, status_atom::value, h)
    .receive([](sandbox_status) {},
             [&](caf::error& e) {
               answered =
                 provider_error_code(e) == code(provider_errc::no_such_sandbox);
             });
  CHECK(answered);
  self->monitor(second);
  caf::anon_send_exit(second, caf::exit_reason::user_shutdown);
  self->receive([](caf::down_msg&) {}, caf::after(deadline) >> [] {});
  backend->shut_down();
  CHECK(processes_with_env_prefix(own_marker_prefix()).empty());
  CHECK(!std::filesystem::exists(root.path + "/" + h.sandbox_id));
}

TEST_CASE("warm_pool_start is a boolean, true by default") {
  CHECK(parse_local_provider_config(json::object()).warm_pool_start);
  CHECK(!parse_local_provider_config(json{{"warm_pool_start", false}})
           .warm_pool_start);
  CHECK_THROWS_WITH(parse_local_provider_config(json{{"warm_pool_start", 1}}),
                    "warm_pool_start: expected a boolean, got number");
}

TEST_CASE("warm_python is a boolean, false by default") {
  CHECK(!parse_local_provider_config(json::object()).warm_python);
  CHECK(parse_local_provider_config(json{{"warm_python", true}}).warm_python);
  CHECK_THROWS_WITH(parse_local_provider_config(json{{"warm_python", "yes"}}),
                    "warm_python: expected a boolean, got string");
}

TEST_CASE("warm_pool is a count from 0 (off) to 64") {
  CHECK(parse_local_provider_config(json::object()).warm_pool == 4);
  CHECK(parse_local_provider_config(json{{"warm_pool", 0}}).warm_pool == 0);
  CHECK(parse_local_provider_config(json{{"warm_pool", 64}}).warm_pool == 64);
  CHECK_THROWS_WITH(parse_local_provider_config(json{{"warm_pool", 65}}),
                    "warm_pool: expected an integer in [0, 64]");
  CHECK_THROWS_AS(parse_local_provider_config(json{{"warm_pool", -1}}),
                  json_error);
  CHECK_THROWS_AS(parse_local_provider_config(json{{"warm_pool", "2"}}),
                  json_error);
}

TEST_CASE("host paths in a config file are relative to that file") {
  temp_dir dir;
  auto sub = dir.path + "/conf";
  REQUIRE(::mkdir(sub.c_str(), 0755) == 0);
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream{sub + "/" + name} << text;
    return sub + "/" + name;
  };
  provider_config_file file;
  auto remote = load_provider_block(
    write("remote.yaml", "remote:\n  url: https://127.0.0.1:8443\n"
                         "  token_file: token\n  ca_file: ../certs/ca.pem\n"),
    64, file);
  CHECK(remote.settings.at("token_file") == sub + "/token");
  CHECK(remote.settings.at("ca_file") == dir.path + "/certs/ca.pem");
  auto nodes = load_provider_block(
    write("nodes.json", R"({"nodes": {"endpoints": ["127.0.0.1:7101"],
       "tls": {"cert": "front.pem", "key": "/etc/sv/front.key",
               "ca": "./ca.pem"}}})"),
    64, file);
  CHECK(nodes.settings.at("tls").at("cert") == sub + "/front.pem");
  CHECK(nodes.settings.at("tls").at("key") == "/etc/sv/front.key");
  CHECK(nodes.settings.at("tls").at("ca") == sub + "/ca.pem");
  auto local = load_provider_block(
    write("local.json", R"({"local": {"root": "sandboxes"}})"), 64, file);
  CHECK(local.settings.at("root") == sub + "/sandboxes");
  // Inline blocks (no file) keep what they say.
  CHECK(parse_provider_block(json{{"local", {{"root", "rel"}}}})
          .settings.at("root") == "rel");
}
