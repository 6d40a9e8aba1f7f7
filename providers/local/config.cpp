// The settings of a `{"local": {...}}` provider block.

#include "messages/json.hpp"
#include "providers/local.hpp"

namespace sv {

namespace {

template <class F>
void read_field(const json& j, const char* key, F&& read) {
  auto i = j.find(key);
  if (i != j.end())
    read(*i);
}

uint64_t read_count(const json& v, const char* key, uint64_t min,
                    uint64_t max) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
      v.get<uint64_t>() < min || v.get<uint64_t>() > max)
    throw json_error(key, "expected an integer in [" + std::to_string(min) +
                            ", " + std::to_string(max) + "]");
  return v.get<uint64_t>();
}

std::string read_string(const json& v, const char* key, bool allow_empty) {
  if (!v.is_string())
    throw json_error(key,
                     std::string{"expected a string, got "} + v.type_name());
  auto out = v.get<std::string>();
  if (out.empty() && !allow_empty)
    throw json_error(key, "must not be empty");
  return out;
}

/// Absolute paths without "." or ".." components or a trailing slash.
std::vector<std::string> read_paths(const json& v, const char* key) {
  if (!v.is_array())
    throw json_error(key,
                     std::string{"expected an array, got "} + v.type_name());
  std::vector<std::string> out;
  for (auto& item : v) {
    auto path = read_string(item, key, false);
    if (path.front() != '/' || path == "/" || path.back() == '/' ||
        path.find("/.") != std::string::npos ||
        path.find("//") != std::string::npos)
      throw json_error(key, "\"" + path +
                              "\" is not an absolute, normalized path "
                              "other than /");
    out.push_back(path);
  }
  return out;
}

void read_limits(const json& settings, local_provider_config& cfg) {
  constexpr uint64_t tib = uint64_t{1} << 40;
  read_field(settings, "max_processes", [&](const json& v) {
    cfg.max_processes = read_count(v, "max_processes", 8, 1 << 22);
  });
  read_field(settings, "max_log_bytes", [&](const json& v) {
    cfg.max_log_bytes = read_count(v, "max_log_bytes", 4096, tib);
  });
  read_field(settings, "default_memory_mib", [&](const json& v) {
    cfg.default_memory_mib = read_count(v, "default_memory_mib", 0, 1 << 24);
  });
  read_field(settings, "default_disk_mib", [&](const json& v) {
    cfg.default_disk_mib = read_count(v, "default_disk_mib", 1, 1 << 24);
  });
  read_field(settings, "max_memory_mib", [&](const json& v) {
    cfg.max_memory_mib = read_count(v, "max_memory_mib", 1, 1 << 24);
  });
  read_field(settings, "max_disk_mib", [&](const json& v) {
    cfg.max_disk_mib = read_count(v, "max_disk_mib", 1, 1 << 24);
  });
  read_field(settings, "max_cpu", [&](const json& v) {
    if (!v.is_number() || !(v.get<double>() >= 0) || v.get<double>() > 1024)
      throw json_error("max_cpu", "expected a number of CPUs in [0, 1024] "
                                  "(0: the host's)");
    cfg.max_cpu = v.get<double>();
  });
  read_field(settings, "sandbox_nice", [&](const json& v) {
    cfg.sandbox_nice = read_count(v, "sandbox_nice", 0, 19);
  });
}

void read_isolation(const json& settings, local_provider_config& cfg) {
  read_field(settings, "isolation", [&](const json& v) {
    cfg.isolation = read_string(v, "isolation", false);
    if (cfg.isolation != "bwrap" && cfg.isolation != "none")
      throw json_error("isolation", "expected \"bwrap\" or \"none\", got \"" +
                                      cfg.isolation + "\"");
  });
  read_field(settings, "hide_paths", [&](const json& v) {
    cfg.hide_paths = read_paths(v, "hide_paths");
  });
  read_field(settings, "uid_base", [&](const json& v) {
    cfg.uid_base = read_count(v, "uid_base", 0, (uint64_t{1} << 31) - 1);
    if (cfg.uid_base != 0 && cfg.uid_base < 1000)
      throw json_error("uid_base", "expected 0 (a free range) or a uid of "
                                   "at least 1000");
  });
  read_field(settings, "uid_count", [&](const json& v) {
    cfg.uid_count = read_count(v, "uid_count", 1, 1 << 20);
  });
  read_field(settings, "allow_user_namespaces", [&](const json& v) {
    if (!v.is_boolean())
      throw json_error("allow_user_namespaces",
                       std::string{"expected a boolean, got "} + v.type_name());
    cfg.allow_user_namespaces = v.get<bool>();
  });
  read_field(settings, "cgroup_parent", [&](const json& v) {
    cfg.cgroup_parent = read_string(v, "cgroup_parent", false);
    if (cfg.cgroup_parent.front() == '/' ||
        cfg.cgroup_parent.find("..") != std::string::npos)
      throw json_error("cgroup_parent",
                       "expected a relative path without \"..\"");
  });
}

} // namespace

local_provider_config parse_local_provider_config(const json& settings) {
  local_provider_config cfg;
  if (settings.is_null())
    return cfg;
  check_object(settings, "local provider settings",
               {"root",
                "python",
                "max_download_bytes",
                "io_threads",
                "isolation",
                "hide_paths",
                "max_processes",
                "max_log_bytes",
                "default_memory_mib",
                "default_disk_mib",
                "max_memory_mib",
                "max_disk_mib",
                "max_cpu",
                "sandbox_nice",
                "uid_base",
                "uid_count",
                "cgroup_parent",
                "allow_user_namespaces",
                "stop_attempts",
                "stop_retry_ms",
                "warm_pool",
                "warm_pool_start",
                "warm_python",
                "image_store",
                "image_store_max_mib",
                "insecure_registries",
                "image_dirs",
                "image_tag_ttl_s"});
  read_field(settings, "root",
             [&](const json& v) { cfg.root = read_string(v, "root", true); });
  read_field(settings, "python", [&](const json& v) {
    cfg.python = read_string(v, "python", false);
  });
  read_field(settings, "max_download_bytes", [&](const json& v) {
    cfg.max_download_bytes =
      read_count(v, "max_download_bytes", 1, uint64_t{1} << 40);
  });
  read_field(settings, "io_threads", [&](const json& v) {
    cfg.io_threads = read_count(v, "io_threads", 1, 64);
  });
  read_field(settings, "stop_attempts", [&](const json& v) {
    cfg.stop_attempts = read_count(v, "stop_attempts", 1, 100);
  });
  read_field(settings, "stop_retry_ms", [&](const json& v) {
    cfg.stop_retry_delay =
      std::chrono::milliseconds{read_count(v, "stop_retry_ms", 1, 3600 * 1000)};
  });
  read_field(settings, "warm_pool", [&](const json& v) {
    cfg.warm_pool = read_count(v, "warm_pool", 0, 64);
  });
  read_field(settings, "warm_pool_start", [&](const json& v) {
    if (!v.is_boolean())
      throw json_error("warm_pool_start",
                       std::string{"expected a boolean, got "} + v.type_name());
    cfg.warm_pool_start = v.get<bool>();
  });
  read_field(settings, "warm_python", [&](const json& v) {
    if (!v.is_boolean())
      throw json_error("warm_python",
                       std::string{"expected a boolean, got "} + v.type_name());
    cfg.warm_python = v.get<bool>();
  });
  read_field(settings, "image_store", [&](const json& v) {
    auto paths = read_paths(json::array({v}), "image_store");
    cfg.image_store = paths.front();
  });
  read_field(settings, "image_store_max_mib", [&](const json& v) {
    cfg.image_store_max_mib =
      read_count(v, "image_store_max_mib", 64, uint64_t{1} << 30);
  });
  read_field(settings, "image_tag_ttl_s", [&](const json& v) {
    cfg.image_tag_ttl_s = read_count(v, "image_tag_ttl_s", 0, 86400);
  });
  read_field(settings, "image_dirs", [&](const json& v) {
    cfg.image_dirs = read_paths(v, "image_dirs");
  });
  read_field(settings, "insecure_registries", [&](const json& v) {
    if (!v.is_array())
      throw json_error("insecure_registries",
                       std::string{"expected an array, got "} + v.type_name());
    for (auto& item : v) {
      auto host = read_string(item, "insecure_registries", false);
      if (host.size() > 255 ||
          host.find_first_of("/@ \t\r\n") != std::string::npos)
        throw json_error("insecure_registries",
                         "\"" + host.substr(0, 100) +
                           "\" is not HOST or HOST:PORT");
      cfg.insecure_registries.push_back(host);
    }
  });
  read_limits(settings, cfg);
  read_isolation(settings, cfg);
  return cfg;
}

} // namespace sv
