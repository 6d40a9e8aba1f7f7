#pragma once

// sv-serve's HTTP server (Boost.Beast, the only TU that includes it): a
// listener, one session per connection (an I/O state machine on its own
// strand), the routing of requests to the grading endpoints, /healthz and
// /metrics. It runs on Asio threads of its own; it talks to the supervisor
// only through the bridge's messages, never waiting on a CAF thread.

#include "apps/sv_serve/metrics.hpp"
#include "apps/sv_serve/tokens.hpp"
#include "messages/provider.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace caf {
class actor_system;
} // namespace caf

namespace sv::serve {

class sandbox_api;
class compat_routes;

struct server_options {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  size_t max_body_bytes = size_t{64} << 20;
  size_t max_header_bytes = 16 * 1024;
  size_t max_json_depth = 256;
  /// Most values a JSON body may hold (its DOM's size; bounded_json.hpp).
  size_t max_json_values = 1000000;
  /// Deadlines of one request's header and of its body (slowloris).
  std::chrono::milliseconds header_timeout = std::chrono::seconds{10};
  std::chrono::milliseconds body_timeout = std::chrono::seconds{60};
  /// How long SIGTERM waits for the verifications in flight.
  std::chrono::milliseconds drain_timeout = std::chrono::seconds{120};
  size_t threads = 2;
  /// Connections open at once; more are closed at accept (a plain port
  /// answers them 503 first).
  size_t max_connections = 1024;
  /// --metrics-listen: a second, plain port serving only /metrics and
  /// /healthz, without a token (empty host: none; /metrics is then behind
  /// the token like every route but /healthz).
  std::string metrics_host;
  uint16_t metrics_port = 0;
  /// PEM files; both set: the port speaks TLS only.
  std::string tls_cert;
  std::string tls_key;
};

struct server_context {
  caf::actor_system* sys = nullptr;
  supervisor_actor supervisor;
  token_set* tokens = nullptr;
  metrics* counters = nullptr;
  /// The sandbox API (none: its routes are 404). run_server drains it on
  /// SIGTERM and shuts it down (every sandbox stopped) before it returns.
  sandbox_api* sandboxes = nullptr;
  /// SandboxFusion's and NeMo-Skills' routes (none: they are 404).
  compat_routes* compat = nullptr;
  /// The backend's grade identity (GET /v1/identity; none: 400).
  std::function<json(const verification_config&)> grade_identity;
  /// How long that shutdown may take.
  std::chrono::milliseconds sandboxes_stop_timeout = std::chrono::seconds{30};
  /// Where `listening on HOST:PORT` goes once connections are accepted.
  std::function<void(const std::string&)> announce;
};

/// Serves until SIGTERM or SIGINT has drained it (SIGHUP re-reads the
/// tokens). Throws std::runtime_error when it cannot listen. Returns the
/// signal that ended it.
int run_server(const server_options& opts, const server_context& ctx);

} // namespace sv::serve
