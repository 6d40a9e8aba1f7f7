#include "messages/batch_format.hpp"

#include "messages/bounded_json.hpp"
#include "messages/json.hpp"
#include "messages/validation.hpp"

#include <cmath>

namespace sv {

namespace {

parsed_line reject(uint64_t line_no, const json* doc, const std::string& what) {
  parsed_line out;
  std::string id;
  // The id of a line that names one, so the caller can match the failure.
  if (doc != nullptr && doc->is_object()) {
    auto i = doc->find("id");
    if (i != doc->end() && i->is_string())
      id = i->get<std::string>();
  }
  out.rejected.id_known = !id.empty();
  out.rejected.line = line_no;
  out.rejected.invalid = true;
  out.rejected.outcome = make_failed_outcome(
    std::move(id), failure_kind::invalid_request, verification_state::validate,
    failure_cause::invalid_request,
    "line " + std::to_string(line_no) + ": " + what);
  return out;
}

bool is_blank(std::string_view text) {
  return text.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

} // namespace

std::string parse_reason(const json::exception& e) {
  std::string_view what = e.what();
  if (auto i = what.find("] "); what.front() == '[' && i != what.npos)
    what.remove_prefix(i + 2);
  return std::string{what};
}

parsed_line parse_batch_line(std::string_view text, uint64_t line_no,
                             const std::string& default_work_dir,
                             const json_limits& limits) {
  if (!text.empty() && text.back() == '\r')
    text.remove_suffix(1);
  if (is_blank(text))
    return reject(line_no, nullptr, "empty line (expected a JSON object)");
  json doc;
  if (auto err = parse_bounded(text, doc, limits); !err.empty())
    return reject(line_no, nullptr, "not valid JSON: " + err);
  parsed_line out;
  try {
    from_json(doc, out.request);
  } catch (const json_error& e) {
    return reject(line_no, &doc, e.what());
  }
  if (!default_work_dir.empty() && !doc.contains("work_dir"))
    out.request.work_dir = default_work_dir;
  if (auto err = validate(out.request); !err.empty())
    return reject(line_no, &doc, err);
  out.ok = true;
  return out;
}

output_line_parts render_output_parts(const batch_entry& entry) {
  auto& x = entry.outcome;
  // Replace invalid UTF-8 (say, in a runner log tail) instead of throwing.
  auto dump = [](const json& j) {
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
  };
  // The contract's key order, so that a person reading the output sees the
  // id first. Built piecewise: a result kept as text is never copied.
  output_line_parts out;
  auto& head = out.head;
  head = "{\"id\":";
  head += entry.invalid && !entry.id_known ? "null" : dump(json(x.id));
  head += x.ok ? ",\"ok\":true,\"mask_sample\":false,\"result\":"
               : ",\"ok\":false,\"mask_sample\":true,\"result\":";
  if (!x.ok)
    head += "null";
  else if (out.result_text = json_text_of(x.result); out.result_text == nullptr)
    head += dump(x.result);
  auto& tail = out.tail;
  tail = ",\"failure\":";
  tail += x.ok ? "null" : dump(json(x.failure));
  tail += ",\"timings_ms\":" + dump(json(x.timings));
  if (x.cached)
    tail += ",\"cached\":true";
  tail += ",\"attempts\":" + std::to_string(x.attempts);
  if (!x.node.empty())
    tail += ",\"node\":" + dump(json(x.node));
  tail += ",\"line\":" + std::to_string(entry.line) + "}";
  return out;
}

std::string render_output_line(const batch_entry& entry) {
  auto parts = render_output_parts(entry);
  if (parts.result_text != nullptr)
    parts.head.append(parts.result_text->begin(), parts.result_text->end());
  return parts.head + parts.tail;
}

bool parse_result_text(const std::string& text, json& result,
                       std::string& error, const json_limits& limits,
                       size_t dom_max_bytes) {
  if (text.size() <= dom_max_bytes) {
    error = parse_bounded(text, result, limits);
    if (error.empty() && !result.is_object())
      error = std::string{"expected a JSON object, got "} + result.type_name();
    return error.empty();
  }
  // Large results stay text: a DOM costs ~10x the text for small numbers.
  json_text_info info;
  error = check_bounded(text, info, limits);
  if (error.empty() && !info.is_object)
    error = "expected a JSON object";
  if (!error.empty())
    return false;
  result = make_json_text_value(minify_json_text(text), info.reward);
  return true;
}

verification_outcome make_failed_outcome(std::string id, failure_kind kind,
                                         verification_state state,
                                         failure_cause cause,
                                         std::string message) {
  verification_outcome out;
  out.id = std::move(id);
  out.ok = false;
  out.failure.kind = kind;
  out.failure.state = state;
  out.failure.cause = cause;
  out.failure.message = std::move(message);
  out.attempts = 0; // never started
  return out;
}

std::chrono::milliseconds reply_timeout(const verification_request& req,
                                        std::chrono::seconds margin) {
  auto& c = req.config;
  double seconds = c.ready_timeout_s + c.upload_timeout_s + req.exec_timeout_s +
                   c.exec_grace_s + c.download_timeout_s + c.stop_timeout_s;
  auto ms = static_cast<int64_t>(std::ceil(seconds * 1000.0));
  return std::chrono::milliseconds{ms} + margin;
}

} // namespace sv
