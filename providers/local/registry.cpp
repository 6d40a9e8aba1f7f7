#include "providers/local/registry.hpp"

#include "messages/errors.hpp"
#include "providers/local/host/process.hpp"
#include "providers/local/host/trusted_dir.hpp"
#include "providers/local/isolation.hpp"
#include "providers/local/sandbox/confined_fs.hpp"
#include "providers/local/sandbox/exec.hpp"
#include "providers/local/sandbox/lifecycle.hpp"
#include "providers/local/sandbox/places.hpp"
#include "providers/local/sandbox/sandbox.hpp"

#include <algorithm>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <thread>
#include <unistd.h>
#include <unordered_set>
#include <vector>

namespace sv {

namespace asio = boost::asio;
using detail::local_sandbox;
using detail::sandbox_phase;

namespace {

/// How long shutdown waits for the I/O threads to finish the last stops
/// before it abandons what is left.
constexpr std::chrono::seconds shutdown_wait{30};

/// Threads of the background context: teardowns and the warm pool.
constexpr size_t background_threads = 2;

/// How many ids of sandboxes torn down at their provider's exit are kept
/// for a replacement's stop.
constexpr size_t max_tombstones = 65536;

caf::error unavailable() {
  return make_error(provider_errc::unavailable,
                    "the local provider is shutting down");
}

caf::error no_such_sandbox(const std::string& id) {
  return make_error(provider_errc::no_such_sandbox,
                    "no sandbox " + id + " (never created, or stopped)");
}

std::chrono::steady_clock::duration to_duration(double seconds) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
    std::chrono::duration<double>(seconds));
}

/// Runs `f`, turning what it throws into the provider error to report.
template <class T, class F>
caf::expected<T> guarded(F&& f) {
  try {
    return f();
  } catch (const detail::fs_error& e) {
    return make_error(e.code(), e.what());
  } catch (const std::exception& e) {
    return make_error(provider_errc::io_error, e.what());
  }
}

} // namespace

struct local_registry::impl {
  explicit impl(detail::registry_settings settings)
      : cfg(std::move(settings)), work(asio::make_work_guard(io)),
        bg_work(asio::make_work_guard(bg)), pool_timer(bg) {
    exec_cfg.python_name = cfg.python_name;
    exec_cfg.python_path = cfg.python_path;
    exec_cfg.isolation = cfg.isolation;
  }

  detail::registry_settings cfg;
  detail::exec_settings exec_cfg;
  detail::unique_fd root;
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work;
  std::vector<std::thread> threads;
  /// The background: teardowns that run behind their reply and the warm
  /// pool's preparations and removals. Its own threads, below the caller
  /// path's priority (half the sandboxes' niceness), so that work never
  /// queues a create, upload, exec or download behind it, nor takes a core
  /// from one (bench/README.md, "Orchestration overhead").
  asio::io_context bg;
  asio::executor_work_guard<asio::io_context::executor_type> bg_work;
  std::vector<std::thread> bg_threads;

  // -- guarded by mtx --------------------------------------------------------

  mutable std::mutex mtx;
  std::condition_variable idle;
  size_t running_threads = 0;
  size_t running_bg_threads = 0;
  std::map<std::string, std::shared_ptr<local_sandbox>> sandboxes;
  std::set<uint64_t> owners;
  uint64_t next_owner = 1;
  /// Sandboxes torn down at their provider's exit, oldest first.
  std::unordered_set<std::string> tombstones;
  std::deque<std::string> tombstone_order;
  uint64_t next_sandbox = 1;
  uint64_t next_exec = 1;
  /// Creates posted and not answered yet.
  size_t creating = 0;
  std::mt19937_64 rng{std::random_device{}()};
  local_registry_stats counters;
  bool shutting_down = false;
  bool shut_down = false;

  // -- the warm pool, guarded by mtx -----------------------------------------

  /// Sandboxes of one shape prepared ahead of demand.
  struct pool_slot {
    /// Ready, never handed out, oldest first.
    std::deque<std::shared_ptr<local_sandbox>> ready;
    /// Preparations posted and not finished.
    size_t preparing = 0;
    /// Creates of this shape in the current tick, and their rate (per
    /// tick, decaying).
    uint64_t creates = 0;
    double rate = 0;
  };
  std::map<detail::sandbox_shape, pool_slot> pool;
  /// Ticks while the pool holds or prepares anything: rates decay, and a
  /// shape nobody creates any more is drained.
  asio::steady_timer pool_timer;
  bool pool_timer_armed = false;

  // -- the registry ----------------------------------------------------------

  /// Unique across restarts too: pid and start time of this process (the
  /// reaper's proof of ownership), counter and random bits. Under mtx.
  std::string new_id() {
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx",
                  static_cast<unsigned long long>(rng()));
    return "sb-" + detail::instance_tag() + "-" +
           std::to_string(next_sandbox++) + "-" + std::string{hex, 8};
  }

  /// The live sandbox `id` in `out`, or why there is none.
  caf::error find_live(const std::string& id,
                       std::shared_ptr<local_sandbox>& out) const {
    std::lock_guard<std::mutex> guard{mtx};
    if (shutting_down)
      return unavailable();
    auto i = sandboxes.find(id);
    if (i == sandboxes.end() || i->second->phase != sandbox_phase::live)
      return no_such_sandbox(id);
    out = i->second;
    return caf::none;
  }

  void add_tombstone(const std::string& id) {
    if (!tombstones.insert(id).second)
      return;
    tombstone_order.push_back(id);
    if (tombstone_order.size() > max_tombstones) {
      tombstones.erase(tombstone_order.front());
      tombstone_order.pop_front();
    }
  }

  /// Runs `f(sandbox)` on the sandbox's strand while it is live; answers
  /// what it returns.
  template <class T, class F>
  void on_strand(const std::string& id, local_completion<T> done, F f) {
    std::shared_ptr<local_sandbox> sb;
    if (auto err = find_live(id, sb))
      return done(std::move(err));
    asio::post(sb->strand,
               [this, sb, done{std::move(done)}, f{std::move(f)}]() mutable {
                 if (sb->torn_down) // a stop ran first on the strand
                   return done(no_such_sandbox(sb->id));
                 done(guarded<T>([&] { return f(*sb); }));
               });
  }

  // -- create ----------------------------------------------------------------

  caf::expected<sandbox_handle> make_sandbox(uint64_t owner,
                                             const std::string& id,
                                             const sandbox_spec& spec) {
    {
      std::lock_guard<std::mutex> guard{mtx};
      if (shutting_down)
        return unavailable();
    }
    auto& iso = *cfg.isolation;
    // The file system work happens outside the lock.
    std::shared_ptr<local_sandbox> sb;
    try {
      if (auto why = detail::check_workdir(iso, spec.workdir); !why.empty())
        throw detail::fs_error(provider_errc::invalid_argument, why);
      auto shape = detail::shape_of(iso, spec);
      sb = take_pooled(shape);
      for (int tries = 0; !sb; ++tries) {
        try {
          sb = detail::prepare_local_sandbox(iso, root.get(), cfg.root, id,
                                             shape, asio::make_strand(io));
        } catch (const std::runtime_error&) {
          // Pooled sandboxes of other shapes hold uids a create needs:
          // one of them goes, and the create tries again.
          auto spare = tries == 0 ? take_any_pooled() : nullptr;
          if (!spare)
            throw;
          destroy_pooled(spare);
        }
      }
      detail::assign_spec(iso, *sb, spec);
    } catch (const detail::fs_error& e) {
      return make_error(e.code(), e.what());
    } catch (const std::exception& e) {
      return make_error(provider_errc::sandbox_error,
                        "cannot create sandbox " + id + ": " + e.what());
    }
    sb->owner = owner;
    {
      std::lock_guard<std::mutex> guard{mtx};
      if (!shutting_down && owners.count(owner) > 0) {
        sandboxes.emplace(sb->id, sb);
        ++counters.created;
        if (spec.ttl_s > 0)
          asio::post(sb->strand,
                     [this, sb, ttl{spec.ttl_s}] { arm_ttl(sb, ttl); });
        return sandbox_handle{sb->id, "local", ""};
      }
    }
    // Shutdown began meanwhile, or the provider that asked is gone: nobody
    // will ever stop it.
    if (auto err = detail::teardown_local_sandbox(*sb))
      spdlog::warn("local provider: removing {}, made after its provider "
                   "left: {}",
                   sb->id, describe(err));
    return unavailable();
  }

  // -- the warm pool ---------------------------------------------------------

  /// How many ticks of creates the pool keeps ready for (at least one
  /// sandbox while creates come); a tick lasts cfg.warm_pool_tick.
  static constexpr double pool_lead_ticks = 0.5;

  /// Under mtx: how many sandboxes of `slot`'s shape to keep ready.
  size_t pool_target(const pool_slot& slot) const {
    auto rate = std::max(slot.rate, static_cast<double>(slot.creates));
    if (rate <= 0.25)
      return 0;
    auto want = static_cast<size_t>(std::ceil(rate * pool_lead_ticks));
    return std::clamp<size_t>(want, 1, cfg.warm_pool);
  }

  /// A pooled sandbox of `shape` that is exactly as prepared, or null (a
  /// miss). Notes the create for the rate and tops the pool up. On an I/O
  /// thread.
  std::shared_ptr<local_sandbox> take_pooled(const detail::sandbox_shape& s) {
    if (cfg.warm_pool == 0)
      return nullptr;
    std::unique_lock<std::mutex> guard{mtx};
    auto& slot = pool[s];
    ++slot.creates;
    while (!slot.ready.empty()) {
      auto sb = std::move(slot.ready.front());
      slot.ready.pop_front();
      guard.unlock();
      // Its own descriptors and files only: nobody else knows it.
      auto why = detail::check_unused(*cfg.isolation, *sb);
      if (why.empty()) {
        guard.lock();
        ++counters.pool_hits;
        refill(s, slot);
        return sb;
      }
      spdlog::warn("local provider: pooled sandbox {} discarded: {}", sb->id,
                   why);
      // Off the create's path.
      asio::post(bg, [this, sb] { destroy_pooled(sb); });
      guard.lock();
      ++counters.pool_discarded;
    }
    ++counters.pool_misses;
    refill(s, slot);
    return nullptr;
  }

  /// At start, on the constructing thread (never a scheduler's: making a
  /// registry is slow anyway): the default shape's pool filled as if
  /// creates of it were coming, ready before the first create can arrive
  /// (filled on the background threads, it still raced the first creates
  /// of a run, which then prepared their own at once). Its rate is seeded
  /// so the ticks keep it, decaying like any rate: an unused pool drains in
  /// about 4 s. It leaves every I/O thread a uid of the half that refills
  /// never take.
  void prewarm() {
    auto n = cfg.warm_pool_start ? cfg.warm_pool : 0;
    if (auto& uids = cfg.isolation->uids) {
      size_t half = uids->count() / 2;
      n = std::min(n, half > cfg.io_threads ? half - cfg.io_threads : 0);
    }
    if (n == 0)
      return;
    // Named: GCC 12 warns (falsely) about the fields of a temporary.
    sandbox_spec defaults;
    auto shape = detail::shape_of(*cfg.isolation, defaults);
    std::vector<std::shared_ptr<local_sandbox>> made;
    for (size_t i = 0; i < n; ++i) {
      std::string id;
      {
        std::lock_guard<std::mutex> guard{mtx};
        id = new_id();
      }
      try {
        made.push_back(detail::prepare_local_sandbox(*cfg.isolation, root.get(),
                                                     cfg.root, id, shape,
                                                     asio::make_strand(io)));
      } catch (const std::exception& e) {
        spdlog::warn("local provider: cannot prepare a pooled sandbox: {}",
                     e.what());
        break;
      }
    }
    std::lock_guard<std::mutex> guard{mtx};
    auto& slot = pool[shape];
    slot.rate = static_cast<double>(n) / pool_lead_ticks;
    counters.pool_prepared += made.size();
    for (auto& sb : made)
      slot.ready.push_back(std::move(sb));
    refill(shape, slot);
  }

  /// Any pooled sandbox (to free what it holds), or null.
  std::shared_ptr<local_sandbox> take_any_pooled() {
    std::lock_guard<std::mutex> guard{mtx};
    for (auto& entry : pool)
      if (!entry.second.ready.empty()) {
        auto sb = std::move(entry.second.ready.front());
        entry.second.ready.pop_front();
        return sb;
      }
    return nullptr;
  }

  /// Under mtx: posts the preparations that bring `slot` to its target.
  void refill(const detail::sandbox_shape& shape, pool_slot& slot) {
    if (shutting_down)
      return;
    auto target = pool_target(slot);
    // Never more than half the uids in use or pooled: a create must find
    // one (other providers on the host lease from the same range).
    size_t held = sandboxes.size() + creating;
    for (auto& entry : pool)
      held += entry.second.ready.size() + entry.second.preparing;
    auto& uids = cfg.isolation->uids;
    auto uid_room = [&] { return !uids || (held + 1) * 2 <= uids->count(); };
    while (slot.ready.size() + slot.preparing < target && uid_room()) {
      ++held;
      ++slot.preparing;
      auto id = new_id();
      asio::post(bg, [this, shape, id] { prepare_pooled(shape, id); });
    }
    arm_pool_timer();
  }

  /// Prepares one sandbox for the pool (a background thread).
  void prepare_pooled(const detail::sandbox_shape& shape,
                      const std::string& id) {
    std::shared_ptr<local_sandbox> sb;
    try {
      sb = detail::prepare_local_sandbox(*cfg.isolation, root.get(), cfg.root,
                                         id, shape, asio::make_strand(io));
    } catch (const std::exception& e) {
      spdlog::warn("local provider: cannot prepare a pooled sandbox: {}",
                   e.what());
    }
    std::unique_lock<std::mutex> guard{mtx};
    auto& slot = pool[shape];
    --slot.preparing;
    if (!sb)
      return;
    ++counters.pool_prepared;
    if (!shutting_down && slot.ready.size() < pool_target(slot)) {
      slot.ready.push_back(std::move(sb));
      return;
    }
    guard.unlock();
    destroy_pooled(sb);
  }

  /// Tears down a sandbox that was never handed out; one that does not go
  /// becomes known as a failed stop (retried, and tried again at shutdown).
  void destroy_pooled(const std::shared_ptr<local_sandbox>& sb) {
    sb->torn_down = true;
    auto err = detail::teardown_local_sandbox(*sb);
    if (!err)
      return;
    std::lock_guard<std::mutex> guard{mtx};
    ++counters.failed_stops;
    sb->phase = sandbox_phase::stop_failed;
    sandboxes.emplace(sb->id, sb);
    schedule_retry(sb, err);
  }

  /// Under mtx: ticks the pool while it holds or prepares anything.
  void arm_pool_timer() {
    if (pool_timer_armed || shutting_down)
      return;
    pool_timer_armed = true;
    pool_timer.expires_after(cfg.warm_pool_tick);
    pool_timer.async_wait([this](boost::system::error_code ec) {
      if (!ec)
        pool_tick_now();
    });
  }

  /// One tick: rates decay; what a shape no longer needs is destroyed.
  void pool_tick_now() {
    std::vector<std::shared_ptr<local_sandbox>> surplus;
    {
      std::lock_guard<std::mutex> guard{mtx};
      pool_timer_armed = false;
      if (shutting_down)
        return;
      bool busy = false;
      for (auto i = pool.begin(); i != pool.end();) {
        auto& slot = i->second;
        // Halves in about three ticks: an idle shape drains in ~2 s.
        slot.rate = 0.8 * slot.rate + 0.2 * static_cast<double>(slot.creates);
        slot.creates = 0;
        auto target = pool_target(slot);
        while (slot.ready.size() > target) {
          surplus.push_back(std::move(slot.ready.back()));
          slot.ready.pop_back();
        }
        if (slot.ready.empty() && slot.preparing == 0 && target == 0) {
          i = pool.erase(i);
          continue;
        }
        busy = true;
        ++i;
      }
      if (busy)
        arm_pool_timer();
    }
    for (auto& sb : surplus)
      destroy_pooled(sb);
  }

  /// Under mtx, at shutdown: takes every pooled sandbox out.
  std::vector<std::shared_ptr<local_sandbox>> drain_pool() {
    std::vector<std::shared_ptr<local_sandbox>> out;
    for (auto& entry : pool)
      for (auto& sb : entry.second.ready)
        out.push_back(std::move(sb));
    for (auto& entry : pool)
      entry.second.ready.clear();
    if (pool_timer_armed)
      pool_timer.cancel();
    return out;
  }

  /// Reaps a sandbox its caller forgot, like a stop call.
  void arm_ttl(const std::shared_ptr<local_sandbox>& sb, double ttl_s) {
    sb->ttl.expires_after(to_duration(ttl_s));
    sb->ttl.async_wait(
      asio::bind_executor(sb->strand, [this, sb](boost::system::error_code ec) {
        if (ec || !begin_stop(*sb, false))
          return;
        spdlog::warn("local provider: sandbox {} outlived its TTL, stopping it",
                     sb->id);
        run_stop(sb);
      }));
  }

  // -- stop ------------------------------------------------------------------

  /// Moves a live or failed sandbox to stopping; false if it is stopping
  /// already. `by_owner_exit`: its provider left.
  bool begin_stop(local_sandbox& sb, bool by_owner_exit) {
    std::lock_guard<std::mutex> guard{mtx};
    if (sb.phase == sandbox_phase::stopping)
      return false;
    sb.phase = sandbox_phase::stopping;
    sb.by_owner_exit = by_owner_exit;
    return true;
  }

  /// Moves a failed sandbox to stopping for its next try; false if a stop
  /// call or shutdown took it meanwhile.
  bool begin_retry(local_sandbox& sb) {
    std::lock_guard<std::mutex> guard{mtx};
    if (sb.phase != sandbox_phase::stop_failed || shutting_down)
      return false;
    sb.phase = sandbox_phase::stopping;
    return true;
  }

  /// Starts the teardown of `sb` on its strand. With no command running
  /// (a stop behind its reply), nothing else on the strand touches it any
  /// more, so the teardown moves to the background; otherwise it runs here,
  /// in line with the commands' exits.
  void run_stop(const std::shared_ptr<local_sandbox>& sb) {
    sb->torn_down = true;
    sb->ttl.cancel();
    sb->retry.cancel();
    if (sb->execs.empty())
      asio::post(bg, [this, sb] { finish_stop(sb); });
    else
      finish_stop(sb);
  }

  /// Tears `sb` down and answers everyone waiting; on its strand or, once
  /// nothing else touches it, on a background thread.
  void finish_stop(const std::shared_ptr<local_sandbox>& sb) {
    auto err = cfg.stop_fault ? cfg.stop_fault(sb->id) : caf::error{};
    if (!err)
      err = detail::teardown_local_sandbox(*sb);
    std::vector<detail::stop_waiter> waiters;
    {
      std::lock_guard<std::mutex> guard{mtx};
      waiters.swap(sb->stop_waiters);
      if (!err) {
        sandboxes.erase(sb->id);
        ++counters.stopped;
        if (sb->by_owner_exit && waiters.empty())
          add_tombstone(sb->id);
      } else {
        ++counters.failed_stops;
        sb->phase = sandbox_phase::stop_failed;
        schedule_retry(sb, err);
      }
    }
    for (auto& w : waiters)
      w(err);
  }

  /// Under mtx: the next try of a failed stop, or the log that gives up.
  void schedule_retry(const std::shared_ptr<local_sandbox>& sb,
                      const caf::error& err) {
    auto n = ++sb->failed_stops;
    if (shutting_down || n >= cfg.stop_attempts) {
      spdlog::error("local provider: stopping {} failed {} times, last: {}; "
                    "it stays known (a stop call tries again, shutdown "
                    "once more, the next start's reaper removes what is "
                    "left)",
                    sb->id, n, describe(err));
      return;
    }
    auto delay =
      cfg.stop_retry_delay * (int64_t{1} << std::min<uint32_t>(n - 1, 16));
    spdlog::warn("local provider: stopping {} failed (try {} of {}): {}; "
                 "trying again in {} ms",
                 sb->id, n, cfg.stop_attempts, describe(err), delay.count());
    sb->retry.expires_after(delay);
    sb->retry.async_wait(
      asio::bind_executor(sb->strand, [this, sb](boost::system::error_code ec) {
        if (!ec && begin_retry(*sb))
          run_stop(sb);
      }));
  }

  void stop(const std::string& id, local_completion<ok_atom> done) {
    std::shared_ptr<local_sandbox> sb;
    bool start = false;
    auto answer = [done](caf::error err) {
      if (err)
        done(std::move(err));
      else
        done(ok_atom::value);
    };
    {
      std::unique_lock<std::mutex> guard{mtx};
      if (shutting_down) {
        guard.unlock();
        return done(unavailable());
      }
      auto i = sandboxes.find(id);
      if (i == sandboxes.end()) {
        // Torn down when its provider left: stopped, exactly once.
        bool removed = tombstones.erase(id) > 0;
        guard.unlock();
        return removed ? done(ok_atom::value) : done(no_such_sandbox(id));
      }
      sb = i->second;
      sb->stop_waiters.emplace_back(std::move(answer));
      if (sb->phase != sandbox_phase::stopping) {
        sb->phase = sandbox_phase::stopping;
        sb->by_owner_exit = false;
        start = true;
      }
    }
    if (start)
      asio::post(sb->strand, [this, sb] { run_stop(sb); });
  }

  void leave(uint64_t owner) {
    std::vector<std::shared_ptr<local_sandbox>> orphans;
    {
      std::lock_guard<std::mutex> guard{mtx};
      owners.erase(owner);
      for (auto& entry : sandboxes)
        if (entry.second->owner == owner &&
            entry.second->phase == sandbox_phase::live) {
          entry.second->phase = sandbox_phase::stopping;
          entry.second->by_owner_exit = true;
          orphans.push_back(entry.second);
        }
    }
    for (auto& sb : orphans)
      asio::post(sb->strand, [this, sb] { run_stop(sb); });
  }

  // -- threads ---------------------------------------------------------------

  void start_threads() {
    std::lock_guard<std::mutex> guard{mtx};
    for (size_t i = 0; i < cfg.io_threads; ++i) {
      ++running_threads;
      threads.emplace_back([this] { run_thread(io, running_threads); });
    }
    // Half-way between the caller path (the service's own niceness) and
    // the sandboxes (`sandbox_nice`, absolute): a teardown still wins a
    // core from a runner.
    int sandbox_nice = cfg.isolation->nice;
    for (size_t i = 0; i < background_threads; ++i) {
      ++running_bg_threads;
      bg_threads.emplace_back([this, sandbox_nice] {
        // Lowering one's own priority needs no privilege; Linux applies
        // it to this thread only.
        auto tid = static_cast<id_t>(::syscall(SYS_gettid));
        errno = 0;
        auto now = ::getpriority(PRIO_PROCESS, tid);
        auto target = std::min((now + sandbox_nice + 1) / 2, 19);
        if (errno == 0 && target > now &&
            ::setpriority(PRIO_PROCESS, tid, target) != 0)
          spdlog::warn("local provider: cannot lower the priority of a "
                       "background thread: {}",
                       std::strerror(errno));
        run_thread(bg, running_bg_threads);
      });
    }
  }

  void run_thread(asio::io_context& ctx, size_t& running) {
    for (;;) {
      try {
        ctx.run();
        break;
      } catch (const std::exception& e) {
        spdlog::error("local provider: I/O handler failed: {}", e.what());
      }
    }
    std::lock_guard<std::mutex> guard{mtx};
    --running;
    idle.notify_all();
  }

  void shutdown() {
    std::vector<std::shared_ptr<local_sandbox>> all;
    std::vector<std::shared_ptr<local_sandbox>> pooled;
    {
      std::lock_guard<std::mutex> guard{mtx};
      if (shut_down || shutting_down)
        return;
      shutting_down = true;
      // Preparations still running destroy what they make (shutting_down).
      pooled = drain_pool();
      for (auto& entry : sandboxes)
        if (entry.second->phase != sandbox_phase::stopping) {
          entry.second->phase = sandbox_phase::stopping;
          all.push_back(entry.second);
        }
    }
    for (auto& sb : all)
      asio::post(sb->strand, [this, sb] { run_stop(sb); });
    for (auto& sb : pooled)
      asio::post(bg, [this, sb] { destroy_pooled(sb); });
    // Without the guard, run() returns once the stops and the execs they
    // kill are done. The background's guard goes only after that: a stop
    // on a strand may still hand its teardown over.
    work.reset();
    {
      auto until = std::chrono::steady_clock::now() + shutdown_wait;
      std::unique_lock<std::mutex> guard{mtx};
      bool done =
        idle.wait_until(guard, until, [this] { return running_threads == 0; });
      if (done) {
        guard.unlock();
        bg_work.reset();
        guard.lock();
        done = idle.wait_until(guard, until,
                               [this] { return running_bg_threads == 0; });
      }
      if (!done) {
        spdlog::error("local provider: I/O still busy after {} s at "
                      "shutdown, abandoning it",
                      shutdown_wait.count());
        guard.unlock();
        bg_work.reset();
        io.stop();
        bg.stop();
      }
    }
    for (auto* ts : {&threads, &bg_threads})
      for (auto& t : *ts)
        if (t.joinable())
          t.join();
    std::lock_guard<std::mutex> guard{mtx};
    if (!sandboxes.empty())
      spdlog::error("local provider: {} sandboxes could not be stopped at "
                    "shutdown; the next start's reaper removes them",
                    sandboxes.size());
    shut_down = true;
  }
};

// -- local_registry -----------------------------------------------------------

local_registry::local_registry(detail::registry_settings cfg)
    : impl_(std::make_unique<impl>(std::move(cfg))) {
  // Checked again here: the registry keeps this descriptor, and every
  // sandbox directory is made and removed relative to it.
  impl_->root = detail::open_trusted_dir(impl_->cfg.root);
  impl_->start_threads();
  impl_->prewarm();
}

local_registry::~local_registry() {
  impl_->shutdown();
}

uint64_t local_registry::join() {
  std::lock_guard<std::mutex> guard{impl_->mtx};
  auto token = impl_->next_owner++;
  impl_->owners.insert(token);
  return token;
}

void local_registry::leave(uint64_t owner) {
  impl_->leave(owner);
}

void local_registry::create(uint64_t owner, const sandbox_spec& spec,
                            local_completion<sandbox_handle> done) {
  std::string id;
  {
    std::unique_lock<std::mutex> guard{impl_->mtx};
    if (impl_->shutting_down) {
      // Its I/O threads may be gone: nothing posted would ever run.
      guard.unlock();
      return done(unavailable());
    }
    id = impl_->new_id();
    ++impl_->creating;
  }
  asio::post(impl_->io,
             [p = impl_.get(), owner, id, spec, done{std::move(done)}] {
               auto r = p->make_sandbox(owner, id, spec);
               {
                 std::lock_guard<std::mutex> guard{p->mtx};
                 --p->creating;
               }
               done(std::move(r));
             });
}

bool local_registry::is_live(const std::string& id) const {
  std::shared_ptr<local_sandbox> sb;
  return !impl_->find_live(id, sb);
}

void local_registry::upload(const std::string& id, std::string dir,
                            file_map files, local_completion<ok_atom> done) {
  impl_->on_strand<ok_atom>(
    id, std::move(done),
    [dir{std::move(dir)}, files{std::move(files)}](local_sandbox& sb) {
      for (auto& [path, content] : files) {
        auto place =
          detail::locate_file(sb, dir.empty() ? path : dir + "/" + path);
        detail::write_confined_file(place.base, place.rel, content,
                                    sb.confinement.uid.uid, place.shown);
      }
      return ok_atom::value;
    });
}

void local_registry::exec(const std::string& id, exec_request x,
                          local_completion<exec_result> done) {
  std::shared_ptr<local_sandbox> sb;
  if (auto err = impl_->find_live(id, sb))
    return done(std::move(err));
  uint64_t n = 0;
  {
    std::lock_guard<std::mutex> guard{impl_->mtx};
    n = impl_->next_exec++;
  }
  asio::post(sb->strand, [p = impl_.get(), sb, n, x{std::move(x)},
                          done{std::move(done)}]() mutable {
    if (sb->torn_down) // on the strand: a stop ran before this call
      return done(no_such_sandbox(sb->id));
    detail::launch_plan plan;
    try {
      plan = detail::make_launch_plan(*sb, x, p->exec_cfg);
    } catch (const detail::fs_error& e) {
      return done(make_error(e.code(), e.what()));
    } catch (const std::exception& e) {
      return done(make_error(provider_errc::io_error, e.what()));
    }
    detail::start_exec(sb, n, std::move(plan),
                       [done](exec_result r) { done(std::move(r)); });
  });
}

void local_registry::download(const std::string& id, std::string path,
                              local_completion<std::string> done) {
  auto max = impl_->cfg.max_download_bytes;
  impl_->on_strand<std::string>(
    id, std::move(done), [path{std::move(path)}, max](local_sandbox& sb) {
      auto place = detail::locate_file(sb, path);
      return detail::read_confined_file(place.base, place.rel, max,
                                        place.shown);
    });
}

void local_registry::stop(const std::string& id,
                          local_completion<ok_atom> done) {
  impl_->stop(id, std::move(done));
}

const local_ceilings& local_registry::ceilings() const {
  return impl_->cfg.ceilings;
}

const std::string& local_registry::python_name() const {
  return impl_->cfg.python_name;
}

const json& local_registry::interpreter() const {
  return impl_->cfg.interpreter;
}

local_registry_stats local_registry::stats() const {
  std::lock_guard<std::mutex> guard{impl_->mtx};
  auto out = impl_->counters;
  out.known = impl_->sandboxes.size();
  for (auto& entry : impl_->sandboxes)
    out.stop_failed += entry.second->phase == sandbox_phase::stop_failed;
  for (auto& entry : impl_->pool)
    out.pooled += entry.second.ready.size();
  return out;
}

void local_registry::shutdown() {
  impl_->shutdown();
}

bool local_registry::is_shut_down() const {
  std::lock_guard<std::mutex> guard{impl_->mtx};
  return impl_->shut_down;
}

} // namespace sv
