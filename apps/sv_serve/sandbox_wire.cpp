#include "apps/sv_serve/sandbox_wire.hpp"

#include "messages/errors.hpp"

#include <caf/error.hpp>
#include <caf/sec.hpp>
#include <cctype>
#include <mutex>
#include <random>

namespace sv::serve {

// -- replies ------------------------------------------------------------------

sandbox_reply json_reply(unsigned status, const json& body) {
  sandbox_reply r;
  r.status = status;
  // Sandbox output and ids from the path may be any bytes: invalid UTF-8
  // becomes U+FFFD instead of an exception.
  r.body = body.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  return r;
}

sandbox_reply error_reply(unsigned status, std::string code,
                          std::string message) {
  return json_reply(
    status, json{{"error", {{"code", std::move(code)}, {"message", message}}}});
}

sandbox_reply no_content() {
  sandbox_reply r;
  r.status = 204;
  r.content_type.clear();
  return r;
}

sandbox_reply no_such_sandbox(const std::string& id) {
  return error_reply(404, "no_such_sandbox", "no sandbox " + id);
}

/// A provider's error as HTTP says it: the code is the provider_errc's
/// name, so a remote provider rebuilds the very error.
sandbox_reply provider_failure(const caf::error& err, const char* what) {
  auto message = std::string{what} + ": " + describe(err);
  if (err == caf::sec::request_timeout)
    return error_reply(504, "timeout", message);
  if (err == caf::sec::request_receiver_down)
    return error_reply(503, "unavailable", message);
  auto code = provider_error_code(err);
  if (code == 0)
    return error_reply(500, "internal", message);
  auto errc = static_cast<provider_errc>(code);
  auto name = std::string{to_string(errc)};
  switch (errc) {
  case provider_errc::no_such_sandbox:
  case provider_errc::not_found:
    return error_reply(404, name, message);
  case provider_errc::invalid_argument:
  case provider_errc::invalid_path:
  case provider_errc::not_regular_file:
    return error_reply(400, name, message);
  case provider_errc::unavailable:
    return error_reply(503, name, message);
  default:
    return error_reply(500, name, message);
  }
}

// -- routes -------------------------------------------------------------------

namespace {

constexpr std::string_view prefix = "/v1/sandboxes";

int hex_value(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

} // namespace

bool valid_idempotency_key(const std::string& key) {
  if (key.empty() || key.size() > max_idempotency_key)
    return false;
  for (unsigned char c : key)
    if (!std::isalnum(c) && c != '.' && c != '_' && c != ':' && c != '-')
      return false;
  return true;
}

bool is_media_type(std::string_view header, std::string_view media_type) {
  header = header.substr(0, header.find(';'));
  auto first = header.find_first_not_of(" \t");
  if (first == std::string_view::npos)
    return false;
  header = header.substr(first, header.find_last_not_of(" \t") - first + 1);
  if (header.size() != media_type.size())
    return false;
  for (size_t i = 0; i < header.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(header[i])) !=
        std::tolower(static_cast<unsigned char>(media_type[i])))
      return false;
  return true;
}

bool is_sandbox_path(std::string_view path) {
  return path == prefix ||
         (path.size() > prefix.size() &&
          path.substr(0, prefix.size() + 1) == "/v1/sandboxes/");
}

sandbox_target parse_sandbox_target(std::string_view method,
                                    std::string_view target) {
  using op = sandbox_op;
  sandbox_target t;
  auto q = target.find('?');
  if (q != std::string_view::npos) {
    t.query = std::string{target.substr(q + 1)};
    target = target.substr(0, q);
  }
  if (target == prefix || target == "/v1/sandboxes/") {
    t.allow = "POST";
    t.what = method == "POST" ? op::create : op::none;
    return t;
  }
  if (!is_sandbox_path(target))
    return t;
  auto rest = target.substr(prefix.size() + 1); // after "/v1/sandboxes/"
  auto slash = rest.find('/');
  t.id = std::string{rest.substr(0, slash)};
  auto tail =
    slash == std::string_view::npos ? std::string_view{} : rest.substr(slash);
  if (t.id.empty())
    return t;
  if (tail.empty()) {
    t.allow = "GET, DELETE";
    t.what = method == "GET"      ? op::status
             : method == "DELETE" ? op::stop
                                  : op::none;
  } else if (tail == "/files") {
    t.allow = "GET, PUT";
    t.what = method == "GET"   ? op::download
             : method == "PUT" ? op::upload
                               : op::none;
  } else if (tail == "/exec") {
    t.allow = "POST";
    t.what = method == "POST" ? op::exec : op::none;
  }
  return t;
}

/// The value of `name` in a query string, percent-decoded ('+' is a plus).
/// False when it is missing or badly escaped.
bool query_value(const std::string& query, std::string_view name,
                 std::string& out) {
  size_t pos = 0;
  while (pos <= query.size()) {
    auto end = query.find('&', pos);
    if (end == std::string::npos)
      end = query.size();
    std::string_view pair{query.data() + pos, end - pos};
    pos = end + 1;
    auto eq = pair.find('=');
    if (pair.substr(0, eq) != name || eq == std::string_view::npos)
      continue;
    auto raw = pair.substr(eq + 1);
    out.clear();
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] != '%') {
        out += raw[i];
        continue;
      }
      if (i + 2 >= raw.size())
        return false;
      auto hi = hex_value(raw[i + 1]);
      auto lo = hex_value(raw[i + 2]);
      if (hi < 0 || lo < 0)
        return false;
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    }
    return true;
  }
  return false;
}

std::string fresh_sandbox_id() {
  static std::mutex mtx;
  static std::mt19937_64 gen{[] {
    std::random_device rd;
    return (uint64_t{rd()} << 32) ^ rd();
  }()};
  static const char* hex = "0123456789abcdef";
  std::lock_guard<std::mutex> guard{mtx};
  std::string id = "sbx-";
  for (int i = 0; i < 2; ++i) {
    auto x = gen();
    for (int j = 0; j < 16; ++j, x >>= 4)
      id += hex[x & 15];
  }
  return id;
}

} // namespace sv::serve
