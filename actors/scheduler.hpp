#pragma once

// The scheduler of the runtime: CAF 0.17's work stealing, mended where it
// cost the most on the grading path (each measured; see bench/README.md):
// - the timer thread sleeps through new deadlines that are not the earliest
//   (CAF's clock wakes it for every request with a timeout), and never runs
//   foreign code (sends, destructors of timers) under its lock;
// - the worker loop skips a per-job cross-cast for a logger that Debian's
//   build compiles out;
// - idle workers steal a victim's oldest job in O(1) (CAF walks the whole
//   job list for every steal, quadratic with many runnable actors);
// - a worker's jobs wait in a ring buffer, not a list with a malloc per
//   queued job, and the clock takes its map nodes from a pool.

#include <cstddef>
#include <optional>

namespace caf {
class actor_system;
class actor_system_config;
} // namespace caf

namespace sv {

/// Makes systems built from `cfg` use this scheduler. No effect on the
/// deterministic test scheduler (`scheduler.policy` "testing") or on
/// "sharing".
void install_scheduler(caf::actor_system_config& cfg);

/// Makes the threads of this process allocate from one malloc arena
/// (glibc's M_ARENA_MAX = 1), unless the environment sets MALLOC_ARENA_MAX.
/// Call it before the actor system starts its threads (a thread keeps the
/// arena it first allocated from). Returns whether it was set.
///
/// Why: a message is allocated on the sender's worker and freed on the
/// receiver's; with an arena per thread (glibc's default, up to 8 per
/// core) each free goes back to the sender's arena under its lock, and
/// each arena keeps its own high-water mark. With 100,000 verifications in
/// flight that cost ~20 % more CPU per verification (free-list work, page
/// faults) and ~0.5 KiB more memory per verification than one arena
/// (bench/README.md, section 1e); each thread's own cache (tcache) still
/// serves most small allocations without the arena's lock.
bool use_one_malloc_arena();

/// What the clock of this scheduler holds: every timer (timeouts and delayed
/// messages), and how many of them are cancellable (an actor's timeouts).
struct clock_counts {
  std::size_t scheduled;
  std::size_t cancellable;
};

/// The timers pending in `sys`'s clock, or nullopt where `sys` does not run
/// this scheduler. For tests and diagnostics.
std::optional<clock_counts> pending_timers(caf::actor_system& sys);

} // namespace sv
