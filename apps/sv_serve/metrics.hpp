#pragma once

// sv-serve's counters and their rendering in Prometheus' text format
// (version 0.0.4). Thread-safe: sessions on any Asio thread count into it.

#include "messages/protocol.hpp"

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace sv::serve {

class metrics {
public:
  /// The upper bounds of the latency buckets, in seconds (+Inf implied).
  static constexpr std::array<double, 14> bounds = {
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300};

  void count_http(unsigned code);
  /// A verification is handed to the supervisor / has its outcome.
  void started();
  void finished(const verification_outcome& out);
  /// `n` verifications were cancelled (their client went away).
  void cancelled(uint64_t n);

  /// The sandboxes of the sandbox API (apps/sv_serve/sandboxes.cpp).
  struct api_sandboxes {
    std::atomic<uint64_t> live{0};
    std::atomic<uint64_t> created{0}; // creates sent to the provider
    std::atomic<uint64_t> reaped{0};  // stopped by their TTL or idleness
    /// Stopped when made: their caller was gone or past its deadline.
    std::atomic<uint64_t> unclaimed{0};
  };
  api_sandboxes api;
  /// The HTTP server's connections (apps/sv_serve/server.cpp).
  struct connection_counts {
    std::atomic<uint64_t> open{0};
    std::atomic<uint64_t> refused{0};       // over --max-connections
    std::atomic<uint64_t> accept_pauses{0}; // failed accepts (EMFILE...)
  };
  connection_counts conns;
  /// The result cache's hits and misses so far (`--cache`).
  struct cache_counts {
    uint64_t hits = 0;
    uint64_t misses = 0;
  };
  /// With a cache: `read` (thread-safe) gives its counts at each render.
  void track_cache(std::function<cache_counts()> read);

  /// The text of GET /metrics; `stats` from the supervisor when it answered.
  std::string render(const std::optional<supervisor_stats>& stats) const;

private:
  struct histogram {
    std::array<uint64_t, bounds.size()> buckets{};
    uint64_t count = 0;
    double sum = 0;
    void observe(double seconds);
  };

  mutable std::mutex mtx_;
  std::map<unsigned, uint64_t> http_;
  std::map<std::string, uint64_t> verifications_; // by rendered labels
  std::map<std::string, histogram> states_;       // by state name
  histogram total_;
  uint64_t in_flight_ = 0;
  uint64_t cancelled_ = 0;
  std::function<cache_counts()> cache_;
};

} // namespace sv::serve
