// The local provider's backend (providers/factory.hpp): one registry of
// sandboxes for the provider actors spawned from it, and the part of a grade
// identity the local settings and interpreter make.

#include "messages/json.hpp"
#include "providers/factory.hpp"
#include "providers/local.hpp"

#include <map>
#include <mutex>

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

} // namespace

std::shared_ptr<provider_backend> make_local_backend(const json& settings) {
  return std::make_shared<local_backend>(settings);
}

} // namespace sv
