#pragma once

// A host primitive: a bounded pool of keep-alive HTTP/1.1 connections to one
// server, driven by an Asio io_context on a thread of its own (Boost.Beast).
// It knows nothing of sandboxes. Every request has a deadline that covers
// its wait for a free connection, the connect, the write and the whole
// answer; its callback runs exactly once, on the pool's thread.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace sv::remote {

struct http_request {
  /// "GET", "POST", "PUT" or "DELETE".
  std::string method;
  /// The request target, e.g. "/v1/sandboxes/abc/files?path=x".
  std::string target;
  std::string body;
  /// Empty: no Content-Type header.
  std::string content_type;
  std::vector<std::pair<std::string, std::string>> headers;
  /// From `submit` to the last byte of the answer.
  std::chrono::milliseconds deadline{30000};
  /// May be sent once more, on a fresh connection, when a reused keep-alive
  /// connection turns out closed before any byte of the answer arrived
  /// (RFC 9110 9.2.2: only for requests that are safe to repeat).
  bool idempotent = false;
};

struct http_response {
  unsigned status = 0;
  std::string body;
  /// The Retry-After header, if any.
  std::string retry_after;
};

enum class http_failure_kind : uint8_t {
  /// Could not connect (refused, unreachable, name not resolved).
  connect,
  /// The connection broke before the whole answer came (reset, closed).
  lost,
  /// The deadline passed (waiting, connecting, writing or reading).
  timeout,
  /// The answer exceeded the size limit.
  too_large,
  /// The answer was not HTTP.
  protocol,
  /// The pool is shutting down.
  shutdown,
};

const char* to_string(http_failure_kind x);

/// The outcome of one request: a response (any status) or a failure.
struct http_outcome {
  bool ok = false;
  http_response response;
  http_failure_kind failure = http_failure_kind::protocol;
  /// What went wrong, in words (for failures).
  std::string message;
  /// The request may have reached the server (false: it surely did not).
  bool maybe_sent = false;
};

using http_callback = std::function<void(http_outcome)>;

struct http_pool_settings {
  std::string host;
  uint16_t port = 0;
  /// At most this many connections at once; more requests wait (within
  /// their deadlines).
  size_t connections = 8;
  /// Largest answer body accepted.
  size_t max_response_bytes = size_t{64} << 20;
  /// A keep-alive connection idle this long is closed rather than reused
  /// (below the server's own idle timeout, so a reuse never races its close).
  std::chrono::milliseconds max_idle{4000};
  /// TLS (1.2+): the server's certificate is checked against `ca_file`
  /// (PEM; empty: the system's CAs) and `host`.
  bool tls = false;
  std::string ca_file;
};

namespace detail {
class http_pool_impl;
} // namespace detail

class http_pool {
public:
  /// Starts the I/O thread. Never blocks on the network. Throws when the
  /// CA file cannot be read.
  explicit http_pool(http_pool_settings settings);

  /// Without `shut_down`: fails what is pending and lets the I/O thread end
  /// on its own, without waiting for it (fine on any thread).
  ~http_pool();

  http_pool(const http_pool&) = delete;
  http_pool& operator=(const http_pool&) = delete;

  /// Queues a request; `done` runs once, on the pool's thread, and must not
  /// throw. After shut down, `done` hears `shutdown`.
  void submit(http_request req, http_callback done);

  /// Runs `fn` on the pool's thread after `delay` (not at all once shut
  /// down).
  void after(std::chrono::milliseconds delay, std::function<void()> fn);

  /// Fails what is pending with `shutdown`, closes every connection and
  /// joins the I/O thread. Blocks (briefly): never on a scheduler thread.
  void shut_down();

  const http_pool_settings& settings() const noexcept;

  struct counters {
    uint64_t connects = 0;
    uint64_t requests = 0;
    uint64_t reused = 0;
    uint64_t retried = 0;
  };

  /// Taken on the caller's thread: approximate while requests run.
  counters stats() const;

private:
  std::shared_ptr<detail::http_pool_impl> impl_;
  std::thread thread_;
};

} // namespace sv::remote
