#pragma once

// The typed protocol between the supervisor and its verification actors,
// internal to actors/. Both directions are typed interfaces, so a message
// outside them is a compile error on the sending side; whatever still
// arrives unasked (a stale timer, a late reply) is logged and dropped
// (actors/detail/quiet.hpp), never an error that kills the receiver.

#include "messages/provider.hpp"

#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>
#include <cstdint>

namespace sv {

/// What happened to the sandbox at the end of a verification.
enum class stop_status : uint8_t {
  /// No sandbox was created, nothing to stop.
  not_needed,
  /// Stop succeeded.
  stopped,
  /// Stop failed or timed out; the provider's TTL reaps the sandbox.
  failed,
  /// The provider that created the sandbox is gone: the supervisor stops it
  /// (the handle it got with `created`) through the replacement.
  handed_over,
  /// The create deadline passed while the provider was still creating: the
  /// caller has its failure, the create slot stays taken, and a `settled`
  /// report follows when the provider answers (or dies).
  pending,
  /// The outcome is final and goes to the caller now; the stop runs behind
  /// it. A `settled` report follows with what became of the sandbox; until
  /// then the sandbox holds its place in the supervisor's capacity.
  stopping,
};

// -- supervisor -> verification ---------------------------------------------

/// The provider the verification drives is gone (its down_msg reached the
/// supervisor): fail now with node_down, hand the sandbox over, exit.
using provider_lost_atom = caf::atom_constant<caf::atom("provlost")>;

// -- verification -> itself (timers, tagged with the state's generation) ------

/// Poll the status again (ready). (Deadlines are not messages: one
/// cancellable clock entry per verification, see verification.cpp.)
using poll_atom = caf::atom_constant<caf::atom("poll")>;

/// `cancel` (supervisor -> verification): the client went away. In create
/// the caller hears `killed` and the actor lingers for the late sandbox as
/// after a create deadline (`pending`); in any other state it exits and the
/// supervisor stops the sandbox it was told of.

using verification_actor = caf::typed_actor<caf::reacts_to<provider_lost_atom>,
                                            caf::reacts_to<poll_atom, uint64_t>,
                                            caf::reacts_to<cancel_atom>>;

// -- verification -> supervisor ----------------------------------------------

/// Create returned this sandbox; whoever outlives the verification stops it.
/// (Also sent after a `pending` verdict: the late sandbox it now stops.)
using created_atom = caf::atom_constant<caf::atom("created")>;
/// Create and ready are over: the create slot is free again.
using ready_atom = caf::atom_constant<caf::atom("ready")>;
/// The terminal outcome and what became of the sandbox. Unless the status
/// is `pending` or `stopping`, the verification exits right after.
using verified_atom = caf::atom_constant<caf::atom("verified")>;
/// After a `pending` verdict: the late create has finished; the status says
/// what became of the late sandbox (`not_needed`: none came; `handed_over`:
/// its provider died with the stop unanswered, the supervisor stops it through
/// the replacement). The create
/// slot is free again and the verification exits. After a `stopping`
/// verdict: the stop is over (`stopped`, `failed` or `handed_over`), the
/// sandbox's place is free and the verification exits.
using settled_atom = caf::atom_constant<caf::atom("settled")>;
/// `settled` rides on the verification's down message (one message fewer
/// per verification): its exit reason is `settled_reason(how)`, an error of
/// this category whose code is the status + 1 (code 0 would be no error).
/// Any other exit reason is no settlement.
inline constexpr caf::atom_value settled_category = caf::atom("svsettled");

inline caf::error settled_reason(stop_status how) {
  return caf::error{static_cast<uint8_t>(static_cast<uint8_t>(how) + 1),
                    settled_category};
}

/// The status a down message's reason settles, if it is a settlement.
inline bool settled_status(const caf::error& reason, stop_status& how) {
  if (!reason || reason.category() != settled_category || reason.code() == 0 ||
      reason.code() > static_cast<uint8_t>(stop_status::stopping) + 1)
    return false;
  how = static_cast<stop_status>(reason.code() - 1);
  return true;
}
/// A handler threw in this state (the what() text); the actor dies next.
using crashed_atom = caf::atom_constant<caf::atom("crashed")>;

using verification_parent_actor = caf::typed_actor<
  caf::reacts_to<created_atom, sandbox_handle>, caf::reacts_to<ready_atom>,
  caf::reacts_to<verified_atom, verification_outcome, stop_status>,
  caf::reacts_to<crashed_atom, verification_state, std::string>>;

} // namespace sv
