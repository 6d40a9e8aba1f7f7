#pragma once

// The verification actor: the whole life of one submission, one behaviour
// per state, in order (create, ready, upload, exec, download, stop). Spawned
// and monitored by the supervisor; internal to actors/.

#include "actors/supervisor.hpp"
#include "messages/provider.hpp"

#include <caf/actor.hpp>
#include <caf/atom.hpp>
#include <caf/behavior.hpp>
#include <caf/fwd.hpp>
#include <cstdint>
#include <memory>

namespace sv {

// -- messages between a verification actor and its supervisor -----------------

/// verification -> supervisor: create returned `sandbox_handle`; whoever
/// outlives the verification must stop it.
using created_atom = caf::atom_constant<caf::atom("created")>;
/// verification -> supervisor: create and ready are over (one slot of the
/// create cap is free again).
using ready_atom = caf::atom_constant<caf::atom("ready")>;
/// verification -> supervisor: the terminal `verification_outcome` and how
/// the stop went (`stop_status`). The verification exits right after.
using verified_atom = caf::atom_constant<caf::atom("verified")>;
/// verification -> supervisor: a handler threw (`verification_state`,
/// `std::string` what); the actor dies right after.
using crashed_atom = caf::atom_constant<caf::atom("crashed")>;
/// verification -> supervisor: after a create timeout, the provider still
/// returned a sandbox; the `stop_status` says how stopping it went.
using late_sandbox_atom = caf::atom_constant<caf::atom("latesb")>;
/// supervisor -> verification: the provider is gone; fail now and stop the
/// sandbox through the replacement `provider_actor` (if valid).
using provider_down_atom = caf::atom_constant<caf::atom("provdown")>;
/// verification -> itself: poll the status again.
using poll_atom = caf::atom_constant<caf::atom("poll")>;

/// What happened to the sandbox at the end of a verification.
enum class stop_status : uint8_t {
  /// No sandbox was created, nothing to stop.
  not_needed,
  /// Stop succeeded.
  stopped,
  /// Stop failed, timed out, or could not be sent (the provider is down);
  /// the provider's TTL reaps the sandbox.
  failed,
};

/// Settings every verification of one supervisor shares.
struct verification_settings {
  json default_metadata = json::object();
  result_parser parser;
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

/// Spawns a verification actor for `req`, monitored by `supervisor`, which
/// receives its `created`, `ready` and `verified` messages.
caf::actor
spawn_verification(caf::event_based_actor* supervisor, verification_request req,
                   provider_actor provider,
                   std::shared_ptr<const verification_settings> settings);

} // namespace sv
