#pragma once

// The sandbox API of sv-serve (DESIGN.md, "The sandbox API (sv-serve)"):
// the routes under /v1/sandboxes as plain calls and replies, answered by one
// event-based actor that owns every API sandbox (its owner, its TTL, its
// idempotency key) and calls the provider with finite timeouts. The Asio
// side hands it a call and a callback (run on a CAF thread: post it back to
// the strand); it knows nothing about sockets, and nobody waits on anybody.

#include "apps/sv_serve/sandbox_wire.hpp"
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
  /// A create's caller hears 504 at `create_timeout`; the create itself
  /// is awaited `call_timeout` longer, and a sandbox it makes that late is
  /// stopped at once.
  std::chrono::milliseconds create_timeout = std::chrono::seconds{120};
  std::chrono::milliseconds call_timeout = std::chrono::seconds{60};
  std::chrono::milliseconds exec_grace = std::chrono::seconds{30};
  double max_exec_s = 3600;
  size_t max_json_depth = 256;
  size_t max_json_values = 1000000;
  size_t max_body_bytes = size_t{64} << 20;
};

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

  /// Answers one call (thread-safe, never blocks); returns its id.
  uint64_t handle(sandbox_call call, sandbox_reply_fn done);

  /// The client of call `id` is gone: its callback is dropped unanswered
  /// (thread-safe, never blocks). A create nobody waits for any more is
  /// still awaited, and its sandbox stopped at once unless it carries an
  /// Idempotency-Key (a retry with the key gets it; else the idle timeout
  /// reaps it).
  void abandon(uint64_t id);

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
