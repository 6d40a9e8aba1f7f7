#pragma once

// A CAF actor system on the deterministic test scheduler, for message-level
// tests: nothing runs until the test says so, and time only moves when the
// test advances the clock. (CAF's own test DSL crashes under Catch2, so this
// drives `caf::scheduler::test_coordinator` directly.)

#include "messages/registry.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/detail/test_actor_clock.hpp>
#include <caf/scheduled_actor.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/scoped_actor.hpp>
#include <cstdlib>
#include <optional>
#include <spdlog/spdlog.h>
#include <vector>

namespace sv::test {

/// Tests log nothing unless SV_TEST_LOG names a level (e.g. "debug").
inline void quiet_logs() {
  auto* level = std::getenv("SV_TEST_LOG");
  spdlog::set_level(level ? spdlog::level::from_str(level)
                          : spdlog::level::off);
}

struct deterministic_config : caf::actor_system_config {
  deterministic_config() {
    quiet_logs();
    register_protocol(*this);
    set("scheduler.policy", caf::atom("testing"));
  }
};

struct deterministic_fixture {
  deterministic_config cfg;
  caf::actor_system sys{cfg};
  caf::scheduler::test_coordinator& sched =
    dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  caf::scoped_actor client{sys, true};
  std::vector<caf::actor> spawned;

  ~deterministic_fixture() {
    for (auto& hdl : spawned)
      caf::anon_send_exit(hdl, caf::exit_reason::user_shutdown);
    // Let every actor see its exit, and drop what is still scheduled.
    for (int i = 0; i < 1000 && (sched.run() + sched.trigger_timeouts()) > 0;
         ++i)
      ;
  }

  /// Remembers `hdl` so the fixture shuts it down, and returns it.
  template <class Handle>
  Handle keep(Handle hdl) {
    spawned.push_back(caf::actor_cast<caf::actor>(hdl));
    sched.run();
    return hdl;
  }

  caf::actor_clock::time_point now() const { return sched.clock().now(); }

  /// Runs every job; fires only timeouts that are due no later than
  /// `now() + d`, in order, advancing the clock to each. Ends at now() + d.
  void run_for(caf::timespan d) {
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

  /// Runs every job without moving the clock.
  void run() { run_for(caf::timespan{0}); }

  /// The first message in the client's mailbox of type T, if any.
  template <class T>
  std::optional<T> take() {
    std::optional<T> out;
    client->receive([&](T& x) { out = std::move(x); },
                    caf::after(std::chrono::seconds(0)) >> [] {});
    return out;
  }

  /// The actor the next job belongs to.
  caf::scheduled_actor* next_actor() {
    return sched.has_job() ? &sched.next_job<caf::scheduled_actor>() : nullptr;
  }
};

} // namespace sv::test
