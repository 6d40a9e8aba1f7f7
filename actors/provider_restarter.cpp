#include "actors/provider_restarter.hpp"

#include "actors/detail/quiet.hpp"

#include <caf/actor_system.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/sec.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <exception>
#include <spdlog/spdlog.h>
#include <string>

namespace sv {

namespace {

struct restarter_state {
  static inline const char* name = "sv.provider_restarter";
  provider_actor built;
};

using self_ptr = provider_restarter_actor::stateful_pointer<restarter_state>;

provider_restarter_actor::behavior_type
restarter(self_ptr self, caf::actor owner, provider_factory factory) {
  self->set_default_handler(log_and_drop_unexpected);
  self->monitor(owner);
  // Nobody will take what was built: shut it down.
  auto discard = [self] {
    if (self->state.built)
      caf::anon_send_exit(self->state.built, caf::exit_reason::user_shutdown);
    self->quit();
  };
  self->set_down_handler([discard](caf::down_msg&) { discard(); });
  return {
    [self, factory](restart_atom) -> caf::result<provider_actor> {
      try {
        auto provider = factory(self->system());
        if (!provider)
          return caf::make_error(caf::sec::runtime_error,
                                 "the provider factory returned no provider");
        self->state.built = provider;
        return provider;
      } catch (const std::exception& e) {
        return caf::make_error(caf::sec::runtime_error,
                               std::string{"the provider factory threw: "} +
                                 e.what());
      }
    },
    [discard](abandon_atom) { discard(); },
  };
}

bool deterministic_scheduler(caf::actor_system& sys) {
  return dynamic_cast<caf::scheduler::test_coordinator*>(&sys.scheduler()) !=
         nullptr;
}

} // namespace

provider_restarter_actor spawn_provider_restarter(caf::actor_system& sys,
                                                  caf::actor owner,
                                                  provider_factory factory) {
  if (deterministic_scheduler(sys))
    return sys.spawn(restarter, std::move(owner), std::move(factory));
  return sys.spawn<caf::detached>(restarter, std::move(owner),
                                  std::move(factory));
}

} // namespace sv
