#include "apps/sv_serve/execute.hpp"

#include "messages/json.hpp"

namespace sv::serve {

namespace {

sandbox_reply reply_of(unsigned status, const ordered_json& body) {
  sandbox_reply r;
  r.status = status;
  r.body = body.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
  return r;
}

std::optional<sandbox_reply> refuse(const std::string& message) {
  ordered_json body;
  body["error"] = message;
  return reply_of(400, body);
}

ordered_json result(const char* status, std::string out, std::string err) {
  ordered_json j = ordered_json::object();
  j["process_status"] = status;
  j["stdout"] = std::move(out);
  j["stderr"] = std::move(err);
  return j;
}

/// NeMo-Skills' names for our table's: python3 runs as python, shell as
/// bash; ipython (stateful sessions) has no equivalent here.
std::string table_name(const std::string& language) {
  if (language == "python3")
    return "python";
  if (language == "shell")
    return "bash";
  return language;
}

std::optional<sandbox_reply> read_language(const json& body,
                                           const compat_settings& settings,
                                           execute_call& out) {
  auto name = std::string{"ipython"}; // NeMo-Skills' default
  if (body.contains("language")) {
    if (!body["language"].is_string())
      return refuse("language: expected a string");
    name = body["language"].get<std::string>();
  }
  if (name == "ipython")
    return refuse("language: \"ipython\" keeps a session between calls; "
                  "here each call runs in a fresh sandbox: use \"python\"");
  std::string why;
  out.call.lang = usable_language(settings, "language", table_name(name), why);
  if (!out.call.lang)
    return refuse(why);
  out.any_exit_completes = out.call.lang->name == "python";
  return std::nullopt;
}

std::optional<sandbox_reply> read_output_limit(const json& body,
                                               execute_call& out) {
  if (!body.contains("max_output_characters"))
    return std::nullopt;
  auto& j = body["max_output_characters"];
  if (!j.is_number_integer() ||
      (!j.is_number_unsigned() && j.get<int64_t>() < 0))
    return refuse("max_output_characters: expected a non-negative integer");
  out.max_output_characters = static_cast<size_t>(j.get<uint64_t>());
  return std::nullopt;
}

} // namespace

std::optional<sandbox_reply> read_execute(const json& body, bool has_session,
                                          const compat_settings& settings,
                                          execute_call& out) {
  try {
    check_object(body, "execute request",
                 {"generated_code", "std_input", "language", "timeout",
                  "max_output_characters", "traceback_verbosity"});
  } catch (const json_error& e) {
    return refuse(e.what());
  }
  if (has_session)
    return refuse("X-Session-ID: sessions are not kept here (each call runs "
                  "in a fresh sandbox)");
  if (!body.contains("generated_code") || !body["generated_code"].is_string())
    return refuse("generated_code: required, a string");
  if (!body.contains("timeout"))
    return refuse("timeout: required, seconds");
  if (auto r = read_language(body, settings, out))
    return r;
  std::string why;
  if (!read_seconds_field(body, "timeout", settings, out.call.run_timeout_s,
                          why))
    return refuse(why);
  out.call.compile_timeout_s = out.call.run_timeout_s;
  out.timeout_text = body["timeout"];
  if (body.contains("std_input")) {
    if (!body["std_input"].is_string())
      return refuse("std_input: expected a string");
    out.call.stdin_text = body["std_input"].get<std::string>();
  } else {
    out.call.stdin_text = std::string{};
  }
  if (auto r = read_output_limit(body, out))
    return r;
  if (body.contains("traceback_verbosity")) {
    auto& v = body["traceback_verbosity"];
    if (!v.is_string() || (v != "Plain" && v != "plain"))
      return refuse("traceback_verbosity: only \"Plain\" (it shapes IPython "
                    "tracebacks, and no IPython runs here)");
  }
  out.call.front = "execute";
  out.call.code = body["generated_code"].get<std::string>();
  return std::nullopt;
}

std::string cut_output(const std::string& text, size_t max) {
  size_t chars = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    // A code point starts at every byte that is not a continuation byte.
    if ((static_cast<unsigned char>(text[i]) & 0xC0) == 0x80)
      continue;
    if (chars++ == max)
      return text.substr(0, i) + "<output cut>";
  }
  return text;
}

namespace {

std::string text_of(const ordered_json& r, const char* stream) {
  return r.is_object() && r[stream].is_string() ? r[stream].get<std::string>()
                                                : std::string{};
}

sandbox_reply infrastructure_failure(const std::string& message,
                                     failure_kind kind) {
  auto body = result("error", "", "sandbox error: " + message + "\n");
  body["mask_sample"] = true;
  body["failure_kind"] = std::string{to_string(kind)};
  return reply_of(504, body);
}

ordered_json ran(const runner_answer& a, const execute_call& call) {
  auto& c = a.compile_result;
  auto& r = a.run_result;
  if (command_status(c) == "TimeLimitExceeded" ||
      command_status(r) == "TimeLimitExceeded")
    return result("timeout", "",
                  "Execution timed out after " + call.timeout_text.dump() +
                    " seconds\n");
  // A compile that failed: its output, as an error.
  auto& last = r.is_object() ? r : c;
  auto code = last["return_code"].is_number_integer()
                ? last["return_code"].get<int64_t>()
                : int64_t{-1};
  auto status = (!r.is_object() || (code != 0 && !call.any_exit_completes))
                  ? "error"
                  : "completed";
  auto n = call.max_output_characters;
  return result(status, cut_output(text_of(last, "stdout"), n),
                cut_output(text_of(last, "stderr"), n));
}

} // namespace

sandbox_reply execute_reply(const verification_outcome& out,
                            const execute_call& call,
                            language_table& languages) {
  if (!out.ok) {
    if (out.failure.kind == failure_kind::invalid_request)
      return *refuse(out.failure.message);
    auto r = infrastructure_failure(describe_failure(out), out.failure.kind);
    if (out.failure.cause == failure_cause::overloaded)
      r.headers.emplace_back("Retry-After", "1");
    return r;
  }
  auto a = read_runner_answer(out);
  switch (a.what) {
  case runner_answer::kind::missing_program:
    languages.mark_missing(call.call.lang->name, a.detail);
    return *refuse("language: \"" + call.call.lang->name +
                   "\": " + languages.state(call.call.lang->name).reason);
  case runner_answer::kind::refused:
    return *refuse(a.detail);
  case runner_answer::kind::malformed:
    return infrastructure_failure(a.detail, failure_kind::verifier_error);
  case runner_answer::kind::ran:
    break;
  }
  for (auto* r : {&a.compile_result, &a.run_result})
    if (command_status(*r) == "Error")
      return infrastructure_failure(text_of(*r, "stderr"),
                                    failure_kind::verifier_error);
  return reply_of(200, ran(a, call));
}

} // namespace sv::serve
