// The remote provider against a real sv-serve child process on 127.0.0.1
// (its sandbox API, with the local or the scripted provider behind it), and
// its wire model (settings, requests, the mapping of answers and failures
// to typed errors) without sockets. Every wait is bounded.

#include "facade/grader.hpp"
#include "messages/errors.hpp"
#include "messages/json.hpp"
#include "messages/registry.hpp"
#include "providers/factory.hpp"
#include "providers/remote.hpp"
#include "providers/remote/detail/http_client.hpp"
#include "providers/remote/detail/wire.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <poll.h>
#include <set>
#include <sstream>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

// glibc 2.36's <sys/pidfd.h> lacks __BEGIN_DECLS (as
// providers/local/detail/host/pidfd.hpp notes).
extern "C" {
#include <sys/pidfd.h>
}

using namespace sv;
using namespace std::chrono_literals;

#ifndef SV_SERVE_BIN
#error "SV_SERVE_BIN names the sv-serve binary"
#endif

namespace {

namespace fs = std::filesystem;

// -- an sv-serve child process ------------------------------------------------

/// Polls `fd` for input until it is readable or `within` passed (EINTR
/// resumes with what is left).
bool wait_readable(int fd, std::chrono::milliseconds within) {
  auto deadline = std::chrono::steady_clock::now() + within;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
    if (left.count() < 0)
      return false;
    pollfd p{fd, POLLIN, 0};
    auto n = ::poll(&p, 1, static_cast<int>(left.count()) + 1);
    if (n > 0)
      return true;
    if (n == 0 || errno != EINTR)
      return false;
  }
}

/// A real sv-serve on port 0 of 127.0.0.1, stopped (bounded) at the end.
class serve_process {
public:
  serve_process(const json& provider_block, const std::string& token = "",
                std::vector<std::string> extra = {}) {
    char tmpl[] = "/tmp/sv-remote-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    dir_ = tmpl;
    auto block = provider_block;
    if (block.contains("local"))
      block["local"]["root"] = dir_ + "/root";
    write(dir_ + "/provider.json", block.dump());
    std::vector<std::string> args{SV_SERVE_BIN,
                                  "--listen",
                                  "127.0.0.1:0",
                                  "--provider-config",
                                  dir_ + "/provider.json",
                                  "--log-level",
                                  "warn"};
    if (!token.empty()) {
      write(dir_ + "/tokens", token + "\n");
      args.insert(args.end(), {"--token-file", dir_ + "/tokens"});
    }
    args.insert(args.end(), extra.begin(), extra.end());
    start(args);
  }

  ~serve_process() {
    stop();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::string url() const {
    return "http://127.0.0.1:" + std::to_string(port_);
  }
  const std::string& dir() const { return dir_; }

  /// kill -9: no drain, no goodbye.
  void kill_now() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      reap(10s);
    }
  }

  /// SIGTERM (a drain), then SIGKILL after 20 s.
  void stop() {
    if (pid_ <= 0)
      return;
    ::kill(pid_, SIGTERM);
    if (!reap(20s)) {
      ::kill(pid_, SIGKILL);
      reap(10s);
    }
  }

  std::string stderr_text() const {
    std::ifstream in{dir_ + "/stderr"};
    return std::string{std::istreambuf_iterator<char>{in}, {}};
  }

private:
  static void write(const std::string& path, const std::string& text) {
    std::ofstream out{path};
    out << text;
    REQUIRE(out.good());
  }

  void start(const std::vector<std::string>& args) {
    std::vector<char*> argv;
    for (auto& a : args)
      argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    auto err_path = dir_ + "/stderr";
    int out[2];
    REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
    int err =
      ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL); // never outlive the test
      ::dup2(out[1], 1);
      if (err >= 0)
        ::dup2(err, 2);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    if (err >= 0)
      ::close(err);
    // "listening on 127.0.0.1:PORT\n", within 30 s.
    std::string line;
    auto deadline = std::chrono::steady_clock::now() + 30s;
    while (line.find('\n') == std::string::npos &&
           std::chrono::steady_clock::now() < deadline) {
      pollfd p{out[0], POLLIN, 0};
      if (::poll(&p, 1, 200) <= 0)
        continue;
      char buf[256];
      auto n = ::read(out[0], buf, sizeof buf);
      if (n <= 0)
        break;
      line.append(buf, static_cast<size_t>(n));
    }
    ::close(out[0]);
    auto pos = line.find("listening on 127.0.0.1:");
    INFO("sv-serve said: " << line << "\nstderr: " << stderr_text());
    REQUIRE(pos != std::string::npos);
    port_ = static_cast<uint16_t>(std::stoi(line.substr(pos + 23)));
  }

  /// Waits (on a pidfd, at most `within`) for the server to exit and
  /// reaps it.
  bool reap(std::chrono::milliseconds within) {
    int fd = ::pidfd_open(pid_, 0);
    if (fd >= 0) {
      wait_readable(fd, within);
      ::close(fd);
    }
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) != pid_)
      return false;
    pid_ = -1;
    return true;
  }

  std::string dir_;
  pid_t pid_ = -1;
  uint16_t port_ = 0;
};

/// Whether this network namespace has a TCP connection to 127.0.0.1:`port`
/// that is established on the client's side (/proc/net/tcp: remote
/// address and state 01); a FIN from the server turns it CLOSE_WAIT.
bool client_connection_open(uint16_t port) {
  std::ifstream in{"/proc/net/tcp"};
  std::string line;
  std::getline(in, line); // the header
  char remote[32];
  std::snprintf(remote, sizeof remote, "0100007F:%04X", port);
  while (std::getline(in, line)) {
    std::istringstream fields{line};
    std::string slot, local, rem, state;
    fields >> slot >> local >> rem >> state;
    if (rem == remote && state == "01")
      return true;
  }
  return false;
}

/// Waits (at most `within`) until the server has closed every client
/// connection to `port`. The kernel pushes no such event to a process
/// that does not own the socket, so this reads /proc/net/tcp every 5 ms.
bool server_closed_connections(uint16_t port,
                               std::chrono::milliseconds within) {
  auto deadline = std::chrono::steady_clock::now() + within;
  while (client_connection_open(port)) {
    if (std::chrono::steady_clock::now() >= deadline)
      return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

/// Asks sv-serve's /metrics (a request at most every 10 ms, each bounded)
/// until it has answered `n` requests with `code`, or `within` passed.
/// sv-serve pushes nothing, so a test can only ask.
bool server_answered(const serve_process& server, unsigned code, size_t n,
                     std::chrono::milliseconds within) {
  remote::http_pool_settings s;
  s.host = "127.0.0.1";
  s.port = static_cast<uint16_t>(std::stoi(server.url().substr(17)));
  s.connections = 1;
  remote::http_pool pool{s};
  auto line = "sv_http_requests_total{code=\"" + std::to_string(code) + "\"} ";
  auto deadline = std::chrono::steady_clock::now() + within;
  bool reached = false;
  while (!reached && std::chrono::steady_clock::now() < deadline) {
    auto p = std::make_shared<std::promise<remote::http_outcome>>();
    auto f = p->get_future();
    remote::http_request req;
    req.method = "GET";
    req.target = "/metrics";
    req.deadline = 5s;
    pool.submit(req, [p](remote::http_outcome out) { p->set_value(out); });
    if (f.wait_for(10s) != std::future_status::ready)
      break;
    auto out = f.get();
    auto& text = out.response.body;
    auto at = text.find(line);
    if (out.ok && at != std::string::npos)
      reached = std::stoull(text.substr(at + line.size())) >= n;
    if (!reached)
      std::this_thread::sleep_for(10ms);
  }
  pool.shut_down();
  return reached;
}

json local_block() {
  return json{{"local", json{{"isolation", "none"}}}};
}

json scripted_block(json steps = json::object()) {
  return json{{"scripted", json{{"steps", std::move(steps)}}}};
}

// -- a remote provider in an actor system of its own --------------------------

struct test_config : caf::actor_system_config {
  test_config() {
    register_protocol(*this);
    set("scheduler.max-threads", 2);
  }
};

struct remote_fixture {
  test_config cfg;
  caf::actor_system sys{cfg};
  std::shared_ptr<provider_backend> backend;
  provider_actor provider;

  explicit remote_fixture(json settings) {
    backend = prepare_provider(
      parse_provider_block(json{{"remote", std::move(settings)}}));
    provider = backend->spawn(sys);
  }

  ~remote_fixture() {
    caf::anon_send_exit(provider, caf::exit_reason::user_shutdown);
    backend->shut_down();
  }

  /// One request, its answer or error (at most 30 s).
  template <class T, class... Ts>
  caf::expected<T> ask(const Ts&... xs) {
    caf::scoped_actor self{sys};
    caf::expected<T> out{caf::make_error(caf::sec::request_timeout)};
    self->request(provider, 30s, xs...)
      .receive([&](T& x) { out = std::move(x); },
               [&](caf::error& e) { out = std::move(e); });
    return out;
  }

  sandbox_spec spec;

  sandbox_handle create() {
    auto h = ask<sandbox_handle>(create_atom::value, spec);
    INFO((h ? "" : describe(h.error())));
    REQUIRE(h);
    return *h;
  }
};

json settings_for(const serve_process& server, json extra = json::object()) {
  json j{{"url", server.url()}};
  for (auto& item : extra.items())
    j[item.key()] = item.value();
  return j;
}

provider_errc code_of(const caf::error& err) {
  return static_cast<provider_errc>(provider_error_code(err));
}

} // namespace

// -- against sv-serve ---------------------------------------------------------

TEST_CASE("remote: create, status, upload, exec, download and stop on "
          "sv-serve's local provider") {
  serve_process server{local_block()};
  remote_fixture f{settings_for(server)};
  auto h = f.create();
  CHECK(h.provider_name == "remote");
  CHECK(h.sandbox_id.rfind("sbx-", 0) == 0);
  auto status = f.ask<sandbox_status>(status_atom::value, h);
  REQUIRE(status);
  CHECK(*status == sandbox_status::running);

  file_map files{{"in.txt", "hello from the client\n"}, {"sub/b.txt", "b"}};
  auto up =
    f.ask<ok_atom>(upload_atom::value, h, std::string{"calls/1"}, files);
  INFO((up ? "" : describe(up.error())));
  REQUIRE(up);

  exec_request x;
  x.argv = {"/bin/sh", "-c",
            "cat in.txt sub/b.txt > out.txt; echo done; "
            "echo oops >&2; exit 3"};
  x.cwd = "calls/1";
  x.timeout_s = 10;
  auto res = f.ask<exec_result>(exec_atom::value, h, x);
  INFO((res ? "" : describe(res.error())));
  REQUIRE(res);
  CHECK(res->return_code == 3);
  CHECK(res->error_type == exec_error_type::none);
  CHECK(res->stdout_text == "done\n");
  CHECK(res->stderr_text == "oops\n");

  auto text =
    f.ask<std::string>(download_atom::value, h, std::string{"calls/1/out.txt"});
  REQUIRE(text);
  CHECK(*text == "hello from the client\nb");

  auto missing = f.ask<std::string>(download_atom::value, h,
                                    std::string{"calls/1/result.json"});
  REQUIRE_FALSE(missing);
  CHECK(code_of(missing.error()) == provider_errc::not_found);

  auto escape = f.ask<std::string>(download_atom::value, h,
                                   std::string{"../../etc/passwd"});
  REQUIRE_FALSE(escape);
  CHECK(code_of(escape.error()) == provider_errc::invalid_path);

  REQUIRE(f.ask<ok_atom>(stop_atom::value, h));
  // Stop is idempotent; every other call on a stopped sandbox is
  // no_such_sandbox.
  CHECK(f.ask<ok_atom>(stop_atom::value, h));
  auto after = f.ask<sandbox_status>(status_atom::value, h);
  REQUIRE_FALSE(after);
  CHECK(code_of(after.error()) == provider_errc::no_such_sandbox);
}

TEST_CASE("remote: the grade identity is the far side's, not the url, "
          "connections or timeout_s") {
  serve_process server{
    json{{"scripted", json{{"ledger_file", "/dev/null"}, {"seed", 3}}}}};
  verification_config cfg;
  auto far = json{{"name", "scripted"}, {"settings", {{"seed", 3}}}};
  remote_fixture a{settings_for(server)};
  auto id = a.backend->grade_identity(cfg);
  CHECK(id == json{{"name", "remote"}, {"far", far}});
  remote_fixture b{settings_for(
    server, json{{"connections", 3}, {"timeout_s", 7}, {"exec_grace_s", 2}})};
  CHECK(b.backend->grade_identity(cfg) == id);
  // The same server under another name of it.
  auto port = server.url().substr(17);
  remote_fixture c{json{{"url", "http://localhost:" + port}}};
  CHECK(c.backend->grade_identity(cfg) == id);
}

TEST_CASE("remote: no grade identity from a server that cannot tell is an "
          "error (graded without the cache), never a guess") {
  remote_fixture f{json{{"url", "http://127.0.0.1:1"}, {"timeout_s", 2}}};
  verification_config cfg;
  CHECK_THROWS_WITH(f.backend->grade_identity(cfg),
                    Catch::Contains("/v1/identity"));
}

TEST_CASE("remote: an exec that overruns its timeout is error_type timeout") {
  serve_process server{local_block()};
  remote_fixture f{settings_for(server)};
  auto h = f.create();
  exec_request x;
  x.argv = {"/bin/sh", "-c", "sleep 30"};
  x.timeout_s = 0.5;
  auto t0 = std::chrono::steady_clock::now();
  auto res = f.ask<exec_result>(exec_atom::value, h, x);
  REQUIRE(res);
  CHECK(res->error_type == exec_error_type::timeout);
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  CHECK(f.ask<ok_atom>(stop_atom::value, h));
}

TEST_CASE("remote: a wrong token is a typed provider error naming 401") {
  serve_process server{scripted_block(), "right-token"};
  auto dir = server.dir();
  {
    std::ofstream out{dir + "/wrong"};
    out << "wrong-token\n";
  }
  remote_fixture f{settings_for(server, {{"token_file", dir + "/wrong"}})};
  auto h = f.ask<sandbox_handle>(create_atom::value, f.spec);
  REQUIRE_FALSE(h);
  CHECK(code_of(h.error()) == provider_errc::sandbox_error);
  CHECK_THAT(describe(h.error()), Catch::Contains("401"));

  // The right token works.
  {
    std::ofstream out{dir + "/right"};
    out << "right-token\n";
  }
  remote_fixture g{settings_for(server, {{"token_file", dir + "/right"}})};
  auto ok = g.create();
  CHECK(g.ask<ok_atom>(stop_atom::value, ok));
}

TEST_CASE("remote: nothing listening is a typed provider error, at once") {
  uint16_t port = 0;
  {
    serve_process server{scripted_block()};
    port = static_cast<uint16_t>(std::stoi(server.url().substr(17)));
  } // stopped: the port is closed now
  remote_fixture f{json{{"url", "http://127.0.0.1:" + std::to_string(port)}}};
  auto t0 = std::chrono::steady_clock::now();
  auto h = f.ask<sandbox_handle>(create_atom::value, f.spec);
  REQUIRE_FALSE(h);
  CHECK(code_of(h.error()) == provider_errc::sandbox_error);
  CHECK_THAT(describe(h.error()), Catch::Contains("connect"));
  // Three tries with the same key, 100 + 200 ms apart.
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  sandbox_handle ghost{"sbx-0", "remote", ""};
  auto s = f.ask<sandbox_status>(status_atom::value, ghost);
  REQUIRE_FALSE(s);
  CHECK(code_of(s.error()) == provider_errc::sandbox_error);
}

TEST_CASE("remote: a create that never answers passes its deadline as "
          "request_timeout") {
  serve_process server{scripted_block({{"create", json::array({"hang"})}})};
  remote_fixture f{settings_for(server)};
  sandbox_spec spec;
  spec.create_deadline_s = 0.5;
  auto t0 = std::chrono::steady_clock::now();
  auto h = f.ask<sandbox_handle>(create_atom::value, spec);
  REQUIRE_FALSE(h);
  CHECK(h.error() == caf::sec::request_timeout);
  auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took >= 400ms);
  CHECK(took < 5s);
  server.kill_now(); // its drain would wait for the hanging create
}

TEST_CASE("remote: keep-alive connections are reused, at most N at once") {
  serve_process server{scripted_block()};
  remote::http_pool_settings s;
  s.host = "127.0.0.1";
  s.port = static_cast<uint16_t>(std::stoi(server.url().substr(17)));
  s.connections = 3;
  remote::http_pool pool{s};
  std::mutex mtx;
  std::condition_variable cv;
  size_t done = 0;
  size_t ok = 0;
  constexpr size_t total = 60;
  for (size_t i = 0; i < total; ++i) {
    remote::http_request req;
    req.method = "GET";
    req.target = "/healthz";
    req.deadline = 10s;
    pool.submit(req, [&](remote::http_outcome out) {
      std::lock_guard<std::mutex> guard{mtx};
      ++done;
      if (out.ok && out.response.status == 200)
        ++ok;
      cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> guard{mtx};
    REQUIRE(cv.wait_for(guard, 20s, [&] { return done == total; }));
  }
  CHECK(ok == total);
  auto st = pool.stats();
  CHECK(st.requests == total);
  CHECK(st.connects >= 1);
  CHECK(st.connects <= 3);
  CHECK(st.reused == total - st.connects);
  pool.shut_down();
  // After shut down, a request is answered at once.
  bool answered = false;
  pool.submit(remote::http_request{}, [&](remote::http_outcome out) {
    answered = !out.ok && out.failure == remote::http_failure_kind::shutdown;
  });
  CHECK(answered);
}

TEST_CASE("remote: a keep-alive connection the server closed idle is not "
          "reused") {
  // sv-serve closes a connection that sends no request header within
  // 0.2 s; the pool sees its EOF before reusing it and connects anew.
  serve_process server{scripted_block(), "", {"--header-timeout-s", "0.2"}};
  remote::http_pool_settings s;
  s.host = "127.0.0.1";
  s.port = static_cast<uint16_t>(std::stoi(server.url().substr(17)));
  s.connections = 1;
  remote::http_pool pool{s};
  auto get = [&] {
    std::promise<remote::http_outcome> p;
    auto f = p.get_future();
    remote::http_request req;
    req.method = "GET";
    req.target = "/healthz";
    req.deadline = 10s;
    pool.submit(req, [&p](remote::http_outcome out) { p.set_value(out); });
    REQUIRE(f.wait_for(15s) == std::future_status::ready);
    return f.get();
  };
  auto first = get();
  CHECK((first.ok && first.response.status == 200));
  // The server's header deadline (0.2 s) passes and it closes the idle
  // connection: wait for its FIN to reach the pool's socket.
  REQUIRE(server_closed_connections(s.port, 5s));
  auto second = get();
  CHECK((second.ok && second.response.status == 200));
  auto st = pool.stats();
  CHECK(st.connects == 2);
  CHECK(st.reused == 0);
  CHECK(st.retried == 0);
  pool.shut_down();
}

TEST_CASE("remote: sv-serve killed mid-batch fails every verification as "
          "provider_unavailable, none lost") {
  // Every exec takes 3 s on the server: the batch is in exec when it dies.
  constexpr size_t count = 12;
  auto delays = json::array();
  for (size_t i = 0; i < count; ++i) // the i-th exec on the provider
    delays.push_back(json{{"fault", "delay"}, {"delay_ms", 3000}});
  serve_process server{scripted_block({{"exec", delays}})};
  grader_options opts;
  opts.max_in_flight = count;
  opts.max_creating = count;
  opts.threads = 2;
  grader g{json{{"remote", settings_for(server)}}, opts};
  std::mutex mtx;
  std::condition_variable cv;
  std::vector<verification_outcome> outcomes;
  for (size_t i = 0; i < count; ++i) {
    verification_request req;
    req.id = "job-" + std::to_string(i);
    req.files["sandbox_runner.py"] = "";
    req.exec_timeout_s = 20;
    req.config.ready_timeout_s = 10;
    req.config.stop_timeout_s = 5;
    g.verify(req, [&](verification_outcome out) {
      std::lock_guard<std::mutex> guard{mtx};
      outcomes.push_back(std::move(out));
      cv.notify_all();
    });
  }
  // Wait (bounded) until every verification is in exec: the server has
  // answered every upload (204; no stop runs before). An exec then either
  // is on the wire or meets the dead server: both fail in exec.
  REQUIRE(server_answered(server, 204, count, 10s));
  server.kill_now();
  {
    std::unique_lock<std::mutex> guard{mtx};
    REQUIRE(cv.wait_for(guard, 20s, [&] { return outcomes.size() == count; }));
  }
  std::set<std::string> ids;
  for (auto& out : outcomes) {
    INFO(out.id << ": " << json(out).dump());
    ids.insert(out.id);
    CHECK_FALSE(out.ok);
    CHECK(out.failure.kind == failure_kind::provider_unavailable);
    CHECK(out.failure.state == verification_state::exec);
    CHECK(out.failure.cause == failure_cause::error);
  }
  CHECK(ids.size() == count);
}

// -- the wire model, without sockets ------------------------------------------

namespace {

remote_provider_config test_cfg() {
  return parse_remote_provider_config(json{{"url", "http://h:1"}});
}

remote::http_outcome answer(unsigned status, json body) {
  remote::http_outcome out;
  out.ok = true;
  out.response.status = status;
  out.response.body = body.is_null() ? "" : body.dump();
  return out;
}

remote::http_outcome error_answer(unsigned status, const std::string& code) {
  return answer(status,
                json{{"error", json{{"code", code}, {"message", "m"}}}});
}

remote::http_outcome transport(remote::http_failure_kind kind) {
  remote::http_outcome out;
  out.failure = kind;
  out.message = "x";
  return out;
}

} // namespace

TEST_CASE("remote settings: strict, with the url checked") {
  auto cfg = parse_remote_provider_config(json{
    {"url", "http://10.0.0.5:8080/"}, {"connections", 4}, {"timeout_s", 2.5}});
  CHECK(cfg.host == "10.0.0.5");
  CHECK(cfg.port == 8080);
  CHECK(cfg.connections == 4);
  CHECK(cfg.timeout_s == 2.5);
  auto v6 = parse_remote_provider_config(json{{"url", "http://[::1]:9"}});
  CHECK(v6.host == "::1");
  CHECK(v6.port == 9);
  auto fails = [](json j, const std::string& key, const std::string& text) {
    try {
      parse_remote_provider_config(j);
      FAIL("accepted " << j.dump());
    } catch (const json_error& e) {
      CHECK(e.path() == key);
      CHECK_THAT(e.what(), Catch::Contains(text));
    }
  };
  fails(json{{"url", "http://h:1"}, {"conections", 2}}, "conections",
        "known: url, token_file, ca_file, connections");
  fails(json::object(), "url", "missing");
  auto tls = parse_remote_provider_config(
    json{{"url", "https://sandboxes.example:8443"}, {"ca_file", "ca.pem"}});
  CHECK(tls.tls);
  CHECK(tls.host == "sandboxes.example");
  CHECK(tls.port == 8443);
  CHECK(tls.ca_file == "ca.pem");
  fails(json{{"url", "ftp://h:1"}}, "url", "not an http or https URL");
  fails(json{{"url", "http://h:1"}, {"ca_file", "ca.pem"}}, "ca_file",
        "only for an https url");
  fails(json{{"url", "http://h"}}, "url", "no port");
  // The authority goes through the one HOST:PORT parser (messages/detail/
  // endpoint.hpp): [V6]:PORT, and no bare v6 or empty host.
  auto slash =
    parse_remote_provider_config(json{{"url", "http://[::1]:8080/"}});
  CHECK(slash.host == "::1");
  CHECK(slash.port == 8080);
  fails(json{{"url", "http://::1:8080"}}, "url", "no host or no port");
  fails(json{{"url", "http://:8080"}}, "url", "no host or no port");
  fails(json{{"url", "http://h:0"}}, "url", "1..65535");
  fails(json{{"url", "http://h:70000"}}, "url", "1..65535");
  fails(json{{"url", "http://h:1/api"}}, "url", "path");
  fails(json{{"url", "http://h:1"}, {"connections", 0}}, "connections",
        "integer");
  fails(json{{"url", "http://h:1"}, {"timeout_s", -1}}, "timeout_s", "seconds");
  // Through the factory, the key is named with the provider.
  try {
    prepare_provider(parse_provider_block(
      json{{"remote", json{{"url", "http://h:1"}, {"token", "t"}}}}));
    FAIL("accepted a token in the block");
  } catch (const json_error& e) {
    CHECK(e.path() == "remote.token");
  }
}

TEST_CASE("remote wire: requests") {
  auto cfg = test_cfg();
  cfg.token = "tok";
  sandbox_spec spec;
  auto c = remote::make_create(cfg, spec, "key-1", 5);
  CHECK(c.method == "POST");
  CHECK(c.target == "/v1/sandboxes");
  CHECK(c.idempotent);
  CHECK(c.deadline == 5000ms);
  auto sent = json(spec);
  sent.erase("ttl_s"); // 0: the server's default
  CHECK(json::parse(c.body) == sent);
  spec.ttl_s = 90;
  CHECK(json::parse(remote::make_create(cfg, spec, "k", 5).body) == json(spec));
  auto has = [](const remote::http_request& r, const std::string& k,
                const std::string& v) {
    for (auto& h : r.headers)
      if (h.first == k && h.second == v)
        return true;
    return false;
  };
  CHECK(has(c, "Idempotency-Key", "key-1"));
  CHECK(has(c, "Authorization", "Bearer tok"));
  auto d = remote::make_download(cfg, "sbx-1", "calls/a b/result.json");
  CHECK(d.target ==
        "/v1/sandboxes/sbx-1/files?path=calls%2Fa%20b%2Fresult.json");
  exec_request x;
  x.argv = {"python3"};
  x.timeout_s = 7;
  auto e = remote::make_exec(cfg, "sbx-1", x);
  CHECK_FALSE(e.idempotent);
  CHECK(e.deadline == 12000ms); // timeout_s + exec_grace_s
  auto k1 = remote::new_idempotency_key();
  auto k2 = remote::new_idempotency_key();
  CHECK(k1.size() == 32);
  CHECK(k1 != k2);
  CHECK(k1.find_first_not_of("0123456789abcdef") == std::string::npos);
}

TEST_CASE("remote wire: answers and failures become typed results") {
  auto cfg = test_cfg();
  using remote::remote_op;
  auto created = remote::read_create(
    cfg, answer(201, {{"sandbox_id", "sbx-9"}, {"ttl_s", 60}}));
  REQUIRE(created);
  CHECK(created->sandbox_id == "sbx-9");
  CHECK(remote::read_create(cfg, answer(200, {{"sandbox_id", "sbx-9"}})));
  CHECK_FALSE(remote::read_create(cfg, answer(201, {{"id", "x"}})));
  auto st = remote::read_status(cfg, answer(200, {{"status", "starting"}}));
  REQUIRE(st);
  CHECK(*st == sandbox_status::starting);
  CHECK_FALSE(remote::read_status(cfg, answer(200, {{"status", "weird"}})));
  CHECK(remote::read_done(remote_op::upload, cfg, answer(204, nullptr)));
  auto garbage = answer(200, nullptr);
  garbage.response.body = "{not json";
  auto ex = remote::read_exec(cfg, garbage);
  REQUIRE_FALSE(ex);
  CHECK(code_of(ex.error()) == provider_errc::sandbox_error);

  auto err = [&](remote_op op, const remote::http_outcome& out) {
    return remote::error_of(op, cfg, out);
  };
  // Named provider errors keep their meaning.
  CHECK(code_of(err(remote_op::download, error_answer(404, "not_found"))) ==
        provider_errc::not_found);
  CHECK(
    code_of(err(remote_op::download, error_answer(400, "not_regular_file"))) ==
    provider_errc::not_regular_file);
  CHECK(code_of(err(remote_op::download, error_answer(500, "too_large"))) ==
        provider_errc::too_large);
  CHECK(code_of(err(remote_op::download, error_answer(400, "invalid_path"))) ==
        provider_errc::invalid_path);
  CHECK(code_of(err(remote_op::exec, error_answer(404, "no_such_sandbox"))) ==
        provider_errc::no_such_sandbox);
  // By status otherwise.
  CHECK(
    code_of(err(remote_op::status, error_answer(404, "no_such_endpoint"))) ==
    provider_errc::no_such_sandbox);
  CHECK(code_of(err(remote_op::create, error_answer(400, "invalid_request"))) ==
        provider_errc::invalid_argument);
  CHECK(code_of(err(remote_op::create,
                    error_answer(422, "idempotency_key_reused"))) ==
        provider_errc::invalid_argument);
  // The server cannot serve now: sandbox_error (this provider lives on), a
  // passed deadline: request_timeout.
  for (auto code : {401u, 429u, 500u, 502u, 503u})
    CHECK(code_of(err(remote_op::exec, error_answer(code, "unavailable"))) ==
          provider_errc::sandbox_error);
  CHECK(err(remote_op::exec, error_answer(504, "timeout")) ==
        caf::sec::request_timeout);
  CHECK(err(remote_op::exec, transport(remote::http_failure_kind::timeout)) ==
        caf::sec::request_timeout);
  for (auto kind :
       {remote::http_failure_kind::connect, remote::http_failure_kind::lost,
        remote::http_failure_kind::protocol})
    CHECK(code_of(err(remote_op::exec, transport(kind))) ==
          provider_errc::sandbox_error);
  CHECK(code_of(err(remote_op::exec,
                    transport(remote::http_failure_kind::shutdown))) ==
        provider_errc::unavailable);
  CHECK(code_of(err(remote_op::download,
                    transport(remote::http_failure_kind::too_large))) ==
        provider_errc::too_large);
  // What a create may retry with its key.
  CHECK(
    remote::create_may_retry(transport(remote::http_failure_kind::connect)));
  CHECK(remote::create_may_retry(transport(remote::http_failure_kind::lost)));
  CHECK(remote::create_may_retry(error_answer(503, "unavailable")));
  CHECK(remote::create_may_retry(error_answer(429, "too_many_sandboxes")));
  CHECK_FALSE(
    remote::create_may_retry(transport(remote::http_failure_kind::timeout)));
  CHECK_FALSE(remote::create_may_retry(error_answer(400, "invalid_request")));
}
