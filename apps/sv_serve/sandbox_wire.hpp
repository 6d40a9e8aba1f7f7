#pragma once

// The wire model of sv-serve's sandbox API (DESIGN.md, "The sandbox API
// (sv-serve)"): a call and its reply as plain values, the routes, the
// query's percent-decoding, the error form and how a provider's error maps
// to a status. No sockets, no actors.

#include "messages/protocol.hpp"

#include <caf/fwd.hpp>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sv::serve {

/// One HTTP request under /v1/sandboxes, already authenticated.
struct sandbox_call {
  std::string method; // "GET", "POST", ...
  std::string target; // path and query, as sent
  /// Who asks: the bearer token (empty without a token file).
  std::string owner;
  /// The Idempotency-Key header, if any.
  std::string idempotency_key;
  bool has_idempotency_key = false;
  /// The Content-Type header, if any (an upload of raw bytes says
  /// application/octet-stream).
  std::string content_type;
  std::string body;
  /// Set by `sandbox_api::handle`: what `abandon` names.
  uint64_t call_id = 0;
};

/// Whether a Content-Type header names `media_type` (case-insensitive,
/// parameters after ';' ignored).
bool is_media_type(std::string_view header, std::string_view media_type);

struct sandbox_reply {
  unsigned status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
};

/// Called exactly once per call, on a CAF thread (or at once on the
/// caller's thread when the call is refused before reaching the actor).
using sandbox_reply_fn = std::function<void(sandbox_reply)>;

/// The shortest and longest Idempotency-Key, and its characters
/// (`[A-Za-z0-9._:-]`).
inline constexpr size_t max_idempotency_key = 200;
bool valid_idempotency_key(const std::string& key);

/// Whether a request path (without the query) belongs to the sandbox API.
bool is_sandbox_path(std::string_view path);

/// The provider call a route stands for.
enum class sandbox_op { create, status, upload, exec, download, stop, none };

struct sandbox_target {
  sandbox_op what = sandbox_op::none;
  std::string id;
  std::string query;
  /// The methods the path allows (for 405's Allow); empty: no such path.
  const char* allow = "";
};

/// The route of `method` on `target` (path and query).
sandbox_target parse_sandbox_target(std::string_view method,
                                    std::string_view target);

/// The value of `name` in a query string, percent-decoded ('+' is a plus).
/// False when it is missing or badly escaped.
bool query_value(const std::string& query, std::string_view name,
                 std::string& out);

/// A fresh public id: "sbx-" and 32 random hex digits.
std::string fresh_sandbox_id();

// -- replies ------------------------------------------------------------------

/// `body` as JSON (invalid UTF-8 becomes U+FFFD, never an exception).
sandbox_reply json_reply(unsigned status, const json& body);
/// {"error": {"code": ..., "message": ...}}
sandbox_reply error_reply(unsigned status, std::string code,
                          std::string message);
sandbox_reply no_content();
sandbox_reply no_such_sandbox(const std::string& id);
/// A provider's error: its provider_errc name as the code (404, 400, 503,
/// 504 for a lost reply, else 500).
sandbox_reply provider_failure(const caf::error& err, const char* what);

} // namespace sv::serve
