#pragma once

// sv-serve's compatible front doors (docs/compat.md), beside the sandbox
// API: SandboxFusion's POST /run_code and GET /v1/ping, NeMo-Skills' POST
// /execute and GET /health, and GET /v1/languages (what the table serves
// and what the probe found). A router turns a request into a reply or a
// plan (a verification of the built-in runner and how to answer from its
// outcome); `compat_routes` carries plans out through the supervisor. It
// knows nothing about sockets: the session hands it a call and a callback
// (run on a CAF thread: post it back to the strand).

#include "apps/sv_serve/languages.hpp"
#include "apps/sv_serve/open_routes.hpp"
#include "apps/sv_serve/sandbox_wire.hpp"
#include "messages/bounded_json.hpp"
#include "messages/provider.hpp"

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace caf {
class actor_system;
} // namespace caf

namespace sv::serve {

class metrics;

/// Whether a request path (without the query) is a compatible route.
bool is_compat_path(std::string_view path);

/// One HTTP request on a compatible route, already authorised.
struct compat_call {
  std::string method;
  std::string target;
  std::string body;
  /// An X-Session-ID header came (NeMo-Skills' IPython sessions).
  bool has_session_header = false;
  /// The server is draining: no new work.
  bool draining = false;
};

/// What the router decided for a call.
struct compat_plan {
  /// Set: answer this at once.
  std::optional<sandbox_reply> reply;
  /// Otherwise: grade this, then answer `answer(outcome)`.
  verification_request request;
  std::function<sandbox_reply(const verification_outcome&)> answer;
};

/// The router: no actors, no sockets.
compat_plan plan_compat_call(const compat_call& call,
                             const std::shared_ptr<compat_settings>& settings,
                             const json_limits& limits);

class compat_routes {
public:
  /// Calls go to `supervisor` (the cache front, when there is one); the
  /// toolchain probe to `probes` (the supervisor itself: toolchains change,
  /// so no cache).
  compat_routes(caf::actor_system& sys, supervisor_actor supervisor,
                supervisor_actor probes,
                std::shared_ptr<compat_settings> settings, open_routes open,
                metrics* counters, json_limits limits);

  /// Whether a call to `path` from `peer` (an IP address) must carry a
  /// token where tokens are configured.
  bool needs_token(std::string_view path, const std::string& peer) const;

  /// Answers one call (thread-safe, never blocks). The first call of
  /// /run_code, /execute or /v1/languages starts the toolchain probe.
  void handle(compat_call call, sandbox_reply_fn done);

  /// Asks the sandbox which languages' programs exist: one verification
  /// per image. Never blocks; until it answers, calls go ahead and the
  /// runner checks. Runs once, at the first such call, so
  /// a server that never serves these routes runs no verification nobody
  /// asked for (its counters, a scripted provider's steps).
  void start_probe();

  const open_routes& open() const { return open_; }

private:
  caf::actor_system* sys_;
  supervisor_actor supervisor_;
  supervisor_actor probes_;
  std::atomic<bool> probed_{false};
  std::shared_ptr<compat_settings> settings_;
  open_routes open_;
  metrics* counters_;
  json_limits limits_;
};

} // namespace sv::serve
