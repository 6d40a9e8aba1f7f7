#include "providers/local/detail/registry.hpp"

#include "messages/errors.hpp"
#include "providers/local/detail/host/process.hpp"
#include "providers/local/detail/host/trusted_dir.hpp"
#include "providers/local/detail/image/store.hpp"
#include "providers/local/detail/io_pools.hpp"
#include "providers/local/detail/isolation.hpp"
#include "providers/local/detail/sandbox/confined_fs.hpp"
#include "providers/local/detail/sandbox/exec.hpp"
#include "providers/local/detail/sandbox/lifecycle.hpp"
#include "providers/local/detail/sandbox/mount_points.hpp"
#include "providers/local/detail/sandbox/places.hpp"
#include "providers/local/detail/sandbox/sandbox.hpp"
#include "providers/local/detail/warm_pool.hpp"

#include <algorithm>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/post.hpp>
#include <cstdio>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <spdlog/spdlog.h>
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

/// Threads of the image pool (when the provider runs images): creates
/// pulling, unpacking or waiting for another create's pull. Mostly asleep
/// on a child process or a condition; more than the caller path's so that
/// waiters for one slow image leave threads for others.
constexpr size_t image_threads = 8;

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

/// What moves a sandbox along its stop phases (transition()).
enum class stop_event {
  /// A stop call.
  stop_call,
  /// Its TTL fired.
  ttl,
  /// Its provider actor left.
  owner_exit,
  /// The registry shuts down.
  shutdown,
  /// The next try of a failed stop.
  retry,
  /// A teardown failed.
  teardown_failed,
};

struct local_registry::impl : detail::warm_pool_host {
  explicit impl(detail::registry_settings settings)
      : cfg(std::move(settings)),
        pool({cfg.warm_pool, cfg.warm_pool_start, cfg.warm_pool_tick,
              cfg.io_threads, cfg.isolation},
             mtx, pools.bg(), *this) {
    exec_cfg.python_name = cfg.python_name;
    exec_cfg.python_path = cfg.python_path;
    exec_cfg.isolation = cfg.isolation;
  }

  detail::registry_settings cfg;
  detail::exec_settings exec_cfg;
  detail::unique_fd root;
  /// The caller path and the background (providers/local/detail/io_pools.hpp).
  detail::io_pools pools;

  // -- guarded by mtx --------------------------------------------------------

  mutable std::mutex mtx;
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
  bool is_shutting_down = false;
  bool shut_down = false;
  /// Sandboxes of one shape prepared ahead of demand
  /// (providers/local/detail/warm_pool.hpp).
  detail::warm_pool pool;

  // -- the registry ----------------------------------------------------------

  /// Unique across restarts too: pid and start time of this process (the
  /// reaper's proof of ownership), counter and random bits. Under mtx.
  std::string new_id() override {
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx",
                  static_cast<unsigned long long>(rng()));
    return "sb-" + detail::instance_tag() + "-" +
           std::to_string(next_sandbox++) + "-" + std::string{hex, 8};
  }

  // -- what the warm pool asks -----------------------------------------------

  size_t held_outside_pool() const override {
    return sandboxes.size() + creating;
  }

  bool shutting_down() const override { return is_shutting_down; }

  /// A pooled sandbox, with its warm interpreter when the setting asks for
  /// one (started for a default spec's workdir; an exec that does not match
  /// runs cold).
  std::shared_ptr<local_sandbox> prepare(const detail::sandbox_shape& shape,
                                         const std::string& id) override {
    auto sb = prepare_unpooled(shape, id);
    if (!cfg.warm_python)
      return sb;
    auto start = [this, &sb] {
      // Named: GCC 12 warns (falsely) about the fields of a temporary.
      sandbox_spec defaults;
      sb->confinement.warm =
        detail::start_warm_python(*sb, exec_cfg, defaults.workdir);
    };
    // bwrap's --die-with-parent follows the thread that spawned it: the
    // interpreter is spawned on a background thread, which lives as long
    // as the registry, never on the thread that makes the registry
    // (prewarm), which may exit.
    if (pools.bg().get_executor().running_in_this_thread()) {
      start();
    } else {
      std::promise<void> done;
      asio::post(pools.bg(), [&] {
        start();
        done.set_value();
      });
      done.get_future().wait();
    }
    return sb;
  }

  /// A sandbox for a create the pool missed.
  std::shared_ptr<local_sandbox>
  prepare_unpooled(const detail::sandbox_shape& shape, const std::string& id) {
    return detail::prepare_local_sandbox(*cfg.isolation, root.get(), cfg.root,
                                         id, shape,
                                         asio::make_strand(pools.io()));
  }

  void adopt_failed(const std::shared_ptr<local_sandbox>& sb,
                    const caf::error& err) override {
    ++counters.failed_stops;
    transition(*sb, stop_event::teardown_failed);
    sandboxes.emplace(sb->id, sb);
    schedule_retry(sb, err);
  }

  // -- stop phases -----------------------------------------------------------

  /// Under mtx: the one place a sandbox's stop phase changes. A stop call,
  /// a TTL and shutdown move a live or failed sandbox to stopping; its
  /// provider's exit a live one; a retry a failed one (not during
  /// shutdown, which tries once more itself). False when `e` does not
  /// apply (a stop runs already, or a stop call or shutdown took a failed
  /// sandbox first). A failed teardown always moves it to stop_failed.
  bool transition(local_sandbox& sb, stop_event e) {
    switch (e) {
    case stop_event::teardown_failed:
      sb.phase = sandbox_phase::stop_failed;
      return true;
    case stop_event::retry:
      if (sb.phase != sandbox_phase::stop_failed || is_shutting_down)
        return false;
      break;
    case stop_event::owner_exit:
      if (sb.phase != sandbox_phase::live)
        return false;
      break;
    default:
      if (sb.phase == sandbox_phase::stopping)
        return false;
    }
    sb.phase = sandbox_phase::stopping;
    // Whether a later stop of the id, once it is gone, is a success: set by
    // what started this stop (a retry or shutdown keeps what was).
    if (e != stop_event::retry && e != stop_event::shutdown)
      sb.by_owner_exit = e == stop_event::owner_exit;
    return true;
  }

  /// Locks mtx for transition().
  bool transition_locked(local_sandbox& sb, stop_event e) {
    std::lock_guard<std::mutex> guard{mtx};
    return transition(sb, e);
  }

  /// The live sandbox `id` in `out`, or why there is none.
  caf::error find_live(const std::string& id,
                       std::shared_ptr<local_sandbox>& out) const {
    std::lock_guard<std::mutex> guard{mtx};
    if (is_shutting_down)
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

  /// How long a create may pull and unpack its image: its deadline, at
  /// most its ready timeout (and 10 minutes).
  static std::chrono::steady_clock::time_point
  image_deadline(const sandbox_spec& spec) {
    using clock = std::chrono::steady_clock;
    auto now = clock::now();
    auto bound =
      spec.ready_timeout_s > 0 ? std::min(spec.ready_timeout_s, 600.0) : 600.0;
    auto out = now + std::chrono::duration_cast<clock::duration>(
                       std::chrono::duration<double>(bound));
    return std::min(out, create_deadline(spec, now));
  }

  /// A create's image, on an image thread (pools.images()): pulled and
  /// unpacked, or another create's pull waited for, there, never on a
  /// caller-path thread. Null for a spec without one.
  caf::expected<std::shared_ptr<const detail::image_tree>>
  acquire_image(const sandbox_spec& spec) {
    if (spec.image.empty())
      return std::shared_ptr<const detail::image_tree>{};
    {
      std::lock_guard<std::mutex> guard{mtx};
      if (is_shutting_down)
        return unavailable();
    }
    if (!cfg.images)
      return make_error(provider_errc::invalid_argument,
                        "image: " + cfg.image_refusal);
    if (auto why = detail::check_workdir(*cfg.isolation, spec.workdir);
        !why.empty())
      return make_error(provider_errc::invalid_argument, why);
    try {
      return cfg.images->acquire(spec.image, image_deadline(spec));
    } catch (const std::exception& e) {
      return make_error(provider_errc::unavailable,
                        "image \"" + spec.image.substr(0, 200) +
                          "\" unavailable: " + e.what());
    }
  }

  caf::expected<sandbox_handle>
  make_sandbox(uint64_t owner, const std::string& id, const sandbox_spec& spec,
               std::shared_ptr<const detail::image_tree> image) {
    {
      std::lock_guard<std::mutex> guard{mtx};
      if (is_shutting_down)
        return unavailable();
    }
    auto& iso = *cfg.isolation;
    // The file system work happens outside the lock.
    std::shared_ptr<local_sandbox> sb;
    try {
      if (auto why = detail::check_workdir(iso, spec.workdir); !why.empty())
        throw detail::fs_error(provider_errc::invalid_argument, why);
      auto shape = detail::shape_of(iso, spec);
      sb = pool.take(shape);
      for (int tries = 0; !sb; ++tries) {
        try {
          sb = prepare_unpooled(shape, id);
        } catch (const std::runtime_error&) {
          // Pooled sandboxes of other shapes hold uids a create needs:
          // one of them goes, and the create tries again.
          auto spare = tries == 0 ? pool.take_any() : nullptr;
          if (!spare)
            throw;
          pool.destroy(spare);
        }
      }
      if (image)
        try {
          detail::attach_image(iso, *sb, image);
        } catch (...) {
          // Its .root goes with the rest of it.
          if (auto err = detail::teardown_local_sandbox(*sb))
            spdlog::warn("local provider: removing {}, whose image could not "
                         "be mounted: {}",
                         sb->id, describe(err));
          throw;
        }
      detail::assign_spec(iso, *sb, spec);
      // The mount points bwrap needs in the image or the sandbox's /tmp:
      // made now, or the create is refused (never an exec's bwrap making
      // them through a symlink).
      if (auto why = detail::prepare_mount_points(iso, *sb); !why.empty()) {
        if (auto err = detail::teardown_local_sandbox(*sb))
          spdlog::warn("local provider: removing {}, whose mount points could "
                       "not be made: {}",
                       sb->id, describe(err));
        if (image)
          return make_error(provider_errc::unavailable,
                            "image \"" + spec.image.substr(0, 200) +
                              "\" unusable: " + why);
        throw std::runtime_error(why);
      }
    } catch (const detail::fs_error& e) {
      return make_error(e.code(), e.what());
    } catch (const std::exception& e) {
      return make_error(provider_errc::sandbox_error,
                        "cannot create sandbox " + id + ": " + e.what());
    }
    sb->owner = owner;
    {
      std::lock_guard<std::mutex> guard{mtx};
      if (!is_shutting_down && owners.count(owner) > 0) {
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

  /// Reaps a sandbox its caller forgot, like a stop call.
  void arm_ttl(const std::shared_ptr<local_sandbox>& sb, double ttl_s) {
    sb->ttl.expires_after(to_duration(ttl_s));
    sb->ttl.async_wait(
      asio::bind_executor(sb->strand, [this, sb](boost::system::error_code ec) {
        if (ec || !transition_locked(*sb, stop_event::ttl))
          return;
        spdlog::warn("local provider: sandbox {} outlived its TTL, stopping it",
                     sb->id);
        run_stop(sb);
      }));
  }

  // -- stop ------------------------------------------------------------------

  /// Starts the teardown of `sb` on its strand. With no command running
  /// (a stop behind its reply), nothing else on the strand touches it any
  /// more, so the teardown moves to the background; otherwise it runs here,
  /// in line with the commands' exits.
  void run_stop(const std::shared_ptr<local_sandbox>& sb) {
    sb->torn_down = true;
    sb->ttl.cancel();
    sb->retry.cancel();
    if (sb->execs.empty())
      asio::post(pools.bg(), [this, sb] { finish_stop(sb); });
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
        transition(*sb, stop_event::teardown_failed);
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
    if (is_shutting_down || n >= cfg.stop_attempts) {
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
        if (!ec && transition_locked(*sb, stop_event::retry))
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
      if (is_shutting_down) {
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
      start = transition(*sb, stop_event::stop_call);
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
            transition(*entry.second, stop_event::owner_exit))
          orphans.push_back(entry.second);
    }
    for (auto& sb : orphans)
      asio::post(sb->strand, [this, sb] { run_stop(sb); });
  }

  // -- shutdown --------------------------------------------------------------

  void shutdown() {
    std::vector<std::shared_ptr<local_sandbox>> all;
    std::vector<std::shared_ptr<local_sandbox>> pooled;
    {
      std::lock_guard<std::mutex> guard{mtx};
      if (shut_down || is_shutting_down)
        return;
      is_shutting_down = true;
      // Preparations still running destroy what they make (shutting_down).
      pooled = pool.drain();
      for (auto& entry : sandboxes)
        if (transition(*entry.second, stop_event::shutdown))
          all.push_back(entry.second);
    }
    for (auto& sb : all)
      asio::post(sb->strand, [this, sb] { run_stop(sb); });
    for (auto& sb : pooled)
      asio::post(pools.bg(), [this, sb] { pool.destroy(sb); });
    // A pull under way, or a create waiting for one, ends now.
    if (cfg.images)
      cfg.images->abort();
    if (!pools.finish(shutdown_wait))
      spdlog::error("local provider: I/O still busy after {} s at "
                    "shutdown, abandoned it",
                    shutdown_wait.count());
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
  impl_->pools.start(impl_->cfg.io_threads,
                     impl_->cfg.images ? image_threads : 0,
                     impl_->cfg.isolation->nice);
  impl_->pool.prewarm();
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
    if (impl_->is_shutting_down) {
      // Its I/O threads may be gone: nothing posted would ever run.
      guard.unlock();
      return done(unavailable());
    }
    id = impl_->new_id();
    ++impl_->creating;
  }
  auto make = [p = impl_.get(), owner, id,
               done](const sandbox_spec& spec,
                     std::shared_ptr<const detail::image_tree> image) {
    auto r = p->make_sandbox(owner, id, spec, std::move(image));
    {
      std::lock_guard<std::mutex> guard{p->mtx};
      --p->creating;
    }
    done(std::move(r));
  };
  if (spec.image.empty() || !impl_->cfg.images) {
    // No image, or a refusal: nothing slow.
    asio::post(impl_->pools.io(), [p = impl_.get(), make, spec, done] {
      auto image = p->acquire_image(spec);
      if (image)
        return make(spec, std::move(*image));
      {
        std::lock_guard<std::mutex> guard{p->mtx};
        --p->creating;
      }
      done(std::move(image.error()));
    });
    return;
  }
  // The image first, on its own pool; the rest on the caller path.
  asio::post(impl_->pools.images(), [p = impl_.get(), make, spec, done] {
    auto image = p->acquire_image(spec);
    if (!image) {
      {
        std::lock_guard<std::mutex> guard{p->mtx};
        --p->creating;
      }
      return done(std::move(image.error()));
    }
    asio::post(p->pools.io(),
               [make, spec, image{std::move(*image)}] { make(spec, image); });
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

const std::shared_ptr<detail::image_store>& local_registry::images() const {
  return impl_->cfg.images;
}

local_registry_stats local_registry::stats() const {
  std::lock_guard<std::mutex> guard{impl_->mtx};
  auto out = impl_->counters;
  out.known = impl_->sandboxes.size();
  for (auto& entry : impl_->sandboxes)
    out.stop_failed += entry.second->phase == sandbox_phase::stop_failed;
  impl_->pool.add_stats(out);
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
