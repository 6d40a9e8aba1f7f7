#pragma once

// A user's service, as a resources server would write it: it grades one
// completion through sandbox_verification's supervisor and answers a NeMo
// Gym-style verdict. Infrastructure faults must never become a reward of 0
// for the model: every failed verification (and a supervisor that does not
// answer within the service's own budget) is masked.

#include "messages/provider.hpp"

#include <caf/actor.hpp>
#include <caf/atom.hpp>
#include <caf/timespan.hpp>
#include <string>

namespace caf {
class actor_system;
} // namespace caf

namespace example {

using grade_atom = caf::atom_constant<caf::atom("grade")>;

/// The service's answer to one `(grade_atom, verification_request)`.
struct reward_verdict {
  double reward = 0;
  bool mask_sample = true;
  /// Empty when graded; else the failure_kind, or "budget".
  std::string failure_kind;
  std::string reason;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, reward_verdict& x) {
  return f(caf::meta::type_name("reward_verdict"), x.reward, x.mask_sample,
           x.failure_kind, x.reason);
}

/// Spawns the service; it gives the supervisor at most `budget` per
/// completion.
caf::actor spawn_reward_service(caf::actor_system& sys,
                                sv::supervisor_actor supervisor,
                                caf::timespan budget);

} // namespace example
