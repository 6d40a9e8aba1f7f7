#include "cache/detail/cache_front.hpp"

#include "actors/detail/quiet.hpp"
#include "messages/batch_format.hpp"
#include "messages/detail/private_id.hpp"
#include "messages/errors.hpp"
#include "providers/factory.hpp"

#include <caf/actor_system.hpp>
#include <caf/sec.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <charconv>
#include <chrono>
#include <optional>
#include <spdlog/spdlog.h>
#include <string_view>
#include <unordered_map>

namespace sv {

namespace {

/// The front also takes the supervisor's replies to its plain sends.
using front_actor =
  supervisor_actor::extend<caf::reacts_to<verification_outcome>>;

/// Results larger than this are graded, not stored.
constexpr size_t max_stored_bytes = size_t{16} << 20;

// A submission passed on carries a private id: its own with "#C<n>"
// appended, n a counter of this front (unique whatever the callers' ids,
// readable in the supervisor's logs). Replies are matched by it, never by the
// caller's id: two submissions sharing an id (two completions of one task)
// each get, and store, their own result.
struct front_state {
  static inline const char* name = "sv.cache_front";
  struct waiting {
    caf::typed_response_promise<verification_outcome> promise;
    std::string key;
    std::string id; // the caller's
    /// The image and the digest its key holds ("" when none was resolved),
    /// and when the front asked for it.
    std::string image;
    std::string digest;
    std::chrono::steady_clock::time_point asked;
  };
  /// Submissions passed on, by their number.
  std::unordered_map<uint64_t, waiting> pending;
  /// Their numbers by the caller's id (for `cancel`).
  std::unordered_multimap<std::string, uint64_t> by_id;
  uint64_t next = 1;
};

constexpr std::string_view front_tag = "#C";

using front_ptr = front_actor::stateful_pointer<front_state>;

std::string result_text(const json& result) {
  if (auto* text = json_text_of(result))
    return std::string(text->begin(), text->end());
  return result.dump(-1, ' ', false, json::error_handler_t::replace);
}

/// A hit as the outcome a verification would have given.
std::optional<verification_outcome>
hit(const std::string& id, const std::string& text, const json_limits& limits,
    std::chrono::steady_clock::time_point started) {
  verification_outcome out;
  std::string error;
  if (!parse_result_text(text, out.result, error, limits)) {
    spdlog::warn("cache: a stored result is unreadable ({}); grading again",
                 error);
    return std::nullopt;
  }
  out.id = id;
  out.ok = true;
  out.cached = true;
  out.attempts = 0; // no sandbox ran for it
  out.timings.total = std::chrono::duration<double, std::milli>(
                        std::chrono::steady_clock::now() - started)
                        .count();
  return out;
}

front_actor::behavior_type front(front_ptr self, supervisor_actor supervisor,
                                 std::shared_ptr<result_cache> cache,
                                 grade_identity_fn identity, json_limits limits,
                                 image_check_fn unchanged) {
  self->set_default_handler(sv::log_and_drop_unexpected);
  self->monitor(supervisor);
  self->set_down_handler([self](caf::down_msg& dm) {
    auto why =
      dm.reason ? dm.reason : caf::make_error(caf::sec::request_receiver_down);
    for (auto& [n, w] : self->state.pending)
      w.promise.deliver(why);
    self->state.pending.clear();
    self->state.by_id.clear();
    self->quit(dm.reason);
  });
  return {
    [=](verify_atom,
        verification_request& req) -> caf::result<verification_outcome> {
      auto started = std::chrono::steady_clock::now();
      std::string key;
      std::string digest;
      auto asked = started;
      try {
        auto provider = identity(req.config);
        asked = std::chrono::steady_clock::now(); // the digest resolved

        key = cache_key(req, provider);
        if (!key.empty() && image_digest_resolved(provider))
          digest = provider["image_digest"].get<std::string>();
      } catch (const std::exception& e) {
        spdlog::warn("cache: no key for {}: {}", req.id, e.what());
      }
      if (!key.empty())
        if (auto text = cache->lookup(key))
          if (auto out = hit(req.id, *text, limits, started))
            return std::move(*out);
      auto promise = self->make_response_promise<verification_outcome>();
      auto& st = self->state;
      auto n = st.next++;
      st.by_id.emplace(req.id, n);
      auto own = tag_private_id(req.id, front_tag, n);
      auto image = digest.empty() ? std::string{} : req.config.image;
      st.pending.emplace(
        n, front_state::waiting{promise, std::move(key), std::move(req.id),
                                std::move(image), std::move(digest), asked});
      req.id = std::move(own);
      self->send(supervisor, verify_atom::value, std::move(req));
      return promise;
    },
    [=](verification_outcome& out) {
      auto& st = self->state;
      auto n = private_id_number(out.id, front_tag);
      auto i = n ? st.pending.find(*n) : st.pending.end();
      if (i == st.pending.end())
        return; // not ours
      auto waiting = std::move(i->second);
      st.pending.erase(i);
      auto [first, last] = st.by_id.equal_range(waiting.id);
      for (auto j = first; j != last; ++j)
        if (j->second == *n) {
          st.by_id.erase(j);
          break;
        }
      // A key holding a resolved digest is stored only when the image
      // named it all along: a create that found the tag moved meanwhile
      // graded another image.
      bool same_image =
        waiting.digest.empty() ||
        (unchanged && unchanged(waiting.image, waiting.digest, waiting.asked));
      if (out.ok && !waiting.key.empty() && !same_image)
        spdlog::info("cache: image {} was not seen naming {} all along "
                     "while {} was graded (moved, or no check); its result "
                     "is not stored",
                     waiting.image, waiting.digest, waiting.id);
      if (out.ok && !waiting.key.empty() && same_image) {
        auto text = result_text(out.result);
        if (text.size() <= max_stored_bytes)
          cache->store(waiting.key, text);
      }
      out.id = std::move(waiting.id);
      waiting.promise.deliver(std::move(out));
    },
    [=](stats_atom) { return self->delegate(supervisor, stats_atom::value); },
    [=](cancel_atom, std::string& id) {
      // Every submission passed on under the caller's id.
      auto [first, last] = self->state.by_id.equal_range(id);
      for (auto j = first; j != last; ++j)
        self->send(supervisor, cancel_atom::value,
                   tag_private_id(id, front_tag, j->second));
    },
  };
}

} // namespace

supervisor_actor spawn_cache_front(caf::actor_system& sys,
                                   supervisor_actor supervisor,
                                   std::shared_ptr<result_cache> cache,
                                   grade_identity_fn identity,
                                   json_limits limits,
                                   image_check_fn unchanged) {
  return sys.spawn<caf::detached>(front, std::move(supervisor),
                                  std::move(cache), std::move(identity), limits,
                                  std::move(unchanged));
}

front_factory cache_front_factory(std::shared_ptr<result_cache> cache,
                                  json_limits limits) {
  return [cache = std::move(cache), limits](caf::actor_system& sys,
                                            const supervisor_actor& sup,
                                            const provider_backend& backend) {
    // The backend outlives the front: the service holds it past the
    // supervisor's exit, and the front dies with the supervisor.
    return spawn_cache_front(
      sys, sup, cache,
      [&backend](const verification_config& c) {
        return backend.grade_identity(c);
      },
      limits,
      [&backend](const std::string& image, const std::string& digest,
                 std::chrono::steady_clock::time_point since) {
        return backend.image_unchanged_since(image, digest, since);
      });
  };
}

} // namespace sv
