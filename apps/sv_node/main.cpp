// sv-node: offers one provider (any provider block, default {"local": {}})
// to fronts over CAF's middleman. See README.md, "Distributed grading".

#include "apps/common/cli.hpp"
#include "messages/bounded_json.hpp"
#include "messages/detail/endpoint.hpp"
#include "messages/errors.hpp"
#include "messages/json.hpp"
#include "messages/registry.hpp"
#include "providers/factory.hpp"
#include "providers/nodes/detail/middleman_setup.hpp"
#include "providers/nodes/detail/node_joiner.hpp"
#include "providers/nodes/detail/node_protocol.hpp"
#include "providers/nodes/detail/peer_identity.hpp"
#include "providers/nodes/detail/transport/basp_gate.hpp"
#include "service/service.hpp"

#include <CLI/CLI.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <iostream>
#include <pthread.h>
#include <spdlog/spdlog.h>
#include <thread>
#include <tuple>
#include <unistd.h>

namespace {

using namespace sv;
using namespace std::chrono_literals;

using cli::usage_error;

struct cli_options {
  std::string listen;
  std::string join;
  std::string name;
  std::string provider_config;
  uint32_t capacity = 0;
  uint64_t max_upload_bytes = 64ull << 20;
  uint32_t max_frame_bytes = 0;
  tls_files tls;
  bool insecure = false;
  std::string log_level = "warn";
  double drain_timeout_s = 600;
  double max_ttl_s = 3600;
};

constexpr const char* help_footer = R"(
Prints "listening on HOST:PORT" (the real port; --listen HOST:0 picks a
free one) on stdout once it accepts connections. A front (sv-grade with a
provider block {"nodes": {"endpoints": ["HOST:PORT", ...]}}) places
sandboxes on it. With --join HOST:PORT it connects out instead (or as
well) to a front whose nodes block has "listen": "HOST:PORT", and joins it
under --name (default: the --listen address, else HOSTNAME/PID); it joins
again, with backoff, whenever that front is lost. SIGTERM or SIGINT drains: no new sandboxes, the ones in use
finish, all are stopped, exit 0. When a front's connection is lost, the
node stops every sandbox that front created.

TLS is required: --tls-cert/--tls-key/--tls-ca (make them with sv-certs:
`sv-certs issue DIR --role sv-node --name NAME`); both sides verify the
peer's certificate against the CA, and a node serves only certificates
with O=sv-front (a joined front must hold O=sv-front too). With TLS, the
name a node joins under is its certificate's CN. --insecure instead:
plaintext BASP without any authentication (the fronts need "insecure":
true too); anyone who reaches the port can act as a front.

Exit status: 0 after a drain, 1 on a runtime error, 2 on a usage error.)";

std::optional<int> parse_cli(int argc, char** argv, cli_options& opts) {
  CLI::App app{"sv-node: offers a sandbox provider to grading fronts over "
               "CAF's middleman",
               "sv-node"};
  app.footer(help_footer);
  app.add_option("--listen", opts.listen, "HOST:PORT to accept fronts on");
  app.add_option("--join", opts.join,
                 "HOST:PORT of a front to join (its nodes block listens)");
  app.add_option("--name", opts.name,
                 "this node's name at the front it joins (stable across "
                 "restarts)");
  cli::add_provider_config(app, opts.provider_config);
  app
    .add_option("--capacity", opts.capacity,
                "sandboxes at once (default: 2 x hardware threads)")
    ->check(CLI::Range(uint32_t{1}, uint32_t{100000}));
  app
    .add_option("--max-upload-bytes", opts.max_upload_bytes,
                "largest upload (paths and contents) accepted")
    ->capture_default_str();
  app
    .add_option("--max-frame-bytes", opts.max_frame_bytes,
                "largest BASP frame accepted from a front (default: "
                "--max-upload-bytes + 16 MiB, at least 80 MiB)")
    ->check(CLI::Range(uint32_t{1} << 20, uint32_t{1} << 30));
  auto* cert =
    app.add_option("--tls-cert", opts.tls.cert, "PEM certificate of this node");
  auto* key =
    app.add_option("--tls-key", opts.tls.key, "PEM private key of this node");
  auto* ca = app.add_option("--tls-ca", opts.tls.ca,
                            "PEM CA that fronts' certificates must chain to");
  cert->needs(key)->needs(ca);
  key->needs(cert);
  ca->needs(cert);
  app.add_flag("--insecure", opts.insecure,
               "plaintext BASP without certificates (no authentication)");
  app
    .add_option("--max-sandbox-ttl-s,--max-ttl", opts.max_ttl_s,
                "seconds a sandbox lives at most (a front's ttl_s of 0 or "
                "more becomes this; sv-serve's name)")
    ->capture_default_str()
    ->check(CLI::Range(1.0, 30.0 * 86400));
  app
    .add_option("--drain-timeout-s,--drain-timeout", opts.drain_timeout_s,
                "seconds a drain waits for sandboxes in use")
    ->capture_default_str();
  cli::add_log_level(app, opts.log_level);
  return cli::parse(app, argc, argv);
}

/// `text` of `option`, HOST:PORT ([v6]:PORT too; messages/detail/endpoint.hpp).
endpoint split_host_port(const std::string& text, const char* option,
                         port_zero zero) {
  try {
    return parse_endpoint(text, zero);
  } catch (const std::invalid_argument& e) {
    throw usage_error(std::string{option} + " " + text + ": " + e.what());
  }
}

/// The provider block of `path`, JSON or YAML (providers/factory.hpp's one
/// loader); a node serves a real provider, never a `nodes` block.
provider_block load_block(const std::string& path) {
  provider_config_file file;
  provider_block block;
  try {
    block = load_provider_block(path, default_max_json_depth, file);
  } catch (const std::runtime_error& e) {
    throw usage_error(e.what());
  }
  if (!servable_by_node(block))
    throw usage_error("provider config " + path + ": a node cannot serve a " +
                      block.name +
                      " block (it places sandboxes on nodes itself)");
  return block;
}

int run(const cli_options& opts, const sigset_t& signals) {
  if (opts.listen.empty() && opts.join.empty())
    throw usage_error("give --listen HOST:PORT (fronts connect to it) or "
                      "--join HOST:PORT (a front to connect to), or both");
  endpoint listen;
  if (!opts.listen.empty())
    listen = split_host_port(opts.listen, "--listen", port_zero::allowed);
  auto& host = listen.host;
  auto port = listen.port;
  if (!opts.tls.enabled() && !opts.insecure)
    throw usage_error("no TLS files: " + tls_missing_hint(node_role) +
                      " (--tls-cert, --tls-key, --tls-ca, or --insecure)");
  if (opts.tls.enabled() && opts.insecure)
    throw usage_error("--insecure and --tls-cert exclude each other");
  join_settings joining;
  if (!opts.join.empty()) {
    auto ep = split_host_port(opts.join, "--join", port_zero::refused);
    joining.host = ep.host;
    joining.port = ep.port;
    joining.tls = opts.tls.enabled();
  }
  auto block = load_block(opts.provider_config);
  node_limits limits;
  limits.capacity = opts.capacity > 0
                      ? opts.capacity
                      : std::max(1u, 2 * std::thread::hardware_concurrency());
  limits.max_upload_bytes = opts.max_upload_bytes;
  limits.max_ttl = std::chrono::duration_cast<caf::timespan>(
    std::chrono::duration<double>{opts.max_ttl_s});
  auto frame = opts.max_frame_bytes;
  if (frame == 0)
    frame = static_cast<uint32_t>(std::min<uint64_t>(
      uint64_t{1} << 30,
      std::max<uint64_t>(transport::default_max_payload,
                         opts.max_upload_bytes + (16u << 20))));
  if (frame < opts.max_upload_bytes)
    throw usage_error("--max-frame-bytes " + std::to_string(frame) +
                      " is below --max-upload-bytes " +
                      std::to_string(opts.max_upload_bytes));
  // The service's one actor system, with a node's middleman (TLS, frame
  // checks) besides whatever the served backend needs.
  service_options so;
  so.configure = [&opts, frame](caf::actor_system_config& cfg) {
    configure_middleman(cfg, opts.tls, opts.insecure, node_role, frame);
  };
  std::unique_ptr<service> svc;
  try {
    svc = std::make_unique<service>(block, std::move(so));
  } catch (const json_error& e) {
    throw usage_error("provider config: " + std::string{e.what()});
  } catch (const service_setup_error& e) {
    throw usage_error(e.what());
  }
  auto& sys = svc->system();
  auto inner = svc->first_provider();
  // A front's cache key holds what this node grades with (issue 19 item
  // 10): its backend's identity, asked per interpreter name. The backend
  // outlives the node actor (the service holds it past its actor system).
  auto identity = [&backend = svc->backend()](const std::string& python) {
    verification_config c;
    c.python = python;
    return backend.grade_identity(c);
  };
  auto node = spawn_node_actor(sys, inner, limits, identity);
  uint16_t published = 0;
  if (!opts.listen.empty()) {
    // The BASP gate listens (TLS, frame checks) and hands each
    // authenticated connection to CAF's broker serving `node`.
    caf::scoped_actor self{sys};
    std::string failure;
    self
      ->request(transport::gate_actor(sys), std::chrono::seconds{30},
                caf::publish_atom::value, port,
                caf::actor_cast<caf::strong_actor_ptr>(node),
                sys.message_types<node_actor>(), host, true)
      .receive([&](uint16_t actual) { published = actual; },
               [&](caf::error& err) { failure = sys.render(err); });
    if (published == 0) {
      caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
      throw std::runtime_error("cannot listen on " + opts.listen + ": " +
                               failure);
    }
    auto shown = host.find(':') == std::string::npos ? host : "[" + host + "]";
    std::cout << "listening on " << shown << ":" << published << std::endl;
  }
  caf::actor joiner;
  if (!opts.join.empty()) {
    joining.name = opts.name;
    if (joining.name.empty() && !opts.listen.empty())
      joining.name =
        (host.find(':') == std::string::npos ? host : "[" + host + "]") + ":" +
        std::to_string(published);
    if (joining.name.empty()) {
      char buf[256] = {};
      ::gethostname(buf, sizeof buf - 1);
      joining.name = std::string{buf} + "/" + std::to_string(::getpid());
    }
    joiner = spawn_node_joiner(sys, node, joining);
    std::cout << "joining " << opts.join << " as " << joining.name << std::endl;
  }
  spdlog::info("capacity {}, provider {}{}", limits.capacity, block.name,
               opts.tls.enabled() ? ", TLS" : "");
  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::warn("signal {}: draining (no new sandboxes)", sig);
  // One request: the node answers when its last sandbox is stopped, or
  // at the drain timeout.
  if (auto in_use =
        drain_node(sys, node,
                   std::chrono::duration_cast<caf::timespan>(
                     std::chrono::duration<double>{opts.drain_timeout_s}));
      in_use > 0)
    spdlog::warn("drain timeout: {} sandboxes still in use", in_use);
  if (joiner)
    caf::anon_send_exit(joiner, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
  // The served provider, then its backend (service/service.hpp).
  svc->shut_down(std::chrono::nanoseconds{0});
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  cli_options opts;
  if (auto status = parse_cli(argc, argv, opts))
    return *status;
  cli::log_to_stderr("sv-node", opts.log_level);
  // Every thread inherits the mask: only sigwait below sees these.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return cli::guarded("sv-node", [&] { return run(opts, signals); });
}
