#include "messages/json.hpp"

#include "messages/detail/base64.hpp"

#include <cmath>
#include <initializer_list>
#include <string_view>

namespace sv {

json_error::json_error(std::string path, std::string what)
    : std::runtime_error(path.empty() ? what : path + ": " + what),
      path_(std::move(path)), reason_(std::move(what)) {
  // nop
}

namespace {

std::string join_path(std::string_view head, const std::string& tail) {
  std::string out{head};
  if (!tail.empty()) {
    out += tail.front() == '[' ? "" : ".";
    out += tail;
  }
  return out;
}

[[noreturn]] void fail_type(const json& v, const char* expected) {
  throw json_error("", std::string{"expected "} + expected + ", got " +
                         v.type_name());
}

// -- reading single values ----------------------------------------------------

void read(const json& v, std::string& out) {
  if (!v.is_string())
    fail_type(v, "a string");
  out = v.get_ref<const std::string&>();
}

void read(const json& v, double& out) {
  if (!v.is_number())
    fail_type(v, "a number");
  out = v.get<double>();
  if (!std::isfinite(out))
    throw json_error("", "expected a finite number");
}

void read(const json& v, int64_t& out) {
  if (!v.is_number_integer())
    fail_type(v, "an integer");
  out = v.get<int64_t>();
}

void read(const json& v, int32_t& out) {
  int64_t tmp = 0;
  read(v, tmp);
  if (tmp < INT32_MIN || tmp > INT32_MAX)
    throw json_error("", "integer out of range");
  out = static_cast<int32_t>(tmp);
}

void read(const json& v, bool& out) {
  if (!v.is_boolean())
    fail_type(v, "true or false");
  out = v.get<bool>();
}

void read(const json& v, uint32_t& out) {
  if (!v.is_number_unsigned() || v.get<uint64_t>() > UINT32_MAX)
    fail_type(v, "a non-negative integer");
  out = v.get<uint32_t>();
}

void read(const json& v, json& out) {
  out = v;
}

void read(const json& v, std::map<std::string, std::string>& out) {
  if (!v.is_object())
    fail_type(v, "an object of strings");
  out.clear();
  for (auto& [key, value] : v.items()) {
    if (!value.is_string())
      throw json_error(key, std::string{"expected a string, got "} +
                              value.type_name());
    out.emplace(key, value.get_ref<const std::string&>());
  }
}

void read(const json& v, std::vector<std::string>& out) {
  if (!v.is_array())
    fail_type(v, "an array of strings");
  out.clear();
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string())
      throw json_error("[" + std::to_string(i) + "]",
                       std::string{"expected a string, got "} +
                         v[i].type_name());
    out.push_back(v[i].get_ref<const std::string&>());
  }
}

template <class Enum>
void read_enum(const json& v, Enum& out) {
  if (!v.is_string())
    fail_type(v, "a string");
  if (!from_string(v.get_ref<const std::string&>(), out))
    throw json_error("", "unknown value \"" + v.get<std::string>() +
                           "\" (allowed: " + allowed_names<Enum>() + ")");
}

template <class T>
void read(const json& v, T& out) {
  if constexpr (std::is_enum<T>::value)
    read_enum(v, out);
  else
    from_json(v, out);
}

// -- reading objects ----------------------------------------------------------

} // namespace

void check_object(const json& j, const char* type,
                  std::initializer_list<std::string_view> allowed) {
  if (!j.is_object())
    throw json_error("", std::string{"expected a "} + type + " object, got " +
                           j.type_name());
  for (auto& item : j.items()) {
    bool known = false;
    for (auto key : allowed)
      known = known || key == item.key();
    if (!known) {
      std::string names;
      for (auto key : allowed) {
        if (!names.empty())
          names += ", ";
        names += key;
      }
      throw json_error(item.key(), "unknown key in " + std::string{type} +
                                     " (allowed: " + names + ")");
    }
  }
}

namespace {

/// Reads `j[key]` into `out` when present; prefixes errors with the key.
template <class T>
bool field(const json& j, const char* key, T& out) {
  auto i = j.find(key);
  if (i == j.end())
    return false;
  try {
    read(*i, out);
  } catch (const json_error& e) {
    throw json_error(join_path(key, e.path()), e.reason());
  }
  return true;
}

/// Like `field`, but a missing key is an error.
template <class T>
void required(const json& j, const char* key, T& out) {
  if (!field(j, key, out))
    throw json_error(key, "missing required field");
}

void check_timeout(const char* key, double value) {
  if (!(value > 0) || value > 7 * 24 * 3600.0)
    throw json_error(key, "must be a number of seconds in (0, 604800]");
}

} // namespace

// -- enums --------------------------------------------------------------------

#define SV_ENUM_JSON(type)                                                     \
  void to_json(json& j, type x) {                                              \
    j = std::string{to_string(x)};                                             \
  }                                                                            \
  void from_json(const json& j, type& x) {                                     \
    read_enum(j, x);                                                           \
  }

SV_ENUM_JSON(sandbox_status)
SV_ENUM_JSON(exec_error_type)
SV_ENUM_JSON(failure_kind)
SV_ENUM_JSON(verification_state)
SV_ENUM_JSON(failure_cause)

#undef SV_ENUM_JSON

// -- sandboxes ----------------------------------------------------------------

void to_json(json& j, const sandbox_resources& x) {
  j = json::object();
  if (x.cpu > 0)
    j["cpu"] = x.cpu;
  if (x.memory_mib > 0)
    j["memory_mib"] = x.memory_mib;
  if (x.disk_gib > 0)
    j["disk_gib"] = x.disk_gib;
  if (x.gpu > 0)
    j["gpu"] = x.gpu;
  if (!x.gpu_type.empty())
    j["gpu_type"] = x.gpu_type;
}

void from_json(const json& j, sandbox_resources& x) {
  check_object(j, "sandbox_resources",
               {"cpu", "memory_mib", "disk_gib", "gpu", "gpu_type"});
  x = sandbox_resources();
  if (field(j, "cpu", x.cpu) && x.cpu <= 0)
    throw json_error("cpu", "must be positive");
  if (field(j, "memory_mib", x.memory_mib) && x.memory_mib <= 0)
    throw json_error("memory_mib", "must be positive");
  if (field(j, "disk_gib", x.disk_gib) && x.disk_gib <= 0)
    throw json_error("disk_gib", "must be positive");
  if (field(j, "gpu", x.gpu) && x.gpu < 0)
    throw json_error("gpu", "must not be negative");
  field(j, "gpu_type", x.gpu_type);
}

void to_json(json& j, const sandbox_spec& x) {
  j = json{{"image", x.image},
           {"ttl_s", x.ttl_s},
           {"ready_timeout_s", x.ready_timeout_s},
           {"workdir", x.workdir},
           {"env", x.env},
           {"metadata", x.metadata},
           {"resources", x.resources},
           {"provider_options", x.provider_options}};
}

void from_json(const json& j, sandbox_spec& x) {
  check_object(j, "sandbox_spec",
               {"image", "ttl_s", "ready_timeout_s", "workdir", "env",
                "metadata", "resources", "provider_options"});
  x = sandbox_spec();
  field(j, "image", x.image);
  // 0 (what to_json writes for an unset TTL) is the provider's default.
  if (field(j, "ttl_s", x.ttl_s) && x.ttl_s != 0)
    check_timeout("ttl_s", x.ttl_s);
  if (field(j, "ready_timeout_s", x.ready_timeout_s))
    check_timeout("ready_timeout_s", x.ready_timeout_s);
  field(j, "workdir", x.workdir);
  field(j, "env", x.env);
  field(j, "metadata", x.metadata);
  field(j, "resources", x.resources);
  field(j, "provider_options", x.provider_options);
}

void to_json(json& j, const sandbox_handle& x) {
  j = json{{"sandbox_id", x.sandbox_id},
           {"provider_name", x.provider_name},
           {"state", x.state}};
}

void from_json(const json& j, sandbox_handle& x) {
  check_object(j, "sandbox_handle", {"sandbox_id", "provider_name", "state"});
  x = sandbox_handle();
  required(j, "sandbox_id", x.sandbox_id);
  field(j, "provider_name", x.provider_name);
  field(j, "state", x.state);
}

void to_json(json& j, const exec_request& x) {
  j = json{{"argv", x.argv},
           {"cwd", x.cwd},
           {"env", x.env},
           {"timeout_s", x.timeout_s},
           {"log_path", x.log_path}};
}

void from_json(const json& j, exec_request& x) {
  check_object(j, "exec_request",
               {"argv", "cwd", "env", "timeout_s", "log_path"});
  x = exec_request();
  required(j, "argv", x.argv);
  if (x.argv.empty())
    throw json_error("argv", "must not be empty");
  field(j, "cwd", x.cwd);
  field(j, "env", x.env);
  required(j, "timeout_s", x.timeout_s);
  check_timeout("timeout_s", x.timeout_s);
  field(j, "log_path", x.log_path);
}

void to_json(json& j, const exec_result& x) {
  j = json{{"stdout", x.stdout_text},      {"stderr", x.stderr_text},
           {"return_code", x.return_code}, {"error_type", x.error_type},
           {"message", x.message},         {"log_tail", x.log_tail}};
}

void from_json(const json& j, exec_result& x) {
  check_object(
    j, "exec_result",
    {"stdout", "stderr", "return_code", "error_type", "message", "log_tail"});
  x = exec_result();
  field(j, "stdout", x.stdout_text);
  field(j, "stderr", x.stderr_text);
  required(j, "return_code", x.return_code);
  field(j, "error_type", x.error_type);
  field(j, "message", x.message);
  field(j, "log_tail", x.log_tail);
}

// -- verifications ------------------------------------------------------------

void to_json(json& j, const verification_config& x) {
  j = json{{"env", x.env},
           {"image", x.image},
           {"metadata", x.metadata},
           {"provider_options", x.provider_options},
           {"python", x.python},
           {"ready_timeout_s", x.ready_timeout_s},
           {"upload_timeout_s", x.upload_timeout_s},
           {"download_timeout_s", x.download_timeout_s},
           {"stop_timeout_s", x.stop_timeout_s},
           {"exec_grace_s", x.exec_grace_s},
           {"resources", x.resources}};
}

void from_json(const json& j, verification_config& x) {
  check_object(j, "verification_config",
               {"env", "image", "metadata", "provider_options", "python",
                "ready_timeout_s", "upload_timeout_s", "download_timeout_s",
                "stop_timeout_s", "exec_grace_s", "resources"});
  x = verification_config();
  field(j, "env", x.env);
  field(j, "image", x.image);
  if (field(j, "metadata", x.metadata) && !x.metadata.is_object())
    throw json_error("metadata", "expected an object");
  if (field(j, "provider_options", x.provider_options) &&
      !x.provider_options.is_object())
    throw json_error("provider_options", "expected an object");
  if (field(j, "python", x.python) && x.python.empty())
    throw json_error("python", "must not be empty");
  if (field(j, "ready_timeout_s", x.ready_timeout_s))
    check_timeout("ready_timeout_s", x.ready_timeout_s);
  if (field(j, "upload_timeout_s", x.upload_timeout_s))
    check_timeout("upload_timeout_s", x.upload_timeout_s);
  if (field(j, "download_timeout_s", x.download_timeout_s))
    check_timeout("download_timeout_s", x.download_timeout_s);
  if (field(j, "stop_timeout_s", x.stop_timeout_s))
    check_timeout("stop_timeout_s", x.stop_timeout_s);
  if (field(j, "exec_grace_s", x.exec_grace_s))
    check_timeout("exec_grace_s", x.exec_grace_s);
  field(j, "resources", x.resources);
}

void to_json(json& j, const verification_request& x) {
  j = json{{"id", x.id},
           {"config", x.config},
           {"files", files_to_json(x.files)},
           {"request", x.request},
           {"exec_timeout_s", x.exec_timeout_s},
           {"metadata", x.metadata},
           {"work_dir", x.work_dir}};
}

void from_json(const json& j, verification_request& x) {
  check_object(j, "verification_request",
               {"id", "config", "files", "request", "exec_timeout_s",
                "metadata", "work_dir"});
  x = verification_request();
  required(j, "id", x.id);
  if (x.id.empty())
    throw json_error("id", "must not be empty");
  field(j, "config", x.config);
  auto files = j.find("files");
  if (files == j.end())
    throw json_error("files", "missing required field");
  try {
    files_from_json(*files, x.files);
  } catch (const json_error& e) {
    throw json_error(join_path("files", e.path()), e.reason());
  }
  required(j, "request", x.request);
  if (field(j, "exec_timeout_s", x.exec_timeout_s))
    check_timeout("exec_timeout_s", x.exec_timeout_s);
  if (field(j, "metadata", x.metadata) && !x.metadata.is_object())
    throw json_error("metadata", "expected an object");
  field(j, "work_dir", x.work_dir);
}

// -- files --------------------------------------------------------------------

bool is_utf8(std::string_view text) {
  auto* p = reinterpret_cast<const unsigned char*>(text.data());
  auto* end = p + text.size();
  while (p < end) {
    auto c = *p;
    if (c < 0x80) {
      ++p;
      continue;
    }
    size_t n = 0;
    uint32_t cp = 0;
    if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (static_cast<size_t>(end - p) <= n)
      return false;
    for (size_t i = 1; i <= n; ++i) {
      if ((p[i] & 0xC0) != 0x80)
        return false;
      cp = (cp << 6) | (p[i] & 0x3F);
    }
    static constexpr uint32_t min_of[] = {0, 0x80, 0x800, 0x10000};
    if (cp < min_of[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    p += n + 1;
  }
  return true;
}

json files_to_json(const file_map& files) {
  auto out = json::object();
  for (auto& [path, content] : files)
    if (is_utf8(content))
      out[path] = content;
    else
      out[path] = json{{"base64", base64_encode(content)}};
  return out;
}

void files_from_json(const json& j, file_map& out) {
  if (!j.is_object())
    fail_type(j, "an object of file contents (strings or {\"base64\": ...})");
  out.clear();
  for (auto& [key, value] : j.items()) {
    if (value.is_string()) {
      out.emplace(key, value.get_ref<const std::string&>());
      continue;
    }
    if (!value.is_object() || value.size() != 1 || !value.contains("base64"))
      throw json_error(
        key, std::string{"expected a string (text) or "
                         "{\"base64\": \"...\"} (bytes), got "} +
               (value.is_object() ? "another object" : value.type_name()));
    auto& text = value.at("base64");
    if (!text.is_string())
      throw json_error(key + ".base64", std::string{"expected a string, got "} +
                                          text.type_name());
    std::string bytes;
    std::string why;
    if (!base64_decode(text.get_ref<const std::string&>(), bytes, why))
      throw json_error(key + ".base64", "not base64: " + why);
    out.emplace(key, std::move(bytes));
  }
}

void to_json(json& j, const verification_failure& x) {
  j = json{{"failure_kind", x.kind},
           {"state", x.state},
           {"cause", x.cause},
           {"message", x.message},
           {"log_tail", x.log_tail}};
}

void from_json(const json& j, verification_failure& x) {
  check_object(j, "verification_failure",
               {"failure_kind", "state", "cause", "message", "log_tail"});
  x = verification_failure();
  required(j, "failure_kind", x.kind);
  required(j, "state", x.state);
  required(j, "cause", x.cause);
  field(j, "message", x.message);
  field(j, "log_tail", x.log_tail);
}

void to_json(json& j, const state_timings& x) {
  j = json::object();
  auto put = [&j](const char* key, double ms) {
    if (ms >= 0)
      j[key] = std::round(ms * 1000.0) / 1000.0;
  };
  put("create", x.create);
  put("ready", x.ready);
  put("upload", x.upload);
  put("exec", x.exec);
  put("download", x.download);
  put("stop", x.stop);
  put("total", x.total);
  if (x.stop_after_reply)
    j["stop_after_reply"] = true;
}

void from_json(const json& j, state_timings& x) {
  check_object(j, "timings_ms",
               {"create", "ready", "upload", "exec", "download", "stop",
                "total", "stop_after_reply"});
  x = state_timings();
  field(j, "create", x.create);
  field(j, "ready", x.ready);
  field(j, "upload", x.upload);
  field(j, "exec", x.exec);
  field(j, "download", x.download);
  field(j, "stop", x.stop);
  field(j, "total", x.total);
  field(j, "stop_after_reply", x.stop_after_reply);
}

void to_json(json& j, const verification_outcome& x) {
  j = json{{"id", x.id},
           {"ok", x.ok},
           {"mask_sample", !x.ok},
           {"result", x.ok ? x.result : json(nullptr)},
           {"failure", x.ok ? json(nullptr) : json(x.failure)},
           {"timings_ms", x.timings},
           {"attempts", x.attempts}};
  if (x.cached)
    j["cached"] = true;
  if (!x.node.empty())
    j["node"] = x.node;
}

void from_json(const json& j, verification_outcome& x) {
  check_object(j, "verification_outcome",
               {"id", "ok", "mask_sample", "result", "failure", "timings_ms",
                "cached", "attempts", "node"});
  x = verification_outcome();
  required(j, "id", x.id);
  required(j, "ok", x.ok);
  bool mask = !x.ok;
  if (field(j, "mask_sample", mask) && mask == x.ok)
    throw json_error("mask_sample", "must be the opposite of ok");
  field(j, "result", x.result);
  if (!x.ok) {
    required(j, "failure", x.failure);
  } else if (auto i = j.find("failure"); i != j.end() && !i->is_null()) {
    throw json_error("failure", "must be null when ok is true");
  }
  field(j, "timings_ms", x.timings);
  field(j, "cached", x.cached);
  field(j, "attempts", x.attempts);
  field(j, "node", x.node);
}

void to_json(json& j, const supervisor_stats& x) {
  j = json{{"submitted", x.submitted},
           {"succeeded", x.succeeded},
           {"failed", x.failed},
           {"rejected_overloaded", x.rejected_overloaded},
           {"crashed", x.crashed},
           {"sandboxes_created", x.sandboxes_created},
           {"sandboxes_stopped", x.sandboxes_stopped},
           {"stop_failures", x.stop_failures},
           {"provider_restarts", x.provider_restarts},
           {"retries", x.retries},
           {"retries_denied", x.retries_denied},
           {"sandboxes_left_to_node", x.sandboxes_left_to_node},
           {"in_flight", x.in_flight},
           {"queued", x.queued},
           {"creating", x.creating},
           {"peak_in_flight", x.peak_in_flight},
           {"peak_creating", x.peak_creating},
           {"stopping", x.stopping},
           {"peak_stopping", x.peak_stopping},
           {"stops_after_reply", x.stops_after_reply},
           {"cleanup_pending", x.cleanup_pending}};
}

} // namespace sv
