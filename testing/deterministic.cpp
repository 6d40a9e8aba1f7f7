#include "testing/deterministic.hpp"

#include "messages/registry.hpp"

#include <caf/detail/test_actor_clock.hpp>
#include <caf/send.hpp>
#include <cstdlib>
#include <spdlog/spdlog.h>

namespace sv::testing {

void quiet_logs() {
  auto* level = std::getenv("SV_TEST_LOG");
  spdlog::set_level(level ? spdlog::level::from_str(level)
                          : spdlog::level::off);
}

deterministic_config::deterministic_config() {
  quiet_logs();
  register_protocol(*this);
  set("scheduler.policy", caf::atom("testing"));
}

deterministic_system::deterministic_system()
    : sched(dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler())) {
  // Nothing else: `client` is initialized after `sched` (declaration order).
}

deterministic_system::~deterministic_system() {
  for (auto& hdl : spawned)
    caf::anon_send_exit(hdl, caf::exit_reason::user_shutdown);
  // Let every actor see its exit, and drop what is still scheduled.
  for (int i = 0; i < 1000 && (sched.run() + sched.trigger_timeouts()) > 0; ++i)
    ;
}

caf::actor_clock::time_point deterministic_system::now() const {
  return sched.clock().now();
}

void deterministic_system::run_for(caf::timespan d) {
  auto until = now() + d;
  sched.run();
  for (;;) {
    auto& schedule = sched.clock().schedule();
    if (schedule.empty() || schedule.begin()->first > until)
      break;
    auto next = schedule.begin()->first;
    if (next > now())
      sched.advance_time(next - now());
    else
      sched.trigger_timeout();
    sched.run();
  }
  if (until > now())
    sched.advance_time(until - now());
  sched.run();
}

void deterministic_system::run() {
  run_for(caf::timespan{0});
}

caf::scheduled_actor* deterministic_system::next_actor() {
  return sched.has_job() ? &sched.next_job<caf::scheduled_actor>() : nullptr;
}

} // namespace sv::testing
