#pragma once

// The remote provider: sandboxes on an sv-serve host, through its sandbox
// API over HTTP (DESIGN.md, "The sandbox API (sv-serve)"). A bounded pool
// of keep-alive connections runs on an I/O thread of its own
// (providers/remote/detail/http_client.hpp); each call becomes one request with
// a finite deadline, and its answer comes back to the actor as a message, so no
// CAF scheduler thread ever waits on the network.
//
// Block: {"remote": {"url": "http://HOST:PORT" (or https, with "ca_file"),
//                    "token_file": F, "connections": N, "timeout_s": S, ...}}

#include "messages/protocol.hpp"
#include "messages/provider.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace caf {
class actor_system;
} // namespace caf

namespace sv {

class provider_backend;

struct remote_provider_config {
  /// As given: "http://HOST:PORT" or "https://HOST:PORT".
  std::string url;
  std::string host;
  uint16_t port = 0;
  /// https: TLS 1.2+, the server's certificate checked against `ca_file`
  /// (PEM; empty: the system's CAs) and the host name.
  bool tls = false;
  std::string ca_file;
  /// A file whose first line is the bearer token (empty: no token, for a
  /// loopback sv-serve without --token-file).
  std::string token_file;
  /// Read from `token_file` when the provider starts.
  std::string token;
  /// Most connections (and so requests) open at once; more calls wait for
  /// one within their deadlines. Set it to at least the concurrency.
  size_t connections = 16;
  /// Deadline of every request except create and exec, in seconds.
  double timeout_s = 30;
  /// Exec: the command's own timeout_s plus this, for the answer to come.
  double exec_grace_s = 5;
  /// Create: tries per create (the same Idempotency-Key every time) when
  /// the server could not be reached or the connection broke.
  uint32_t create_attempts = 3;
  /// Largest answer accepted (a download, an exec result).
  size_t max_response_bytes = size_t{64} << 20;
};

/// Reads the settings of a `{"remote": {...}}` block (strict: an unknown key
/// is an error naming the keys allowed). Does not read the token file.
remote_provider_config parse_remote_provider_config(const json& settings);

/// The first line of a token file, trimmed; throws std::runtime_error when
/// it is missing, empty or holds a character a header cannot carry.
std::string read_token_file(const std::string& path);

/// The factory's entry: parses the settings, reads the token file, starts
/// the connection pool (no connection is opened yet).
std::shared_ptr<provider_backend> make_remote_backend(const json& settings);

} // namespace sv
