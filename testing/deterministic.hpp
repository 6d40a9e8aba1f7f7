#pragma once

// The test kit, part 1: a CAF actor system on the deterministic test
// scheduler (`caf::scheduler::test_coordinator`), for message-level tests
// of your own actors together with ours. Nothing runs until the test says
// so, and time moves only when the test advances the clock, so a deadline
// of 30 s is checked to the nanosecond in microseconds of real time.
//
//   sv::testing::deterministic_system t;
//   auto service = t.keep(t.sys.spawn(my_service, ...));
//   t.client->send(service, ...);     // `client` is a scoped actor
//   t.run_for(std::chrono::seconds{29});
//   auto reply = t.take<my_reply>(); // the first reply of that type, if any
//
// Framework-neutral (no test framework is included): use it as a fixture
// with Catch2's TEST_CASE_METHOD, GoogleTest's TEST_F, or as a member.
// (CAF 0.17's own test DSL crashes under Catch2; this drives the
// coordinator directly.) Link `sandbox_verification::testing`.

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scheduled_actor.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/scoped_actor.hpp>
#include <chrono>
#include <optional>
#include <vector>

namespace sv::testing {

/// Silences spdlog (what the runtime logs through) unless the environment
/// variable SV_TEST_LOG names a level ("debug", "info", ...).
void quiet_logs();

/// An actor system config on the test scheduler, with the protocol's
/// message types registered. Set more options before the system starts.
struct deterministic_config : caf::actor_system_config {
  deterministic_config();
};

/// An actor system on the test scheduler plus a scoped `client` actor that
/// sends requests and collects replies (`take`).
struct deterministic_system {
  deterministic_config cfg;
  caf::actor_system sys{cfg};
  caf::scheduler::test_coordinator& sched;
  caf::scoped_actor client{sys, true};
  /// What `keep` remembered: shut down when the system is destroyed.
  std::vector<caf::actor> spawned;

  deterministic_system();
  /// Sends every kept actor an exit, runs until nothing is left to do.
  ~deterministic_system();

  deterministic_system(const deterministic_system&) = delete;
  deterministic_system& operator=(const deterministic_system&) = delete;

  /// Remembers `hdl` so that it is shut down at the end, lets it start
  /// (runs every job), and returns it.
  template <class Handle>
  Handle keep(Handle hdl) {
    spawned.push_back(caf::actor_cast<caf::actor>(hdl));
    sched.run();
    return hdl;
  }

  /// The simulated clock.
  caf::actor_clock::time_point now() const;

  /// Runs every job, and fires, in order, the timeouts due no later than
  /// `now() + d` (advancing the clock to each and running what follows).
  /// Ends with the clock at `now() + d`.
  void run_for(caf::timespan d);

  /// Runs every job without moving the clock.
  void run();

  /// The first message in the client's mailbox of type T (taken out of
  /// it), if any. Never waits.
  template <class T>
  std::optional<T> take() {
    std::optional<T> out;
    client->receive([&](T& x) { out = std::move(x); },
                    caf::after(std::chrono::seconds(0)) >> [] {});
    return out;
  }

  /// The actor whose job runs next, or null when nothing is scheduled.
  caf::scheduled_actor* next_actor();
};

} // namespace sv::testing
