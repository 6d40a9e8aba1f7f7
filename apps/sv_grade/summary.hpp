#pragma once

// What sv-grade prints when a batch ends: outcomes, rewards, latency
// percentiles, throughput. Fed one entry at a time by the writer thread.

#include "apps/sv_grade/batch_line.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace sv::grade {

/// Nearest-rank percentile of `sorted` (ascending), `p` in [0, 100]: the
/// smallest value with at least p% of the values at or below it. 0 when empty.
double percentile(const std::vector<double>& sorted, double p);

/// "1:05" or "2:03:04".
std::string format_duration(double seconds);

/// A field of /proc/self/status in KiB ("VmRSS:", "VmHWM:"); 0 if missing.
uint64_t proc_status_kib(const char* field);

/// Memory and CPU of the sv-grade process itself over a batch (its own
/// threads, not the sandboxes' processes).
struct memory_use {
  uint64_t start_kib = 0;
  uint64_t peak_kib = 0;
  uint64_t end_kib = 0;
  double cpu_user_s = 0;
  double cpu_system_s = 0;
};

/// CPU seconds (user, system) this process's own threads used so far.
std::pair<double, double> own_cpu_seconds();

/// How a batch ended early, or resumed: for the summary.
struct batch_end {
  /// "SIGINT", "SIGTERM", "SIGHUP" when a signal stopped reading.
  std::string signal;
  /// Why writing the output failed (the system's message), if it did.
  std::string write_error;
  /// Input lines read (and started, or answered at once).
  uint64_t lines_read = 0;
  /// Input lines not started, when the input's size is known.
  std::optional<uint64_t> not_started;
  /// Lines skipped because the output already answered them (--resume).
  uint64_t resumed = 0;
  /// Lines started whose output line was never written.
  uint64_t unanswered = 0;
};

/// What the result cache did (`--cache`).
struct cache_use {
  std::string path;
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t stored = 0;
  uint64_t errors = 0;
};

class batch_summary {
public:
  /// Counts one output line.
  void add(const batch_entry& entry);

  /// Output lines so far.
  uint64_t lines() const noexcept { return lines_; }

  /// Lines that reached the supervisor (not invalid_request).
  uint64_t graded() const noexcept { return graded_; }

  /// Lines with `ok: true`.
  uint64_t ok() const noexcept { return ok_; }

  /// Lines with `ok: false`.
  uint64_t failed() const noexcept { return lines_ - ok_; }

  /// Mean `result.reward` over ok lines with a numeric reward.
  std::optional<double> mean_reward() const;

  /// Ok lines whose reward is exactly 1.0.
  uint64_t full_rewards() const noexcept { return full_rewards_; }

  /// Ok lines whose result has no `reward`, one that is not a JSON number
  /// (`"1.0"` is a string), or a number outside [0, 1]: each is a runner
  /// that breaks the contract of docs/runner.md, warned about in the summary.
  uint64_t reward_missing() const noexcept { return reward_missing_; }
  uint64_t reward_not_a_number() const noexcept { return reward_nan_; }
  uint64_t reward_out_of_range() const noexcept { return reward_range_; }

  /// Failures by failure_kind.
  const std::map<std::string, uint64_t>& by_kind() const noexcept {
    return by_kind_;
  }

  /// Failures by "kind/state/cause".
  const std::map<std::string, uint64_t>& by_cause() const noexcept {
    return by_cause_;
  }

  /// Total time of each graded line, ms, ascending.
  std::vector<double> total_ms() const;

  /// Total minus exec time of each graded line that ran exec, ascending.
  std::vector<double> overhead_ms() const;

  /// How the batch ended, when not simply at the end of its input.
  void set_batch_end(const batch_end& end) { end_ = end; }

  /// What the supervisor counted (sandboxes, stops, crashes, restarts).
  void set_supervisor_stats(const supervisor_stats& stats) { stats_ = stats; }

  void set_memory(const memory_use& memory) { memory_ = memory; }

  /// The result cache's counters (hits, misses, stored).
  void set_cache(const cache_use& cache) { cache_ = cache; }

  /// Output lines answered from the result cache.
  uint64_t cached() const noexcept { return cached_; }

  /// The per-node table of a nodes provider (providers/nodes: a JSON array
  /// of objects with endpoint, sandboxes, losses, ...).
  void set_nodes(const json& nodes) { nodes_ = nodes; }

  /// The multi-line report, given the batch's wall time.
  std::string render(double wall_s) const;

  /// The same facts as JSON (for dashboards and benchmarks).
  json to_json(double wall_s) const;

private:
  uint64_t lines_ = 0;
  uint64_t graded_ = 0;
  uint64_t ok_ = 0;
  uint64_t rewarded_ = 0;
  uint64_t full_rewards_ = 0;
  uint64_t reward_missing_ = 0;
  uint64_t reward_nan_ = 0;
  uint64_t reward_range_ = 0;
  double reward_sum_ = 0;
  std::map<std::string, uint64_t> by_kind_;
  std::map<std::string, uint64_t> by_cause_;
  std::vector<double> total_ms_;
  std::vector<double> overhead_ms_;
  std::optional<supervisor_stats> stats_;
  std::optional<memory_use> memory_;
  std::optional<cache_use> cache_;
  uint64_t cached_ = 0;
  std::optional<batch_end> end_;
  json nodes_ = json::array();
  /// Per node named by the outcomes (`node`): what ran there.
  struct node_tally {
    uint64_t verifications = 0;
    uint64_t ok = 0;
    /// Outcomes that took more than one attempt (their last ran here).
    uint64_t retried = 0;
    std::map<std::string, uint64_t> failures;
    std::vector<double> total_ms;
  };
  std::map<std::string, node_tally> per_node_;
  /// The per-node table: the provider's rows with the outcomes' tallies.
  json node_rows() const;
};

/// One progress line: "[####----] 82/164 50% 31.2/s ETA 0:03" when `total`
/// is known, else "82 done 31.2/s 0:05".
std::string render_progress(uint64_t done, std::optional<uint64_t> total,
                            double elapsed_s);

} // namespace sv::grade
