#pragma once

// The verification actor: the whole life of one submission, one behaviour
// per state, in order (create, ready, upload, exec, download, stop). Spawned
// and monitored by the supervisor; internal to actors/.

#include "actors/supervisor.hpp"
#include "actors/verification_protocol.hpp"

#include <caf/fwd.hpp>
#include <cstdint>
#include <memory>

namespace sv {

/// Settings every verification of one supervisor shares.
struct verification_settings {
  json default_metadata = json::object();
  result_parser parser;
  /// Report the outcome before the stop (`stopping`, then `settled`).
  bool stop_after_reply = true;
};

/// First delay between two status polls; it doubles up to the maximum.
inline constexpr caf::timespan first_poll_delay = std::chrono::milliseconds(5);
inline constexpr caf::timespan max_poll_delay = std::chrono::seconds(1);

/// Extra seconds a sandbox lives past ready + exec (the seed's margin).
inline constexpr double ttl_margin_s = 300;

/// The sandbox spec of a request: metadata merged (provider defaults, then
/// the call's, then config.metadata), TTL = ready + exec + margin.
sandbox_spec make_sandbox_spec(const verification_request& req,
                               const json& default_metadata);

/// Spawns a verification actor for `req`, monitored by `spawner` (the
/// supervisor), which receives its reports as `parent`.
verification_actor
spawn_verification(caf::local_actor* spawner, verification_parent_actor parent,
                   verification_request req, provider_actor provider,
                   std::shared_ptr<const verification_settings> settings);

} // namespace sv
