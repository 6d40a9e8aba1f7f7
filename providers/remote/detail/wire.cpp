// The remote provider's wire model (wire.hpp): requests of sv-serve's
// sandbox API and the mapping of its answers to typed results and errors.

#include "providers/remote/detail/wire.hpp"

#include "messages/bounded_json.hpp"
#include "messages/errors.hpp"
#include "messages/json.hpp"

#include <algorithm>
#include <caf/sec.hpp>
#include <cmath>
#include <mutex>
#include <random>

namespace sv::remote {

namespace {

/// Answers are small JSON documents (an exec result is the largest).
constexpr size_t max_answer_depth = 32;

std::chrono::milliseconds to_millis(double seconds) {
  auto ms = std::ceil(std::max(0.001, seconds) * 1000.0);
  return std::chrono::milliseconds{static_cast<int64_t>(std::min(ms, 1e12))};
}

http_request base(const remote_provider_config& cfg, std::string method,
                  std::string target, double deadline_s) {
  http_request r;
  r.method = std::move(method);
  r.target = std::move(target);
  r.deadline = to_millis(deadline_s);
  if (!cfg.token.empty())
    r.headers.emplace_back("Authorization", "Bearer " + cfg.token);
  return r;
}

std::string sandbox_target(const std::string& id) {
  return "/v1/sandboxes/" + percent_encode(id);
}

http_request with_json(http_request r, const json& body) {
  r.body = body.dump();
  r.content_type = "application/json";
  return r;
}

/// "sv-serve at http://h:p" for messages.
std::string server(const remote_provider_config& cfg) {
  return "sv-serve at " + cfg.url;
}

/// The provider error a code name in an error body stands for.
bool errc_of(std::string_view code, provider_errc& out) {
  static constexpr provider_errc all[] = {
    provider_errc::unavailable,      provider_errc::no_such_sandbox,
    provider_errc::invalid_argument, provider_errc::invalid_path,
    provider_errc::not_found,        provider_errc::not_regular_file,
    provider_errc::too_large,        provider_errc::io_error,
    provider_errc::sandbox_error,
  };
  for (auto x : all)
    if (to_string(x) == code) {
      out = x;
      return true;
    }
  return false;
}

/// The code and message of an error body, when it is one.
void read_error_body(const std::string& body, std::string& code,
                     std::string& message) {
  json j;
  json_limits limits;
  limits.max_depth = max_answer_depth;
  if (!parse_bounded(body, j, limits).empty() || !j.is_object())
    return;
  auto e = j.find("error");
  if (e == j.end() || !e->is_object())
    return;
  if (auto c = e->find("code"); c != e->end() && c->is_string())
    code = c->get<std::string>();
  if (auto m = e->find("message"); m != e->end() && m->is_string())
    message = truncate_for_message(m->get<std::string>(), 1000);
}

caf::error timeout_error() {
  return caf::make_error(caf::sec::request_timeout);
}

/// Parses a JSON answer, or says what is wrong with it.
caf::error parse_answer(remote_op op, const remote_provider_config& cfg,
                        const http_outcome& out, json& j) {
  json_limits limits;
  limits.max_depth = max_answer_depth;
  auto problem = parse_bounded(out.response.body, j, limits);
  if (problem.empty())
    return caf::none;
  return make_error(provider_errc::sandbox_error,
                    server(cfg) + " answered " + std::string{to_string(op)} +
                      " with JSON that does not parse: " + problem);
}

caf::error bad_answer(remote_op op, const remote_provider_config& cfg,
                      const std::string& what) {
  return make_error(provider_errc::sandbox_error, server(cfg) + " answered " +
                                                    std::string{to_string(op)} +
                                                    " with " + what);
}

} // namespace

std::string_view to_string(remote_op x) {
  switch (x) {
  case remote_op::create:
    return "create";
  case remote_op::status:
    return "status";
  case remote_op::upload:
    return "upload";
  case remote_op::exec:
    return "exec";
  case remote_op::download:
    return "download";
  case remote_op::stop:
    return "stop";
  }
  return "?";
}

std::string new_idempotency_key() {
  static std::mutex mtx;
  static std::mt19937_64 gen{[] {
    std::random_device rd;
    std::seed_seq seq{rd(), rd(), rd(), rd(), rd(), rd(), rd(), rd()};
    return std::mt19937_64{seq};
  }()};
  uint64_t a, b;
  {
    std::lock_guard<std::mutex> guard{mtx};
    a = gen();
    b = gen();
  }
  static constexpr char digits[] = "0123456789abcdef";
  std::string out(32, '0');
  for (int i = 0; i < 16; ++i) {
    out[15 - i] = digits[(a >> (4 * i)) & 0xf];
    out[31 - i] = digits[(b >> (4 * i)) & 0xf];
  }
  return out;
}

std::string percent_encode(std::string_view s) {
  static constexpr char digits[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
        (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
        c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += digits[c >> 4];
      out += digits[c & 0xf];
    }
  }
  return out;
}

double create_deadline_s(const remote_provider_config& cfg,
                         const sandbox_spec& spec) {
  if (spec.create_deadline_s > 0)
    return spec.create_deadline_s;
  return std::max(cfg.timeout_s, spec.ready_timeout_s);
}

http_request make_create(const remote_provider_config& cfg,
                         const sandbox_spec& spec, const std::string& key,
                         double deadline_s) {
  json body = spec;
  // sv-serve gives a sandbox without a TTL its default TTL, but its strict
  // reader refuses `"ttl_s": 0`: leave it out.
  if (!(spec.ttl_s > 0))
    body.erase("ttl_s");
  auto r = with_json(base(cfg, "POST", "/v1/sandboxes", deadline_s), body);
  r.headers.emplace_back("Idempotency-Key", key);
  r.idempotent = true; // the key makes it so
  return r;
}

http_request make_status(const remote_provider_config& cfg,
                         const std::string& id) {
  auto r = base(cfg, "GET", sandbox_target(id), cfg.timeout_s);
  r.idempotent = true;
  return r;
}

http_request make_identity(const remote_provider_config& cfg,
                           const std::string& python) {
  auto r = base(cfg, "GET", "/v1/identity?python=" + percent_encode(python),
                cfg.timeout_s);
  r.idempotent = true;
  return r;
}

http_request make_upload(const remote_provider_config& cfg,
                         const std::string& id, const std::string& dir,
                         const file_map& files) {
  auto r =
    with_json(base(cfg, "PUT", sandbox_target(id) + "/files", cfg.timeout_s),
              json{{"dir", dir}, {"files", files_to_json(files)}});
  r.idempotent = true; // the same files written again
  return r;
}

http_request make_exec(const remote_provider_config& cfg, const std::string& id,
                       const exec_request& x) {
  // Never sent twice: the command may have run.
  return with_json(base(cfg, "POST", sandbox_target(id) + "/exec",
                        x.timeout_s + cfg.exec_grace_s),
                   x);
}

http_request make_download(const remote_provider_config& cfg,
                           const std::string& id, const std::string& path) {
  auto r =
    base(cfg, "GET", sandbox_target(id) + "/files?path=" + percent_encode(path),
         cfg.timeout_s);
  r.idempotent = true;
  return r;
}

http_request make_stop(const remote_provider_config& cfg,
                       const std::string& id) {
  auto r = base(cfg, "DELETE", sandbox_target(id), cfg.timeout_s);
  r.idempotent = true;
  return r;
}

caf::error error_of(remote_op op, const remote_provider_config& cfg,
                    const http_outcome& out) {
  auto what = std::string{to_string(op)};
  if (!out.ok) {
    if (out.failure == http_failure_kind::timeout)
      return timeout_error();
    if (out.failure == http_failure_kind::shutdown)
      return make_error(provider_errc::unavailable,
                        "the remote provider is shutting down");
    if (out.failure == http_failure_kind::too_large &&
        op == remote_op::download)
      return make_error(provider_errc::too_large, out.message);
    return make_error(provider_errc::sandbox_error,
                      what + " on " + server(cfg) + " failed (" +
                        to_string(out.failure) + "): " + out.message);
  }
  auto status = out.response.status;
  std::string code;
  std::string message;
  read_error_body(out.response.body, code, message);
  auto said = server(cfg) + " answered " + what + " with " +
              std::to_string(status) + (code.empty() ? "" : " " + code) +
              (message.empty() ? "" : ": " + message);
  provider_errc named = provider_errc::sandbox_error;
  // The server names a provider's own error by its provider_errc name
  // (`unavailable` aside: there, only the server's provider is going).
  if (errc_of(code, named) && named != provider_errc::unavailable &&
      ((status >= 400 && status < 500) || status == 500))
    return make_error(named, said);
  switch (status) {
  case 400:
  case 409:
  case 413:
  case 422:
    return make_error(provider_errc::invalid_argument, said);
  case 404:
    return make_error(provider_errc::no_such_sandbox, said);
  case 504:
    return timeout_error();
  default:
    // 401 (the token), 429 (overloaded), 5xx and anything else
    // unexpected: the server cannot serve this call now.
    return make_error(provider_errc::sandbox_error, said);
  }
}

bool create_may_retry(const http_outcome& out) {
  if (!out.ok)
    return out.failure == http_failure_kind::connect ||
           out.failure == http_failure_kind::lost;
  return out.response.status == 503 || out.response.status == 429;
}

caf::expected<sandbox_handle> read_create(const remote_provider_config& cfg,
                                          const http_outcome& out) {
  if (!out.ok || (out.response.status != 201 && out.response.status != 200))
    return error_of(remote_op::create, cfg, out);
  json j;
  if (auto err = parse_answer(remote_op::create, cfg, out, j))
    return err;
  auto id = j.is_object() ? j.find("sandbox_id") : j.end();
  if (id == j.end() || !id->is_string() || id->get<std::string>().empty())
    return bad_answer(remote_op::create, cfg, "no sandbox_id");
  sandbox_handle h;
  h.sandbox_id = id->get<std::string>();
  h.provider_name = "remote";
  h.state = cfg.url;
  return h;
}

caf::expected<sandbox_status> read_status(const remote_provider_config& cfg,
                                          const http_outcome& out) {
  if (!out.ok || out.response.status != 200)
    return error_of(remote_op::status, cfg, out);
  json j;
  if (auto err = parse_answer(remote_op::status, cfg, out, j))
    return err;
  auto s = j.is_object() ? j.find("status") : j.end();
  sandbox_status x = sandbox_status::unknown;
  if (s == j.end() || !s->is_string() || !from_string(s->get<std::string>(), x))
    return bad_answer(remote_op::status, cfg, "no known status");
  return x;
}

caf::expected<ok_atom> read_done(remote_op op,
                                 const remote_provider_config& cfg,
                                 const http_outcome& out) {
  if (out.ok && out.response.status >= 200 && out.response.status < 300)
    return ok_atom::value;
  return error_of(op, cfg, out);
}

caf::expected<exec_result> read_exec(const remote_provider_config& cfg,
                                     const http_outcome& out) {
  if (!out.ok || out.response.status != 200)
    return error_of(remote_op::exec, cfg, out);
  json j;
  if (auto err = parse_answer(remote_op::exec, cfg, out, j))
    return err;
  try {
    auto x = j.get<exec_result>();
    mend_unknown_error_type(x);
    return x;
  } catch (const std::exception& e) {
    return bad_answer(remote_op::exec, cfg,
                      std::string{"an exec result that does not fit: "} +
                        e.what());
  }
}

caf::expected<std::string> read_download(const remote_provider_config& cfg,
                                         http_outcome& out) {
  if (!out.ok || out.response.status != 200)
    return error_of(remote_op::download, cfg, out);
  return std::move(out.response.body);
}

caf::expected<json> read_identity(const remote_provider_config& cfg,
                                  const http_outcome& out) {
  auto what = server(cfg) + " answered GET /v1/identity ";
  if (!out.ok)
    return make_error(provider_errc::sandbox_error,
                      server(cfg) +
                        ": GET /v1/identity failed: " + out.message);
  if (out.response.status != 200)
    return make_error(provider_errc::sandbox_error,
                      what + "with status " +
                        std::to_string(out.response.status) + ": " +
                        truncate_for_message(out.response.body));
  json_limits limits;
  limits.max_depth = max_answer_depth;
  json j;
  if (auto problem = parse_bounded(out.response.body, j, limits);
      !problem.empty())
    return make_error(provider_errc::sandbox_error,
                      what + "with JSON that does not parse: " + problem);
  auto i = j.is_object() ? j.find("identity") : j.end();
  if (i == j.end())
    return make_error(provider_errc::sandbox_error, what + "without identity");
  return json(*i);
}

} // namespace sv::remote
