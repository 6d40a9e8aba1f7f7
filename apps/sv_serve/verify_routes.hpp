#pragma once

// sv-serve's grading endpoints as plain calls and plans, beside the sandbox
// API's (sandboxes.hpp) and the compatible routes' (compat_routes.hpp):
// POST /v1/verify (one submission, one answer), POST /v1/verify/batch
// (JSONL in, JSONL out in completion order, streamed) and GET /v1/identity
// (what this server's backend contributes to a result cache key). A
// request goes in; a reply, or a plan (what to grade and how to answer
// each outcome) comes out. No sockets, no actors: the session (server.cpp)
// carries a plan out through the bridge and writes what it says.

#include "apps/sv_serve/sandbox_wire.hpp"
#include "messages/bounded_json.hpp"
#include "messages/protocol.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sv::serve {

/// One request on /v1/verify or /v1/verify/batch, already authorised, its
/// method checked.
struct verify_call {
  /// /v1/verify/batch.
  bool batch = false;
  std::string body;
  json_limits limits;
  /// The server is draining: no new work.
  bool draining = false;
};

/// What the router decided for a call.
struct verify_plan {
  /// Set: answer this at once (a body that is no submission, draining).
  std::optional<sandbox_reply> reply;
  /// Otherwise: grade these (line number, request) ...
  std::vector<std::pair<uint64_t, verification_request>> requests;
  /// ... and, for a batch (`stream`), answer with a chunked
  /// application/x-ndjson stream: these lines first (the rejected input
  /// lines, in input order), then one line per outcome as it comes
  /// (verify_line). Without `stream`: one answer, verify_reply.
  bool stream = false;
  std::vector<std::string> rejected_lines;
};

/// The router of /v1/verify and /v1/verify/batch: no actors, no sockets.
verify_plan plan_verify_call(verify_call call);

/// The answer of /v1/verify from its one outcome (200, or 400 for an
/// invalid request, or 429 with Retry-After when overloaded).
sandbox_reply verify_reply(uint64_t line, verification_outcome out);

/// The output line (with its newline) of outcome `out` of input `line`.
std::string verify_line(uint64_t line, verification_outcome out);

/// GET /v1/identity?python=P: `identity(cfg)` for P, or the 400 naming
/// what is wrong (none: no identity here, 400).
sandbox_reply
identity_reply(const std::string& target,
               const std::function<json(const verification_config&)>& identity);

} // namespace sv::serve
