#pragma once

// The local registry's warm pool: per shape (disk, memory, cpu, scratch,
// network), sandboxes prepared ahead of demand on the background threads,
// kept for the rate of creates of that shape and drained when they stop
// coming (DESIGN.md, "The local provider"). Its state is guarded by the
// registry's mutex; what it needs of the registry it asks of a
// warm_pool_host. A private header of the local provider (Asio).

#include "providers/local.hpp"
#include "providers/local/detail/sandbox/lifecycle.hpp"
#include "providers/local/detail/sandbox/sandbox.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <caf/error.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace sv::detail {

struct isolation_settings;

struct warm_pool_settings {
  /// Most pooled sandboxes of one shape; 0: no pool.
  size_t max = 0;
  /// Fill the default shape's pool at start.
  bool fill_at_start = false;
  std::chrono::milliseconds tick{250};
  /// The registry's caller-path threads (each keeps a uid the pool never
  /// takes at start).
  size_t io_threads = 1;
  std::shared_ptr<const isolation_settings> isolation;
};

/// What the pool asks of its registry.
class warm_pool_host {
public:
  virtual ~warm_pool_host() = default;

  /// Under the lock: a fresh sandbox id.
  virtual std::string new_id() = 0;

  /// Under the lock: sandboxes holding a uid outside the pool (known, and
  /// creates not answered yet).
  virtual size_t held_outside_pool() const = 0;

  /// Under the lock: whether the registry shuts down.
  virtual bool shutting_down() const = 0;

  /// Outside the lock: prepares sandbox `id` of `shape`; throws on failure.
  virtual std::shared_ptr<local_sandbox> prepare(const sandbox_shape& shape,
                                                 const std::string& id) = 0;

  /// Under the lock: a pooled sandbox whose teardown failed becomes known
  /// to the registry as a failed stop (retried, tried again at shutdown).
  virtual void adopt_failed(const std::shared_ptr<local_sandbox>& sb,
                            const caf::error& err) = 0;
};

class warm_pool {
public:
  /// `mtx` guards the pool's state (the registry's mutex); preparations,
  /// removals and the tick run on `bg`.
  warm_pool(warm_pool_settings cfg, std::mutex& mtx,
            boost::asio::io_context& bg, warm_pool_host& host);

  /// A pooled sandbox of `shape` that is exactly as prepared, or null (a
  /// miss). Notes the create for the rate and tops the pool up. Locks.
  std::shared_ptr<local_sandbox> take(const sandbox_shape& shape);

  /// Any pooled sandbox (to free what it holds), or null. Locks.
  std::shared_ptr<local_sandbox> take_any();

  /// At start, on the constructing thread: the default shape's pool
  /// filled (fill_at_start). Locks.
  void prewarm();

  /// Tears down a sandbox that was never handed out. Outside the lock.
  void destroy(const std::shared_ptr<local_sandbox>& sb);

  /// Under the lock, at shutdown: takes every pooled sandbox out and stops
  /// the tick.
  std::vector<std::shared_ptr<local_sandbox>> drain();

  /// Under the lock: ready and preparing sandboxes (each holds a uid).
  size_t held() const;

  /// Under the lock: the pool's counters and how many are ready.
  void add_stats(local_registry_stats& out) const;

private:
  struct slot_type {
    /// Ready, never handed out, oldest first.
    std::deque<std::shared_ptr<local_sandbox>> ready;
    /// Preparations posted and not finished.
    size_t preparing = 0;
    /// Creates of this shape in the current tick, and their rate (per
    /// tick, decaying).
    uint64_t creates = 0;
    double rate = 0;
  };

  size_t target(const slot_type& slot) const;
  void refill(const sandbox_shape& shape, slot_type& slot);
  void prepare(const sandbox_shape& shape, const std::string& id);
  void arm_timer();
  void tick();

  warm_pool_settings cfg_;
  std::mutex& mtx_;
  boost::asio::io_context& bg_;
  warm_pool_host& host_;

  // -- guarded by mtx_ -------------------------------------------------------

  std::map<sandbox_shape, slot_type> slots_;
  /// Ticks while the pool holds or prepares anything: rates decay, and a
  /// shape nobody creates any more is drained.
  boost::asio::steady_timer timer_;
  bool timer_armed_ = false;
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
  uint64_t discarded_ = 0;
  uint64_t prepared_ = 0;
};

} // namespace sv::detail
