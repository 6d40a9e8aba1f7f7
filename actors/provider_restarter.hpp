#pragma once

// Builds a replacement provider off the scheduler threads. A provider
// factory may block for seconds (resolve python, probe isolation, reap what
// a predecessor left), so it runs on an actor with a thread of its own: one
// restarter per attempt, asked once, answering with the new provider or an
// error. Internal to actors/ (the supervisor owns restarting).

#include "messages/provider.hpp"

#include <caf/atom.hpp>
#include <caf/fwd.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>
#include <functional>

namespace sv {

/// supervisor -> restarter: build one provider now.
using restart_atom = caf::atom_constant<caf::atom("restart")>;

/// supervisor -> restarter: the answer came too late (the restart timed
/// out); shut down whatever you built and exit.
using abandon_atom = caf::atom_constant<caf::atom("abandon")>;

using provider_restarter_actor =
  caf::typed_actor<caf::replies_to<restart_atom>::with<provider_actor>,
                   caf::reacts_to<abandon_atom>>;

using provider_factory = std::function<provider_actor(caf::actor_system&)>;

/// Spawns a restarter for `owner`. It is detached (its own thread), except
/// on CAF's deterministic test scheduler, which cannot run detached actors
/// alongside its single-threaded schedule. If `owner` is gone by the time
/// the provider is built, or abandoned the restart, the restarter shuts the
/// provider down, so no provider outlives its supervisor unseen.
provider_restarter_actor spawn_provider_restarter(caf::actor_system& sys,
                                                  caf::actor owner,
                                                  provider_factory factory);

} // namespace sv
