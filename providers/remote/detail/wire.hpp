#pragma once

// The remote provider's wire model, without sockets or actors: each call of
// the provider interface as an HTTP request of sv-serve's sandbox API, and
// each answer (or transport failure) as the call's typed result or provider
// error. Pure functions, so tests check every mapping directly.

#include "messages/atoms.hpp"
#include "messages/protocol.hpp"
#include "providers/remote.hpp"
#include "providers/remote/detail/http_client.hpp"

#include <caf/expected.hpp>
#include <string>
#include <string_view>

namespace sv::remote {

/// The operations, for messages and for what a status code means.
enum class remote_op : uint8_t { create, status, upload, exec, download, stop };

std::string_view to_string(remote_op x);

// -- requests -----------------------------------------------------------------

/// 128 random bits in hex: one per create, reused by its retries.
std::string new_idempotency_key();

/// RFC 3986 percent-encoding of everything but unreserved characters.
std::string percent_encode(std::string_view s);

/// Seconds a create may take: the spec's own create deadline, else the
/// longer of the ready timeout and the config's timeout.
double create_deadline_s(const remote_provider_config& cfg,
                         const sandbox_spec& spec);

http_request make_create(const remote_provider_config& cfg,
                         const sandbox_spec& spec, const std::string& key,
                         double deadline_s);
http_request make_status(const remote_provider_config& cfg,
                         const std::string& id);
http_request make_upload(const remote_provider_config& cfg,
                         const std::string& id, const std::string& dir,
                         const file_map& files);
http_request make_exec(const remote_provider_config& cfg, const std::string& id,
                       const exec_request& x);
http_request make_download(const remote_provider_config& cfg,
                           const std::string& id, const std::string& path);
http_request make_stop(const remote_provider_config& cfg,
                       const std::string& id);
/// `GET /v1/identity?python=P`: what the far side's backend contributes to
/// a result cache key for a submission whose `config.python` is `python`.
http_request make_identity(const remote_provider_config& cfg,
                           const std::string& python);

// -- answers ------------------------------------------------------------------
//
// Transport failures (refused, reset, a broken answer) and server-side
// outages (5xx, 429, 401) become `provider_errc::sandbox_error` naming the
// server and what happened, so the verification reports
// provider_unavailable and still stops its sandbox through this (live)
// provider; `unavailable` stays what it means elsewhere: this provider actor
// is going away. A passed deadline (ours, or the server's 504) is
// `caf::sec::request_timeout`. A 4xx or 500 whose body names a provider
// error (`{"error": {"code": "not_found", ...}}`) is that error, so a
// missing or oversized result.json stays the runner's fault; otherwise 404
// is `no_such_sandbox` and 400, 409, 413, 422 `invalid_argument`.

/// The error of a failed request or of an answer that is not the expected
/// success.
caf::error error_of(remote_op op, const remote_provider_config& cfg,
                    const http_outcome& out);

/// Whether a failed create may be sent again with the same key: nothing
/// answered (refused, reset, lost) or the server said 503 or 429.
bool create_may_retry(const http_outcome& out);

caf::expected<sandbox_handle> read_create(const remote_provider_config& cfg,
                                          const http_outcome& out);
caf::expected<sandbox_status> read_status(const remote_provider_config& cfg,
                                          const http_outcome& out);
/// Upload and stop: 204 (sv-serve answers a repeated DELETE 204 too).
caf::expected<ok_atom> read_done(remote_op op,
                                 const remote_provider_config& cfg,
                                 const http_outcome& out);
caf::expected<exec_result> read_exec(const remote_provider_config& cfg,
                                     const http_outcome& out);
caf::expected<std::string> read_download(const remote_provider_config& cfg,
                                         http_outcome& out);

/// The `identity` of a 200 answer to make_identity; an error naming the
/// server otherwise (an sv-serve without the route answers 404).
caf::expected<json> read_identity(const remote_provider_config& cfg,
                                  const http_outcome& out);

} // namespace sv::remote
