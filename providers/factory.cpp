#include "providers/factory.hpp"

#include "messages/json.hpp"
#include "providers/local.hpp"
#include "providers/nodes/detail/nodes_provider.hpp"
#include "providers/remote.hpp"
#include "providers/scripted.hpp"

#include <caf/actor_system.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <vector>
namespace sv {

namespace {

struct provider_entry {
  const char* name;
  std::shared_ptr<provider_backend> (*prepare)(const json& settings);
  /// Settings that name files or directories on this host (dotted paths):
  /// a relative one in a config file is relative to that file.
  std::vector<const char*> host_paths;
  /// Whether sv-node may serve it (not a block that is itself a front).
  bool node_servable = true;
};

// Adding a backend is one line here. Made at its first use: other files'
// statics may ask for the names before this file's are initialized.
const std::vector<provider_entry>& known_providers() {
  static const std::vector<provider_entry> entries{
    {"local", make_local_backend, {"root"}},
    {"scripted", make_scripted_backend, {}},
    {"nodes", make_nodes_backend, {"tls.cert", "tls.key", "tls.ca"}, false},
    {"remote", make_remote_backend, {"token_file", "ca_file"}},
  };
  return entries;
}

constexpr const char* metadata_key = "default_metadata";

std::string known_names() {
  std::string out;
  for (auto& entry : known_providers()) {
    if (!out.empty())
      out += ", ";
    out += entry.name;
  }
  return out;
}

const provider_entry* find_provider(const std::string& name) {
  for (auto& entry : known_providers())
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
  for (auto& entry : known_providers())
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

bool provider_backend::image_unchanged_since(
  const std::string&, const std::string&,
  std::chrono::steady_clock::time_point) const {
  return false;
}

retry_settings provider_backend::retry_defaults() const {
  return {}; // no retries
}

void provider_backend::configure(caf::actor_system_config&) const {
  // no transport of its own
}

std::string provider_backend::check_started(caf::actor_system&,
                                            const provider_actor&) const {
  return {};
}

size_t provider_backend::suited_concurrency(caf::actor_system&,
                                            const provider_actor&) const {
  return 0;
}

json provider_backend::usage_table(caf::actor_system&,
                                   const provider_actor&) const {
  return json::array();
}

bool servable_by_node(const provider_block& block) {
  auto* entry = find_provider(block.name);
  return entry == nullptr || entry->node_servable;
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
