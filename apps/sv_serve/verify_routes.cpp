#include "apps/sv_serve/verify_routes.hpp"

#include "messages/batch_format.hpp"

#include <string_view>

namespace sv::serve {

namespace {

/// The status of a graded submission's answer.
unsigned status_of(const verification_outcome& out) {
  if (out.ok)
    return 200;
  if (out.failure.kind == failure_kind::invalid_request)
    return 400;
  if (out.failure.cause == failure_cause::overloaded)
    return 429;
  return 200;
}

sandbox_reply reply(unsigned status, std::string body) {
  sandbox_reply r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

verify_plan plan_one(verify_call& call) {
  verify_plan plan;
  auto parsed = parse_batch_line(call.body, 1, {}, call.limits);
  call.body.clear();
  if (!parsed.ok) {
    // One body, no lines: the message names the field, not "line 1".
    auto& message = parsed.rejected.outcome.failure.message;
    if (message.rfind("line 1: ", 0) == 0)
      message.erase(0, 8);
    plan.reply = reply(400, render_output_line(parsed.rejected) + "\n");
    return plan;
  }
  plan.requests.emplace_back(1, std::move(parsed.request));
  return plan;
}

verify_plan plan_batch(verify_call& call) {
  verify_plan plan;
  plan.stream = true;
  auto& body = call.body;
  uint64_t line_no = 0;
  size_t pos = 0;
  while (pos < body.size()) {
    auto end = body.find('\n', pos);
    if (end == std::string::npos)
      end = body.size();
    std::string_view text{body.data() + pos, end - pos};
    if (!text.empty() && text.back() == '\r')
      text.remove_suffix(1);
    pos = end + 1;
    auto parsed = parse_batch_line(text, ++line_no, {}, call.limits);
    if (parsed.ok)
      plan.requests.emplace_back(line_no, std::move(parsed.request));
    else
      plan.rejected_lines.push_back(render_output_line(parsed.rejected) + "\n");
  }
  body.clear();
  return plan;
}

} // namespace

verify_plan plan_verify_call(verify_call call) {
  if (call.draining) {
    verify_plan plan;
    plan.reply = error_reply(503, "draining", "draining: no new work");
    return plan;
  }
  return call.batch ? plan_batch(call) : plan_one(call);
}

std::string verify_line(uint64_t line, verification_outcome out) {
  batch_entry entry;
  entry.line = line;
  entry.outcome = std::move(out);
  return render_output_line(entry) + "\n";
}

sandbox_reply verify_reply(uint64_t line, verification_outcome out) {
  auto status = status_of(out);
  auto r = reply(status, verify_line(line, std::move(out)));
  if (status == 429)
    r.headers.emplace_back("Retry-After", "1");
  return r;
}

sandbox_reply identity_reply(
  const std::string& target,
  const std::function<json(const verification_config&)>& identity) {
  auto q = target.find('?');
  verification_config cfg;
  if (q != std::string::npos &&
      !query_value(target.substr(q + 1), "python", cfg.python))
    return error_reply(400, "invalid_request",
                       "python: a bad escape in the query");
  if (cfg.python.empty() || !identity)
    return error_reply(400, "invalid_request", "python: missing");
  try {
    return reply(200, json{{"identity", identity(cfg)}}.dump() + "\n");
  } catch (const std::exception& e) {
    return error_reply(500, "internal", e.what());
  }
}

} // namespace sv::serve
