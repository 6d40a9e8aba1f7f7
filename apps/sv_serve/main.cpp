// sv-serve: grades submissions over HTTP (README, "sv-serve"). Threads:
// the Asio threads of the server (apps/sv_serve/server.cpp) read and write
// HTTP; CAF's threads run the supervisor, the provider and one small client
// actor per request (apps/sv_serve/bridge.cpp); nothing blocks either.

#include "actors/supervisor.hpp"
#include "apps/common/cli.hpp"
#include "apps/sv_serve/compat_routes.hpp"
#include "apps/sv_serve/metrics.hpp"
#include "apps/sv_serve/sandboxes.hpp"
#include "apps/sv_serve/server.hpp"
#include "apps/sv_serve/tokens.hpp"
#include "cache/detail/cache_front.hpp"
#include "cache/detail/result_cache.hpp"
#include "messages/batch_format.hpp"
#include "messages/bounded_json.hpp"
#include "messages/detail/endpoint.hpp"
#include "messages/json.hpp"
#include "messages/registry.hpp"
#include "providers/factory.hpp"
#include "service/service.hpp"

#include <CLI/CLI.hpp>
#include <boost/asio/ip/address.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <csignal>
#include <fstream>
#include <iostream>
#include <mutex>
#include <optional>
#include <spdlog/spdlog.h>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace {

using namespace sv;

using cli::usage_error;

struct cli_options {
  std::string listen;
  std::string metrics_listen;
  std::string provider_config;
  std::string token_file;
  std::string tls_cert;
  std::string tls_key;
  std::string log_level = "warn";
  size_t max_body_bytes = size_t{64} << 20;
  size_t max_json_depth = default_max_json_depth;
  size_t max_json_values = default_max_json_values;
  size_t concurrency = 0;
  size_t max_creating = 16;
  size_t max_queue = 10000;
  double header_timeout_s = 10;
  double body_timeout_s = 60;
  double drain_timeout_s = 120;
  size_t threads = 2;
  size_t max_connections = 1024;
  double sandbox_create_timeout_s = 120;
  serve::sandbox_api_options sandboxes;
  std::string cache;
  std::string compat_config;
  std::string open_routes;
  std::string open_from;
};

constexpr const char* help_footer = R"(
Endpoints:
  POST /v1/verify        one submission (the JSON of one sv-grade input line)
                         -> 200 its outcome (sv-grade's output line);
                         400 invalid_request naming the field; 429 overloaded
  POST /v1/verify/batch  JSONL in -> JSONL out, chunked, in completion order,
                         one line per input line
  POST /v1/sandboxes, GET|DELETE /v1/sandboxes/ID, PUT|GET
  /v1/sandboxes/ID/files, POST /v1/sandboxes/ID/exec
                         the sandbox API (DESIGN.md, "The sandbox API")
  POST /run_code, GET /v1/ping
                         SandboxFusion's (verl, SkyRL); POST /execute,
                         GET /health NeMo-Skills'; GET /v1/languages
                         (docs/compat.md)
  GET /healthz           200 serving, 503 draining
  GET /metrics           Prometheus text (with --token-file, the token
                         too; or token-less on --metrics-listen)
Errors: 401 (WWW-Authenticate: Bearer), 404, 405 (Allow), 413 over
  --max-body-bytes, 431 header too large, 400 for a body that is not JSON,
  breaks the schema or nests too deep. A client that disconnects cancels its
  verifications (their sandboxes are stopped).
Signals: SIGTERM/SIGINT drain (503, no new work, in-flight work finishes
  within --drain-timeout-s, every sandbox stopped; again: stop now); SIGHUP
  re-reads --token-file.
Without --token-file, sv-serve listens on loopback addresses only.
Example:
  sv-serve --listen 127.0.0.1:8080 &
  curl -s localhost:8080/v1/verify -d @submission.json
)";

std::optional<int> parse_cli(int argc, char** argv, cli_options& opts) {
  CLI::App app{"sv-serve: grades submissions over HTTP, each in a fresh "
               "single-use sandbox",
               "sv-serve"};
  app.footer(help_footer);
  app.add_option("--listen", opts.listen, "HOST:PORT (port 0: any free one)")
    ->required();
  app.add_option("--metrics-listen", opts.metrics_listen,
                 "HOST:PORT: a second, plain HTTP port serving only /metrics "
                 "and /healthz without a token (otherwise /metrics needs "
                 "the token of --token-file)");
  cli::add_provider_config(app, opts.provider_config);
  app.add_option("--token-file", opts.token_file,
                 "bearer tokens, one a line (re-read on SIGHUP)");
  app.add_option("--tls-cert", opts.tls_cert,
                 "PEM certificate chain: the port speaks TLS (1.2+) only");
  app.add_option("--tls-key", opts.tls_key, "PEM private key of --tls-cert");
  app
    .add_option("--max-body-bytes", opts.max_body_bytes,
                "longest request body; a longer one is 413")
    ->capture_default_str()
    ->check(CLI::Range(size_t{1}, size_t{1} << 40));
  app
    .add_option("--max-json-depth", opts.max_json_depth,
                "deepest nesting accepted in bodies, results and configs")
    ->capture_default_str()
    ->check(CLI::Range(size_t{1}, size_t{100000}));
  app
    .add_option("--max-json-values", opts.max_json_values,
                "most values (scalars, arrays, objects, members) a JSON "
                "body may hold: its parsed size is bounded by them")
    ->capture_default_str()
    ->check(CLI::Range(size_t{1}, size_t{1} << 40));
  app
    .add_option("--concurrency", opts.concurrency,
                "verifications at once (default: 2 x hardware threads)")
    ->check(CLI::Range(size_t{1}, size_t{1000000}));
  app
    .add_option("--max-creating", opts.max_creating,
                "sandboxes in create or ready at once")
    ->capture_default_str()
    ->check(CLI::Range(size_t{1}, size_t{1000000}));
  app
    .add_option("--max-queue", opts.max_queue,
                "submissions waiting for a slot; beyond it 429")
    ->capture_default_str();
  app
    .add_option("--header-timeout-s", opts.header_timeout_s,
                "deadline of a request's header")
    ->capture_default_str()
    ->check(CLI::Range(0.001, 3600.0));
  app
    .add_option("--body-timeout-s", opts.body_timeout_s,
                "deadline of a request's body and of each write")
    ->capture_default_str()
    ->check(CLI::Range(0.001, 3600.0));
  app
    .add_option("--drain-timeout-s", opts.drain_timeout_s,
                "how long SIGTERM waits for the work in flight")
    ->capture_default_str()
    ->check(CLI::Range(0.0, 86400.0));
  auto& sbx = opts.sandboxes;
  app
    .add_option("--sandbox-ttl-s", sbx.default_ttl_s,
                "sandbox API: TTL of a sandbox whose spec says 0")
    ->capture_default_str()
    ->check(CLI::Range(0.001, 1e7));
  app
    .add_option("--max-sandbox-ttl-s", sbx.max_ttl_s,
                "sandbox API: the longest TTL a spec may ask for")
    ->capture_default_str()
    ->check(CLI::Range(0.001, 1e7));
  app
    .add_option("--sandbox-idle-s", sbx.idle_timeout_s,
                "sandbox API: a sandbox nobody called for this long is stopped")
    ->capture_default_str()
    ->check(CLI::Range(0.001, 1e7));
  app
    .add_option("--max-sandboxes-per-token", sbx.max_per_owner,
                "sandbox API: live sandboxes per token; beyond it 429")
    ->capture_default_str()
    ->check(CLI::Range(size_t{1}, size_t{1000000}));
  app
    .add_option("--sandbox-create-timeout-s", opts.sandbox_create_timeout_s,
                "sandbox API: a create's caller hears 504 after this; a "
                "sandbox made later is stopped at once")
    ->capture_default_str()
    ->check(CLI::Range(0.001, 86400.0));
  app.add_option("--cache", opts.cache,
                 "an SQLite result cache shared with sv-grade and other "
                 "sv-serve processes (README, \"Result cache\")");
  app.add_option("--compat-config", opts.compat_config,
                 "JSON or YAML: the languages of /run_code and /execute and "
                 "their limits (docs/compat.md)");
  app.add_option("--open-routes", opts.open_routes,
                 "run_code,execute: served without a token (their clients "
                 "send none) to loopback and --open-from");
  app.add_option("--open-from", opts.open_from,
                 "CIDRs (10.0.0.0/8,...) besides loopback that reach "
                 "--open-routes without a token");
  app
    .add_option("--max-connections", opts.max_connections,
                "connections open at once; more are answered 503 and closed")
    ->capture_default_str()
    ->check(CLI::Range(size_t{1}, size_t{10000000}));
  app.add_option("--threads", opts.threads, "Asio threads")
    ->capture_default_str()
    ->check(CLI::Range(size_t{1}, size_t{256}));
  cli::add_log_level(app, opts.log_level);
  return cli::parse(app, argc, argv);
}

/// `value` of `option`, HOST:PORT ([v6]:PORT too;
/// messages/detail/endpoint.hpp), its host an IP address to bind (`localhost`:
/// 127.0.0.1); `loopback` by the one loopback rule.
std::pair<std::string, uint16_t> split_host_port(const std::string& option,
                                                 const std::string& value,
                                                 bool& loopback) {
  endpoint ep;
  try {
    ep = parse_endpoint(value, port_zero::allowed);
  } catch (const std::invalid_argument& e) {
    throw usage_error(option + " " + value + ": " + e.what());
  }
  if (ep.host == "localhost")
    ep.host = "127.0.0.1";
  boost::system::error_code ec;
  boost::asio::ip::make_address(ep.host, ec);
  if (ec)
    throw usage_error(option + " " + value + ": " + ep.host +
                      " is not an IP address");
  loopback = is_loopback_host(ep.host);
  return {ep.host, ep.port};
}

/// --listen (the loopback rule) and --metrics-listen.
void parse_listen(const cli_options& opts, serve::server_options& out) {
  bool loopback = false;
  std::tie(out.host, out.port) =
    split_host_port("--listen", opts.listen, loopback);
  if (opts.token_file.empty() && !loopback)
    throw usage_error("--listen " + opts.listen +
                      ": beyond loopback only with --token-file");
  if (opts.metrics_listen.empty())
    return;
  std::tie(out.metrics_host, out.metrics_port) =
    split_host_port("--metrics-listen", opts.metrics_listen, loopback);
  if (!loopback)
    spdlog::warn("--metrics-listen {}: /metrics without a token beyond "
                 "loopback",
                 opts.metrics_listen);
}

/// The provider block of `path`, JSON or YAML (providers/factory.hpp's one
/// loader).
provider_block read_provider_block(const std::string& path, size_t max_depth) {
  provider_config_file file;
  try {
    return load_provider_block(path, max_depth, file);
  } catch (const std::runtime_error& e) {
    throw usage_error(e.what());
  }
}

/// The settings of SandboxFusion's and NeMo-Skills' routes
/// (docs/compat.md), read before anything starts.
struct compat_setup {
  std::shared_ptr<serve::compat_settings> settings =
    std::make_shared<serve::compat_settings>();
  serve::open_routes open;
};

compat_setup read_compat_setup(const cli_options& opts) {
  compat_setup out;
  try {
    if (!opts.compat_config.empty())
      out.settings =
        serve::load_compat_settings(opts.compat_config, opts.max_json_depth);
    out.open = serve::open_routes{opts.open_routes, opts.open_from};
  } catch (const std::exception& e) {
    throw usage_error(e.what());
  }
  if (!out.open.none())
    spdlog::warn("{}", out.open.describe());
  return out;
}

std::chrono::milliseconds to_ms(double seconds) {
  return std::chrono::milliseconds{static_cast<int64_t>(seconds * 1000)};
}

int run(const cli_options& opts) {
  if (opts.tls_cert.empty() != opts.tls_key.empty())
    throw usage_error("--tls-cert and --tls-key go together");
  serve::server_options sopts;
  sopts.tls_cert = opts.tls_cert;
  sopts.tls_key = opts.tls_key;
  parse_listen(opts, sopts);
  sopts.max_body_bytes = opts.max_body_bytes;
  sopts.max_json_depth = opts.max_json_depth;
  sopts.max_json_values = opts.max_json_values;
  sopts.header_timeout = to_ms(opts.header_timeout_s);
  sopts.body_timeout = to_ms(opts.body_timeout_s);
  sopts.drain_timeout = to_ms(opts.drain_timeout_s);
  sopts.threads = opts.threads;
  sopts.max_connections = opts.max_connections;
  std::unique_ptr<serve::token_set> tokens;
  try {
    tokens = std::make_unique<serve::token_set>(opts.token_file);
  } catch (const std::runtime_error& e) {
    throw usage_error(e.what());
  }
  auto block = read_provider_block(opts.provider_config, opts.max_json_depth);
  auto compat_opts = read_compat_setup(opts);
  // Opened before anything starts (SQLite blocks; this is the main thread).
  std::shared_ptr<result_cache> cache;
  if (!opts.cache.empty()) {
    try {
      cache = std::make_shared<result_cache>(opts.cache);
    } catch (const cache_error& e) {
      throw usage_error(e.what());
    }
  }
  std::unique_ptr<service> svc;
  try {
    svc = std::make_unique<service>(block);
  } catch (const std::exception& e) {
    throw usage_error("provider " + block.name + ": " + e.what());
  }
  auto& sys = svc->system();
  supervisor_config scfg;
  scfg.max_in_flight = opts.concurrency;
  scfg.max_creating = opts.max_creating;
  scfg.max_queue = opts.max_queue;
  json_limits limits;
  limits.max_depth = opts.max_json_depth;
  scfg.parser = [limits](const std::string& text, json& result,
                         std::string& error) {
    return parse_result_text(text, result, error, limits);
  };
  // With --cache, requests reach the supervisor through the cache's front
  // (a detached actor that dies with the supervisor).
  svc->supervise(std::move(scfg),
                 cache ? cache_front_factory(cache, limits) : front_factory{});
  serve::metrics counters;
  auto sbx_opts = opts.sandboxes;
  sbx_opts.max_json_depth = opts.max_json_depth;
  sbx_opts.max_json_values = opts.max_json_values;
  sbx_opts.create_timeout = to_ms(opts.sandbox_create_timeout_s);
  sbx_opts.max_body_bytes = opts.max_body_bytes;
  serve::sandbox_api sandboxes{
    sys, [&svc = *svc] { return svc.latest_provider(); }, sbx_opts, &counters};
  serve::server_context ctx;
  ctx.sandboxes = &sandboxes;
  ctx.sys = &sys;
  ctx.grade_identity = [&svc = *svc](const verification_config& c) {
    return svc.backend().grade_identity(c);
  };
  ctx.supervisor = svc->entry();
  if (cache) {
    counters.track_cache([cache] {
      auto& c = cache->counters();
      return serve::metrics::cache_counts{c.hits, c.misses};
    });
  }
  json_limits body_limits = limits;
  body_limits.max_bytes = opts.max_body_bytes;
  body_limits.max_values = opts.max_json_values;
  serve::compat_routes compat{sys,
                              ctx.supervisor,
                              svc->supervisor(),
                              compat_opts.settings,
                              compat_opts.open,
                              &counters,
                              body_limits};
  ctx.compat = &compat;
  ctx.tokens = tokens.get();
  ctx.counters = &counters;
  ctx.announce = [](const std::string& line) {
    std::cout << line << std::endl;
  };
  spdlog::info("serving on provider {}", block.name);
  auto sig = serve::run_server(sopts, ctx);
  // The stops behind the last replies (up to 30 s), then the supervisor,
  // the providers and the backend, in that order (service/service.hpp).
  svc->shut_down(std::chrono::seconds{30});
  spdlog::info("stopped after signal {}", sig);
  return 0;
}

void ignore_sigpipe(int) {}

} // namespace

int main(int argc, char** argv) {
  cli_options opts;
  if (auto status = parse_cli(argc, argv, opts))
    return *status;
  cli::log_to_stderr("sv-serve", opts.log_level);
  // A handler, not SIG_IGN: exec resets it, so sandboxed processes start
  // with the default disposition.
  std::signal(SIGPIPE, ignore_sigpipe);
  // SIGTERM, SIGINT and SIGHUP belong to the server's signal_set, installed
  // before `listening on` is printed: a signal before it has its default
  // action (nothing is being served yet).
  return cli::guarded("sv-serve", [&] { return run(opts); });
}
