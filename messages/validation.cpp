#include "messages/validation.hpp"

#include "messages/bounded_json.hpp"

#include <cmath>

namespace sv {

bool is_confined_path(std::string_view path) {
  if (path.empty() || path.front() == '/' || path.size() > 4096)
    return false;
  if (path.find('\0') != std::string_view::npos)
    return false;
  size_t start = 0;
  for (;;) {
    auto end = path.find('/', start);
    auto part =
      path.substr(start, end == std::string_view::npos ? std::string_view::npos
                                                       : end - start);
    if (part.empty() || part == "." || part == ".." ||
        part.size() > max_path_component)
      return false;
    if (end == std::string_view::npos)
      return true;
    start = end + 1;
  }
}

bool is_path_in_sandbox(std::string_view path) {
  if (!path.empty() && path.front() == '/')
    path.remove_prefix(1);
  return is_confined_path(path);
}

bool is_loader_variable(std::string_view name) {
  // glibc's list of variables it drops for setuid programs (unsecvars.h),
  // less TMPDIR and TZDIR, which steer no loading: a runner may set them.
  static constexpr std::string_view exact[] = {
    "GCONV_PATH",       "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES",
    "LOCALDOMAIN",      "LOCPATH",     "NIS_PATH",       "NLSPATH",
    "RESOLV_HOST_CONF", "RES_OPTIONS"};
  static constexpr std::string_view prefixes[] = {"LD_", "MALLOC_"};
  for (auto x : exact)
    if (name == x)
      return true;
  for (auto x : prefixes)
    if (name.substr(0, x.size()) == x)
      return true;
  return false;
}

namespace {

bool valid_timeout(double x) {
  return std::isfinite(x) && x > 0 && x <= max_timeout_s;
}

/// `"text"`, cut to ~200 bytes.
std::string quote_value(std::string_view text) {
  return "\"" + truncate_for_message(text) + "\"";
}

/// Why `path` is not a confined path, or empty.
std::string path_problem(std::string_view path) {
  if (is_confined_path(path))
    return {};
  size_t start = 0;
  for (;;) {
    auto end = path.find('/', start);
    auto part =
      path.substr(start, end == std::string_view::npos ? std::string_view::npos
                                                       : end - start);
    if (part.size() > max_path_component)
      return "has a component of " + std::to_string(part.size()) +
             " bytes (at most " + std::to_string(max_path_component) + ")";
    if (end == std::string_view::npos)
      break;
    start = end + 1;
  }
  return "escapes the sandbox";
}

std::string check_env(const char* field, const env_map& env) {
  for (auto& [name, value] : env) {
    if (!is_env_name(name))
      return std::string{field} + ": " + quote_value(name) +
             " is not a variable name (empty, or has '=' or a NUL byte)";
    if (value.find('\0') != std::string::npos)
      return std::string{field} + "." + truncate_for_message(name) +
             ": the value has a NUL byte";
  }
  return {};
}

/// A file that is also another file's directory ("a" and "a/b").
std::string check_file_tree(const file_map& files) {
  for (auto& [path, content] : files) {
    for (auto i = path.find('/'); i != std::string::npos;
         i = path.find('/', i + 1)) {
      auto dir = path.substr(0, i);
      if (files.count(dir) != 0)
        return "files: " + quote_value(dir) +
               " is a file and also the directory of " + quote_value(path);
    }
  }
  return {};
}

std::string check_timeouts(const verification_request& req) {
  struct {
    const char* name;
    double value;
  } timeouts[] = {
    {"exec_timeout_s", req.exec_timeout_s},
    {"config.ready_timeout_s", req.config.ready_timeout_s},
    {"config.upload_timeout_s", req.config.upload_timeout_s},
    {"config.download_timeout_s", req.config.download_timeout_s},
    {"config.stop_timeout_s", req.config.stop_timeout_s},
    {"config.exec_grace_s", req.config.exec_grace_s},
  };
  for (auto& t : timeouts) {
    if (!valid_timeout(t.value))
      return std::string{t.name} +
             ": must be a number of seconds in (0, 604800]";
    if (t.value < min_timeout_s)
      return std::string{t.name} + ": must be at least 0.001 s (1 ms)";
  }
  auto ttl =
    req.config.ready_timeout_s + req.exec_timeout_s + sandbox_ttl_margin_s;
  if (ttl > max_timeout_s)
    return "exec_timeout_s: with config.ready_timeout_s and the 300 s "
           "margin, the sandbox TTL would exceed 604800 s";
  return {};
}

} // namespace

bool is_env_name(std::string_view name) {
  return !name.empty() && name.find('=') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos;
}

std::string validate(const verification_request& req) {
  if (req.id.empty())
    return "id: must not be empty";
  if (req.files.count(std::string{runner_file_name}) == 0)
    return "files: missing " + std::string{runner_file_name};
  for (auto& [path, content] : req.files) {
    if (auto why = path_problem(path); !why.empty())
      return "files: path " + quote_value(path) + " " + why;
    if (path == request_file_name || path == result_file_name ||
        path == runner_log_name)
      return "files: " + quote_value(path) + " is reserved for the call itself";
  }
  if (auto err = check_file_tree(req.files); !err.empty())
    return err;
  // Relative to the sandbox's workdir, or an absolute directory in the
  // sandbox (the seed's "/sandbox"): its provider says whether it can
  // write there (an upload refused `invalid_path` is `invalid_request`).
  if (!is_path_in_sandbox(req.work_dir)) {
    auto rest = std::string_view{req.work_dir};
    if (!rest.empty() && rest.front() == '/')
      rest.remove_prefix(1);
    auto why = path_problem(rest);
    if (why == "escapes the sandbox")
      why += " (empty or '/', or a '.', '..' or empty component)";
    return "work_dir: " + quote_value(req.work_dir) + " " + why;
  }
  if (auto err = check_env("config.env", req.config.env); !err.empty())
    return err;
  if (auto err = check_timeouts(req); !err.empty())
    return err;
  for (auto& entry : req.config.env)
    if (is_loader_variable(entry.first))
      return "config.env: \"" + entry.first +
             "\" steers the dynamic loader or libc and may not be set";
  if (req.config.python.empty())
    return "config.python: must not be empty";
  if (!req.metadata.is_object())
    return "metadata: expected an object";
  if (!req.config.metadata.is_object())
    return "config.metadata: expected an object";
  return {};
}

} // namespace sv
