// The local provider's backend (providers/factory.hpp): one registry of
// sandboxes for the provider actors spawned from it, and the part of a grade
// identity the local settings and interpreter make.

#include "messages/json.hpp"
#include "providers/factory.hpp"
#include "providers/local.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>

namespace sv {

namespace {

/// `NAME@sha256:<64 hex>` (as cache/detail/result_cache.hpp's image_pinned).
bool named_by_digest(const std::string& image) {
  auto at = image.rfind("@sha256:");
  return at != std::string::npos && image.size() == at + 8 + 64 &&
         std::all_of(image.begin() + static_cast<std::ptrdiff_t>(at) + 8,
                     image.end(), [](char c) {
                       return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
                     });
}

class local_backend : public provider_backend {
public:
  explicit local_backend(const json& settings)
      : registry_(make_local_registry(parse_local_provider_config(settings))),
        identity_(settings_identity(
          "local", settings,
          {"root", "io_threads", "stop_attempts", "stop_retry_ms",
           "cgroup_parent", "uid_base", "uid_count", "warm_pool",
           "warm_pool_start", "warm_python",
           // Where and how images are fetched: the
           // image's digest is in the key.
           "image_store", "image_store_max_mib", "image_tag_ttl_s",
           "insecure_registries", "image_dirs"})) {
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
    {
      std::lock_guard<std::mutex> guard{mtx_};
      auto i = interpreters_.find(cfg.python);
      if (i == interpreters_.end() && interpreters_.size() >= max_names)
        interpreters_.clear(); // bounded: names are the callers' choice
      if (i == interpreters_.end())
        i = interpreters_
              .emplace(cfg.python,
                       local_interpreter_identity(*registry_, cfg.python))
              .first;
      out["interpreter"] = i->second;
    }
    // A name that can move (a tag, a layout, an archive) is keyed by the
    // digest it resolves to now; one named by digest holds it already; a
    // root file system directory has none (no key: not cached).
    if (!cfg.image.empty() && !named_by_digest(cfg.image)) {
      // The front waits (one thread for every line): a slow registry
      // costs a line its key, not the front minutes.
      auto bound =
        cfg.ready_timeout_s > 0 ? std::min(cfg.ready_timeout_s, 30.0) : 30.0;
      auto digest = local_image_digest(
        *registry_, cfg.image,
        std::chrono::steady_clock::now() +
          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::duration<double>(bound)));
      if (!digest.empty())
        out["image_digest"] = digest;
    }
    return out;
  }

  bool image_unchanged_since(
    const std::string& image, const std::string& digest,
    std::chrono::steady_clock::time_point since) const override {
    return local_image_unchanged_since(*registry_, image, digest, since);
  }

private:
  std::shared_ptr<local_registry> registry_;
  json identity_;
  mutable std::mutex mtx_;
  mutable std::map<std::string, json> interpreters_;
  static constexpr size_t max_names = 64;
};

} // namespace

std::shared_ptr<provider_backend> make_local_backend(const json& settings) {
  return std::make_shared<local_backend>(settings);
}

} // namespace sv
