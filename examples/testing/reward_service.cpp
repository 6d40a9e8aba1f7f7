#include "reward_service.hpp"

#include "messages/atoms.hpp"
#include "messages/enums.hpp"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>

namespace example {

namespace {

reward_verdict verdict_of(const sv::verification_outcome& out) {
  reward_verdict v;
  if (out.ok && out.result.contains("reward") &&
      out.result["reward"].is_number()) {
    v.reward = out.result["reward"].get<double>();
    v.mask_sample = false;
    return v;
  }
  v.failure_kind =
    out.ok ? "verifier_error" : std::string{sv::to_string(out.failure.kind)};
  v.reason = out.ok ? "result.json has no numeric reward" : out.failure.message;
  return v;
}

caf::behavior reward_service(caf::event_based_actor* self,
                             sv::supervisor_actor supervisor,
                             caf::timespan budget) {
  return {
    [=](grade_atom, sv::verification_request& req) {
      auto rp = self->make_response_promise<reward_verdict>();
      self->request(supervisor, budget, sv::verify_atom::value, std::move(req))
        .then(
          [rp](sv::verification_outcome& out) mutable {
            rp.deliver(verdict_of(out));
          },
          [rp](caf::error& err) mutable {
            rp.deliver(reward_verdict{0, true, "budget",
                                      "no verdict within the budget: " +
                                        caf::to_string(err)});
          });
      return rp;
    },
  };
}

} // namespace

caf::actor spawn_reward_service(caf::actor_system& sys,
                                sv::supervisor_actor supervisor,
                                caf::timespan budget) {
  return sys.spawn(reward_service, std::move(supervisor), budget);
}

} // namespace example
