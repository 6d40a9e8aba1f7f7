#pragma once

// A scheduler whose timer thread sleeps through new deadlines that are not
// the earliest. CAF 0.17's clock hands every new timeout (one per request
// with a deadline) to its timer thread through a ring buffer and wakes it,
// a context switch per request; here a new timeout only wakes the timer
// thread when it must fire before everything already scheduled.

namespace caf {
class actor_system_config;
} // namespace caf

namespace sv {

/// Makes systems built from `cfg` use the work-stealing scheduler with the
/// quiet clock. No effect on the deterministic test scheduler
/// (`scheduler.policy` "testing") or on "sharing".
void install_quiet_clock(caf::actor_system_config& cfg);

} // namespace sv
