#include "apps/sv_serve/run_code.hpp"

#include "apps/sv_serve/base64.hpp"
#include "messages/bounded_json.hpp"
#include "messages/json.hpp"

namespace sv::serve {

namespace {

std::string dump(const ordered_json& j) {
  return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

sandbox_reply reply_of(unsigned status, const ordered_json& body) {
  sandbox_reply r;
  r.status = status;
  r.body = dump(body);
  return r;
}

/// SandboxFusion's RunCodeResponse, keys in its order.
ordered_json response(const char* status, const std::string& message) {
  ordered_json j = ordered_json::object();
  j["status"] = status;
  j["message"] = message;
  j["compile_result"] = nullptr;
  j["run_result"] = nullptr;
  j["executor_pod_name"] = nullptr;
  j["files"] = ordered_json::object();
  return j;
}

std::optional<sandbox_reply> refuse(const std::string& message) {
  return run_code_error(400, message);
}

/// `files`: path -> base64 (or null: left out, as SandboxFusion does).
std::optional<sandbox_reply>
read_files(const json& j, const compat_settings& settings, runner_call& out) {
  if (!j.is_object())
    return refuse("files: expected an object of path -> base64");
  if (j.size() > settings.max_files)
    return refuse("files: more than " + std::to_string(settings.max_files) +
                  " files");
  for (auto& [path, value] : j.items()) {
    auto field = "files." + truncate_for_message(path, 100);
    if (value.is_null())
      continue;
    if (!value.is_string())
      return refuse(field + ": expected base64 text or null");
    if (auto why = user_path_problem(path, *out.lang); !why.empty())
      return refuse(field + ": " + why);
    std::string bytes, why;
    if (!base64_decode(value.get_ref<const std::string&>(), bytes, why))
      return refuse(field + ": not base64: " + why);
    out.files[path] = std::move(bytes);
  }
  return std::nullopt;
}

std::optional<sandbox_reply> read_fetch_files(const json& j,
                                              const compat_settings& settings,
                                              runner_call& out) {
  if (!j.is_array())
    return refuse("fetch_files: expected an array of paths");
  if (j.size() > settings.max_files)
    return refuse("fetch_files: more than " +
                  std::to_string(settings.max_files) + " paths");
  for (size_t i = 0; i < j.size(); ++i) {
    auto field = "fetch_files[" + std::to_string(i) + "]";
    if (!j[i].is_string())
      return refuse(field + ": expected a path");
    auto path = j[i].get<std::string>();
    if (auto why = user_path_problem(path, *out.lang);
        !why.empty() && path != out.lang->source)
      return refuse(field + ": " + why);
    out.fetch_files.push_back(std::move(path));
  }
  return std::nullopt;
}

std::optional<sandbox_reply> read_memory(const json& j, runner_call& out) {
  // SandboxFusion's default -1 (and 0) mean "no limit of the call's own":
  // the provider's default applies.
  if (!j.is_number_integer() ||
      (j.is_number_integer() && j.get<int64_t>() < -1))
    return refuse("memory_limit_MB: expected -1 (the provider's default) or "
                  "a number of megabytes");
  out.memory_mib = std::max<int64_t>(0, j.get<int64_t>());
  return std::nullopt;
}

} // namespace

sandbox_reply run_code_error(unsigned status, const std::string& message) {
  return reply_of(status, response("SandboxError", message));
}

std::optional<sandbox_reply> read_run_code(const json& body,
                                           const compat_settings& settings,
                                           runner_call& out) {
  try {
    check_object(body, "run_code request",
                 {"code", "language", "compile_timeout", "run_timeout",
                  "memory_limit_MB", "stdin", "files", "fetch_files"});
  } catch (const json_error& e) {
    return refuse(e.what());
  }
  out.front = "run_code";
  if (!body.contains("code") || !body["code"].is_string())
    return refuse("code: required, a string");
  if (!body.contains("language") || !body["language"].is_string())
    return refuse("language: required, a string");
  std::string why;
  out.lang = usable_language(settings, "language",
                             body["language"].get<std::string>(), why);
  if (!out.lang)
    return refuse(why);
  out.code = body["code"].get<std::string>();
  if (!read_seconds_field(body, "compile_timeout", settings,
                          out.compile_timeout_s, why) ||
      !read_seconds_field(body, "run_timeout", settings, out.run_timeout_s,
                          why))
    return refuse(why);
  if (body.contains("memory_limit_MB"))
    if (auto r = read_memory(body["memory_limit_MB"], out))
      return r;
  if (body.contains("stdin") && !body["stdin"].is_null()) {
    if (!body["stdin"].is_string())
      return refuse("stdin: expected a string or null");
    out.stdin_text = body["stdin"].get<std::string>();
  }
  if (body.contains("files"))
    if (auto r = read_files(body["files"], settings, out))
      return r;
  if (body.contains("fetch_files"))
    if (auto r = read_fetch_files(body["fetch_files"], settings, out))
      return r;
  return std::nullopt;
}

namespace {

/// SandboxFusion's parse_run_status: an `Error` is the sandbox's; a timeout
/// or a non-zero exit is the program's failure.
const char* run_status(const runner_answer& a, std::string& error_message) {
  for (auto* r : {&a.compile_result, &a.run_result})
    if (command_status(*r) == "Error") {
      error_message = (*r)["stderr"].is_string()
                        ? (*r)["stderr"].get<std::string>()
                        : std::string{"a command could not be run"};
      return "SandboxError";
    }
  for (auto* r : {&a.compile_result, &a.run_result}) {
    if (command_status(*r) == "TimeLimitExceeded")
      return "Failed";
    if (r->is_object() && (*r)["return_code"].is_number_integer() &&
        (*r)["return_code"].get<int64_t>() != 0)
      return "Failed";
  }
  return "Success";
}

sandbox_reply failure_reply(const verification_outcome& out) {
  if (out.failure.kind == failure_kind::invalid_request)
    return run_code_error(400, out.failure.message);
  auto body =
    response("SandboxError", "sandbox error (" + describe_failure(out) +
                               "); the call may be retried");
  body["failure_kind"] = std::string{to_string(out.failure.kind)};
  body["mask_sample"] = true;
  auto r = reply_of(504, body);
  if (out.failure.cause == failure_cause::overloaded)
    r.headers.emplace_back("Retry-After", "1");
  return r;
}

} // namespace

sandbox_reply run_code_reply(const verification_outcome& out,
                             const runner_call& call,
                             language_table& languages) {
  if (!out.ok)
    return failure_reply(out);
  auto a = read_runner_answer(out);
  switch (a.what) {
  case runner_answer::kind::missing_program:
    languages.mark_missing(call.lang->name, a.detail);
    return run_code_error(400, "language: \"" + call.lang->name + "\": " +
                                 languages.state(call.lang->name).reason);
  case runner_answer::kind::refused:
    return run_code_error(400, a.detail);
  case runner_answer::kind::malformed: {
    auto body = response("SandboxError", a.detail);
    body["failure_kind"] = "verifier_error";
    body["mask_sample"] = true;
    return reply_of(504, body);
  }
  case runner_answer::kind::ran:
    break;
  }
  std::string error_message;
  auto status = run_status(a, error_message);
  auto body = response(status, error_message);
  body["compile_result"] = std::move(a.compile_result);
  body["run_result"] = std::move(a.run_result);
  if (!out.node.empty())
    body["executor_pod_name"] = out.node;
  for (auto& [path, data] : a.files)
    body["files"][path] = std::move(data);
  if (std::string{status} == "SandboxError") {
    body["failure_kind"] = "verifier_error";
    body["mask_sample"] = true;
    return reply_of(504, body);
  }
  return reply_of(200, body);
}

} // namespace sv::serve
