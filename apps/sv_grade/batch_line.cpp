#include "apps/sv_grade/batch_line.hpp"

#include "messages/json.hpp"
#include "messages/validation.hpp"

#include <cmath>

namespace sv::grade {

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
                             const std::string& default_work_dir) {
  if (!text.empty() && text.back() == '\r')
    text.remove_suffix(1);
  if (is_blank(text))
    return reject(line_no, nullptr, "empty line (expected a JSON object)");
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {
    return reject(line_no, nullptr, "not valid JSON: " + parse_reason(e));
  }
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

std::string render_output_line(const batch_entry& entry) {
  json j = entry.outcome;
  // The contract's key order, so that a person reading the output sees the
  // id first.
  nlohmann::ordered_json out;
  out["id"] = entry.invalid && !entry.id_known ? json(nullptr) : j["id"];
  for (auto key : {"ok", "mask_sample", "result", "failure", "timings_ms"})
    out[key] = std::move(j[key]);
  if (entry.invalid)
    out["line"] = entry.line;
  // Replace invalid UTF-8 (say, in a runner log tail) instead of throwing.
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
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

} // namespace sv::grade
