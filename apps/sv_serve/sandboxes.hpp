#pragma once

// The sandbox API of sv-serve (DESIGN.md, "The sandbox API (sv-serve)"):
// the routes under /v1/sandboxes as plain calls and replies, answered by one
// event-based actor that owns every API sandbox (its owner, its TTL, its
// idempotency key) and calls the provider with finite timeouts. The Asio
// side hands it a call and a callback (run on a CAF thread: post it back to
// the strand); it knows nothing about sockets, and nobody waits on anybody.

#include "messages/provider.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace caf {
class actor_system;
} // namespace caf

namespace sv::serve {

class metrics;

/// One HTTP request under /v1/sandboxes, already authenticated.
struct sandbox_call {
  std::string method; // "GET", "POST", ...
  std::string target; // path and query, as sent
  /// Who asks: the bearer token (empty without a token file).
  std::string owner;
  /// The Idempotency-Key header, if any.
  std::string idempotency_key;
  bool has_idempotency_key = false;
  std::string body;
};

struct sandbox_reply {
  unsigned status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
};

/// Called exactly once per call, on a CAF thread (or at once on the
/// caller's thread when the call is refused before reaching the actor).
using sandbox_reply_fn = std::function<void(sandbox_reply)>;

struct sandbox_api_options {
  /// The TTL of a sandbox whose spec says 0, and the most any may ask.
  double default_ttl_s = 600;
  double max_ttl_s = 3600;
  /// A sandbox nobody called for this long is stopped (abandoned).
  double idle_timeout_s = 600;
  /// Live (and creating) sandboxes per token; beyond it 429.
  size_t max_per_owner = 64;
  /// How often the reaper looks.
  std::chrono::milliseconds reap_interval{250};
  /// Deadlines of provider calls; exec adds its own timeout_s to
  /// `exec_grace` (and takes `max_exec_s` when it has none).
  std::chrono::milliseconds create_timeout = std::chrono::seconds{120};
  std::chrono::milliseconds call_timeout = std::chrono::seconds{60};
  std::chrono::milliseconds exec_grace = std::chrono::seconds{30};
  double max_exec_s = 3600;
  size_t max_json_depth = 256;
  size_t max_body_bytes = size_t{64} << 20;
};

/// The shortest and longest Idempotency-Key, and its characters
/// (`[A-Za-z0-9._:-]`).
inline constexpr size_t max_idempotency_key = 200;
bool valid_idempotency_key(const std::string& key);

/// Whether a request path (without the query) belongs to the sandbox API.
bool is_sandbox_path(std::string_view path);

/// The owner of the API sandboxes.
class sandbox_api {
public:
  /// `provider` returns the provider to call now (the supervisor may have
  /// replaced the first one).
  sandbox_api(caf::actor_system& sys, std::function<provider_actor()> provider,
              sandbox_api_options opts, metrics* counters);
  ~sandbox_api();

  sandbox_api(const sandbox_api&) = delete;
  sandbox_api& operator=(const sandbox_api&) = delete;

  /// Answers one call (thread-safe, never blocks).
  void handle(sandbox_call call, sandbox_reply_fn done);

  /// Draining: creates are refused (503) from now on.
  void drain();

  /// Stops every API sandbox and ends the actor; waits (blocking: never on
  /// a CAF thread) at most `timeout`. False when it did not finish.
  bool shut_down(std::chrono::milliseconds timeout);

  /// The two halves of `shut_down`: the request (never blocks) and the
  /// wait (blocks; after `timeout` the actor is ended at once, answering
  /// nobody, and the wait goes on up to 5 s more).
  void begin_shut_down();
  bool wait_shut_down(std::chrono::milliseconds timeout);

  /// Whether the actor has ended.
  bool ended() const;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace sv::serve
