#include "messages/validation.hpp"

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
    if (part.empty() || part == "." || part == "..")
      return false;
    if (end == std::string_view::npos)
      return true;
    start = end + 1;
  }
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
  for (auto& t : timeouts)
    if (!valid_timeout(t.value))
      return std::string{t.name} +
             ": must be a number of seconds in (0, 604800]";
  return {};
}

} // namespace

std::string validate(const verification_request& req) {
  if (req.id.empty())
    return "id: must not be empty";
  if (req.files.count(std::string{runner_file_name}) == 0)
    return "files: missing " + std::string{runner_file_name};
  for (auto& [path, content] : req.files) {
    if (!is_confined_path(path))
      return "files: path \"" + path + "\" escapes the sandbox";
    if (path == request_file_name || path == result_file_name ||
        path == runner_log_name)
      return "files: \"" + path + "\" is reserved for the call itself";
  }
  if (!is_confined_path(req.work_dir))
    return "work_dir: \"" + req.work_dir + "\" escapes the sandbox";
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
