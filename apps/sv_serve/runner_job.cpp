#include "apps/sv_serve/runner_job.hpp"

#include "messages/bounded_json.hpp"
#include "messages/validation.hpp"

#include <cmath>

namespace sv::serve {

namespace {

/// result.json is written by our runner: shallow.
constexpr size_t max_answer_depth = 8;

verification_config config_of(const language* lang,
                              const compat_settings& settings) {
  verification_config cfg;
  cfg.ready_timeout_s = settings.ready_timeout_s;
  if (lang) {
    cfg.image = lang->image;
    cfg.env = lang->env;
  }
  return cfg;
}

} // namespace

std::string user_path_problem(const std::string& path, const language& lang) {
  if (!is_confined_path(path))
    return "must be a relative path inside the call's directory (no '..', "
           "not absolute)";
  if (path == runner_file_name || path == request_file_name ||
      path == result_file_name || path == runner_log_name)
    return "is a file of the runner itself";
  if (path == lang.source)
    return "is the source file of language " + lang.name;
  return {};
}

const language* usable_language(const compat_settings& settings,
                                const std::string& field,
                                const std::string& name, std::string& why) {
  auto* lang = settings.languages.find(name);
  if (!lang) {
    why = field + ": \"" + truncate_for_message(name, 64) +
          "\" is not served here (served: ";
    auto names = settings.languages.names();
    for (size_t i = 0; i < names.size(); ++i)
      why += (i ? ", " : "") + names[i];
    why += "; GET /v1/languages lists them)";
    return nullptr;
  }
  auto st = settings.languages.state(name);
  if (st.known && !st.available) {
    why = field + ": \"" + name + "\": " + st.reason;
    return nullptr;
  }
  return lang;
}

bool read_seconds_field(const json& body, const char* key,
                        const compat_settings& settings, double& out,
                        std::string& why) {
  auto i = body.find(key);
  if (i == body.end())
    return true;
  if (!i->is_number() || !std::isfinite(i->get<double>()) ||
      i->get<double>() <= 0 || i->get<double>() > settings.max_timeout_s) {
    why = std::string{key} + ": expected seconds in (0, " +
          json(settings.max_timeout_s).dump() + "]";
    return false;
  }
  out = i->get<double>();
  return true;
}

verification_request make_runner_request(const runner_call& call,
                                         const compat_settings& settings) {
  verification_request req;
  req.id = call.front;
  req.config = config_of(call.lang, settings);
  req.config.resources.memory_mib = call.memory_mib;
  req.files = call.files;
  req.files[std::string{runner_file_name}] = std::string{runner_source()};
  req.files[call.lang->source] = call.code;
  auto compiles = !call.lang->compile.empty();
  req.request = json{
    {"mode", "run"},
    {"compile", compiles ? json(call.lang->compile) : json(nullptr)},
    {"run", call.lang->run},
    {"compile_timeout", call.compile_timeout_s},
    {"run_timeout", call.run_timeout_s},
    {"stdin", call.stdin_text ? json(*call.stdin_text) : json(nullptr)},
    {"fetch_files", call.fetch_files},
    {"max_output_bytes", settings.max_output_bytes},
    {"max_fetch_bytes", settings.max_fetch_bytes},
    {"max_result_bytes", settings.max_result_bytes},
  };
  req.exec_timeout_s = (compiles ? call.compile_timeout_s : 0) +
                       call.run_timeout_s + settings.runner_margin_s;
  req.metadata = json{{"front", call.front}, {"language", call.lang->name}};
  return req;
}

verification_request
make_probe_request(const std::string& image,
                   const std::vector<std::string>& programs,
                   const compat_settings& settings) {
  verification_request req;
  req.id = "languages-probe";
  req.config = config_of(nullptr, settings);
  req.config.image = image;
  req.files[std::string{runner_file_name}] = std::string{runner_source()};
  req.request = json{{"mode", "probe"}, {"programs", programs}};
  req.exec_timeout_s = settings.runner_margin_s;
  req.metadata = json{{"front", "languages-probe"}};
  return req;
}

namespace {

/// The outcome's result as a DOM (large results are kept as their text).
bool result_dom(const verification_outcome& out, json& storage,
                const json*& dom) {
  if (auto* text = json_text_of(out.result)) {
    json_limits limits;
    limits.max_depth = max_answer_depth;
    std::string_view view{reinterpret_cast<const char*>(text->data()),
                          text->size()};
    if (!parse_bounded(view, storage, limits).empty())
      return false;
    dom = &storage;
    return true;
  }
  dom = &out.result;
  return true;
}

bool string_or_null(const json& j) {
  return j.is_string() || j.is_null();
}

/// A CommandRunResult of the runner, checked and in SandboxFusion's order;
/// false when it is not one.
bool read_command(const json& j, ordered_json& out) {
  if (j.is_null()) {
    out = nullptr;
    return true;
  }
  if (!j.is_object() || !j.contains("status") || !j["status"].is_string())
    return false;
  auto status = j["status"].get<std::string>();
  if (status != "Finished" && status != "TimeLimitExceeded" &&
      status != "Error")
    return false;
  auto field = [&](const char* key) {
    return j.contains(key) ? j[key] : json(nullptr);
  };
  auto time = field("execution_time");
  auto code = field("return_code");
  auto out_text = field("stdout");
  auto err_text = field("stderr");
  if (!(time.is_null() ||
        (time.is_number() && std::isfinite(time.get<double>()))) ||
      !(code.is_null() || code.is_number_integer()) ||
      !string_or_null(out_text) || !string_or_null(err_text))
    return false;
  out = ordered_json::object();
  out["status"] = status;
  out["execution_time"] = ordered_json::parse(time.dump());
  out["return_code"] = ordered_json::parse(code.dump());
  out["stdout"] = out_text.is_null()
                    ? ordered_json(nullptr)
                    : ordered_json(out_text.get<std::string>());
  out["stderr"] = err_text.is_null()
                    ? ordered_json(nullptr)
                    : ordered_json(err_text.get<std::string>());
  return true;
}

runner_answer malformed(std::string what) {
  runner_answer a;
  a.what = runner_answer::kind::malformed;
  a.detail = "the runner's result.json is malformed: " + std::move(what);
  return a;
}

} // namespace

runner_answer read_runner_answer(const verification_outcome& out) {
  json storage;
  const json* dom = nullptr;
  if (!result_dom(out, storage, dom) || !dom->is_object())
    return malformed("not an object");
  auto& j = *dom;
  runner_answer a;
  if (j.contains("missing_program")) {
    if (!j["missing_program"].is_string())
      return malformed("missing_program");
    a.what = runner_answer::kind::missing_program;
    a.detail = j["missing_program"].get<std::string>();
    return a;
  }
  if (j.contains("refused")) {
    if (!j["refused"].is_string())
      return malformed("refused");
    a.what = runner_answer::kind::refused;
    a.detail = j["refused"].get<std::string>();
    return a;
  }
  if (!j.contains("compile_result") || !j.contains("run_result") ||
      !read_command(j["compile_result"], a.compile_result) ||
      !read_command(j["run_result"], a.run_result))
    return malformed("compile_result / run_result");
  auto files = j.contains("files") ? j["files"] : json::object();
  if (!files.is_object())
    return malformed("files");
  for (auto& [path, value] : files.items()) {
    if (!value.is_string())
      return malformed("files." + path);
    a.files[path] = value.get<std::string>();
  }
  a.what = runner_answer::kind::ran;
  return a;
}

json read_probe_answer(const verification_outcome& out) {
  json storage;
  const json* dom = nullptr;
  if (!result_dom(out, storage, dom) || !dom->is_object() ||
      !dom->contains("found") || !(*dom)["found"].is_object())
    return nullptr;
  return (*dom)["found"];
}

std::string command_status(const ordered_json& r) {
  return r.is_object() ? r["status"].get<std::string>() : std::string{};
}

std::string describe_failure(const verification_outcome& out) {
  auto& f = out.failure;
  return std::string{to_string(f.kind)} + " in " +
         std::string{to_string(f.state)} + " (" +
         std::string{to_string(f.cause)} + "): " + f.message;
}

} // namespace sv::serve
