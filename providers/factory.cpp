#include "providers/factory.hpp"

#include "messages/json.hpp"
#include "providers/local.hpp"
#include "providers/nodes/nodes_provider.hpp"
#include "providers/remote.hpp"
#include "providers/scripted.hpp"

#include <caf/actor_system.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <stdexcept>
#include <vector>
namespace sv {

namespace {

class local_backend : public provider_backend {
public:
  explicit local_backend(const json& settings)
      : registry_(make_local_registry(parse_local_provider_config(settings))),
        identity_(
          settings_identity("local", settings,
                            {"root", "io_threads", "stop_attempts",
                             "stop_retry_ms", "cgroup_parent", "uid_base",
                             "uid_count", "warm_pool", "warm_pool_start",
                             // Where and how images are fetched: only an
                             // image named by digest is cached, and the
                             // digest is in the key.
                             "image_store", "image_store_max_mib",
                             "image_tag_ttl_s", "insecure_registries"})) {
    // nop
  }

  provider_actor spawn(caf::actor_system& sys) const override {
    return spawn_local_provider(sys, registry_);
  }

  void shut_down() override { shut_down_local_registry(*registry_); }

  // The interpreter of each name is looked up once per backend (a provider
  // start), as the provider's own is.
  json grade_identity(const verification_config& cfg) const override {
    auto out = identity_;
    std::lock_guard<std::mutex> guard{mtx_};
    auto i = interpreters_.find(cfg.python);
    if (i == interpreters_.end())
      i = interpreters_
            .emplace(cfg.python,
                     local_interpreter_identity(*registry_, cfg.python))
            .first;
    out["interpreter"] = i->second;
    return out;
  }

private:
  std::shared_ptr<local_registry> registry_;
  json identity_;
  mutable std::mutex mtx_;
  mutable std::map<std::string, json> interpreters_;
};

class scripted_backend : public provider_backend {
public:
  explicit scripted_backend(const json& settings)
      : identity_(settings_identity("scripted", settings, {"ledger_file"})),
        script_(parse_scripted_script(settings)),
        world_(std::make_shared<scripted_world>()) {
    // nop
  }

  // Every actor of one backend lives in the same world: a replacement sees
  // its predecessors' sandboxes.
  provider_actor spawn(caf::actor_system& sys) const override {
    return spawn_scripted_provider(sys, script_, world_);
  }

  void shut_down() override {
    // the world is plain memory: nothing to stop
  }

  json grade_identity(const verification_config&) const override {
    return identity_;
  }

private:
  json identity_;
  scripted_script script_;
  std::shared_ptr<scripted_world> world_;
};

struct provider_entry {
  const char* name;
  std::shared_ptr<provider_backend> (*prepare)(const json& settings);
  /// Settings that name files or directories on this host (dotted paths):
  /// a relative one in a config file is relative to that file.
  std::vector<const char*> host_paths;
};

template <class Backend>
std::shared_ptr<provider_backend> make_backend(const json& settings) {
  return std::make_shared<Backend>(settings);
}

// Adding a backend is one line here.
const provider_entry known_providers[] = {
  {"local", make_backend<local_backend>, {"root"}},
  {"scripted", make_backend<scripted_backend>, {}},
  {"nodes", make_nodes_backend, {"tls.cert", "tls.key", "tls.ca"}},
  {"remote", make_remote_backend, {"token_file", "ca_file"}},
};

constexpr const char* metadata_key = "default_metadata";

std::string known_names() {
  std::string out;
  for (auto& entry : known_providers) {
    if (!out.empty())
      out += ", ";
    out += entry.name;
  }
  return out;
}

const provider_entry* find_provider(const std::string& name) {
  for (auto& entry : known_providers)
    if (name == entry.name)
      return &entry;
  return nullptr;
}

/// Makes `settings`' host paths that are relative (`certs/ca.pem`) relative
/// to `base` (the config file's directory), as a reader of the file means.
void resolve_host_paths(const provider_entry& entry, json& settings,
                        const std::filesystem::path& base) {
  for (const char* dotted : entry.host_paths) {
    json* at = &settings;
    std::string rest = dotted;
    for (auto dot = rest.find('.'); at != nullptr && at->is_object();
         dot = rest.find('.')) {
      auto key = rest.substr(0, dot);
      auto i = at->find(key);
      at = i == at->end() ? nullptr : &*i;
      if (dot == std::string::npos)
        break;
      rest.erase(0, dot + 1);
    }
    if (at == nullptr || !at->is_string())
      continue; // absent or wrong: the backend's parser says so
    auto value = at->get<std::string>();
    if (!value.empty() && value.front() != '/')
      *at = (base / value).lexically_normal().string();
  }
}

} // namespace

std::vector<std::string> provider_names() {
  std::vector<std::string> out;
  for (auto& entry : known_providers)
    out.emplace_back(entry.name);
  return out;
}

provider_block parse_provider_block(const json& j) {
  if (!j.is_object())
    throw json_error("", std::string{"expected a provider block like "
                                     "{\"local\": {...}}, got "} +
                           j.type_name());
  provider_block out;
  for (auto& item : j.items()) {
    if (item.key() == metadata_key) {
      if (!item.value().is_object())
        throw json_error(metadata_key, std::string{"expected an object, got "} +
                                         item.value().type_name());
      out.default_metadata = item.value();
      continue;
    }
    if (!out.name.empty())
      throw json_error("",
                       "a provider block names exactly one provider, got \"" +
                         out.name + "\" and \"" + item.key() +
                         "\" (known providers: " + known_names() + ")");
    out.name = item.key();
    out.settings = item.value().is_null() ? json::object() : item.value();
  }
  if (out.name.empty())
    throw json_error("", "no provider key in the provider block (known "
                         "providers: " +
                           known_names() + ")");
  if (find_provider(out.name) == nullptr)
    throw json_error(
      out.name, "unknown provider (known providers: " + known_names() + ")");
  return out;
}

provider_backend::~provider_backend() = default;

retry_settings provider_backend::retry_defaults() const {
  return {}; // no retries
}

json settings_identity(const std::string& name, json settings,
                       std::initializer_list<const char*> operational) {
  if (settings.is_object())
    for (auto* key : operational)
      settings.erase(key);
  return json{{"name", name}, {"settings", std::move(settings)}};
}

std::shared_ptr<provider_backend>
prepare_provider(const provider_block& block) {
  auto* entry = find_provider(block.name);
  if (entry == nullptr)
    throw json_error(
      block.name, "unknown provider (known providers: " + known_names() + ")");
  try {
    return entry->prepare(block.settings);
  } catch (const json_error& e) {
    // Name the setting by its full path in the block.
    throw json_error(
      e.path().empty() ? block.name : block.name + "." + e.path(), e.reason());
  }
}

provider_actor spawn_provider(caf::actor_system& sys,
                              const provider_block& block) {
  return prepare_provider(block)->spawn(sys);
}

provider_block load_provider_block(const std::string& path, size_t max_depth,
                                   provider_config_file& file) {
  if (path.empty())
    return parse_provider_block(json{{"local", json::object()}});
  auto where = "provider config " + path + ": ";
  if (std::filesystem::is_directory(path))
    throw std::runtime_error(where + "is a directory");
  {
    std::ifstream probe{path, std::ios::binary};
    if (!probe)
      throw std::runtime_error(where + std::strerror(errno));
  }
  yaml_limits limits;
  limits.json.max_depth = max_depth;
  limits.json.max_bytes = 16 << 20;
  try {
    file = load_provider_config(path, provider_names(), limits);
    auto block = parse_provider_block(file.block);
    auto base = std::filesystem::absolute(path).parent_path();
    if (auto* entry = find_provider(block.name))
      resolve_host_paths(*entry, block.settings, base);
    return block;
  } catch (const config_error& e) {
    throw std::runtime_error(where + e.what());
  } catch (const json_error& e) {
    throw std::runtime_error(where + file.describe(e));
  }
}

} // namespace sv
