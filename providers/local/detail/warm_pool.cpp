#include "providers/local/detail/warm_pool.hpp"

#include "providers/local/detail/isolation.hpp"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cmath>
#include <spdlog/spdlog.h>

namespace sv::detail {

namespace {

/// How many ticks of creates the pool keeps ready for (at least one
/// sandbox while creates come); a tick lasts warm_pool_settings::tick.
constexpr double lead_ticks = 0.5;

} // namespace

warm_pool::warm_pool(warm_pool_settings cfg, std::mutex& mtx,
                     boost::asio::io_context& bg, warm_pool_host& host)
    : cfg_(std::move(cfg)), mtx_(mtx), bg_(bg), host_(host), timer_(bg) {
  // nop
}

size_t warm_pool::target(const slot_type& slot) const {
  auto rate = std::max(slot.rate, static_cast<double>(slot.creates));
  if (rate <= 0.25)
    return 0;
  auto want = static_cast<size_t>(std::ceil(rate * lead_ticks));
  return std::clamp<size_t>(want, 1, cfg_.max);
}

std::shared_ptr<local_sandbox> warm_pool::take(const sandbox_shape& shape) {
  if (cfg_.max == 0)
    return nullptr;
  std::unique_lock<std::mutex> guard{mtx_};
  auto& slot = slots_[shape];
  ++slot.creates;
  while (!slot.ready.empty()) {
    auto sb = std::move(slot.ready.front());
    slot.ready.pop_front();
    guard.unlock();
    // Its own descriptors and files only: nobody else knows it.
    auto why = check_unused(*cfg_.isolation, *sb);
    if (why.empty()) {
      guard.lock();
      ++hits_;
      refill(shape, slot);
      return sb;
    }
    spdlog::warn("local provider: pooled sandbox {} discarded: {}", sb->id,
                 why);
    // Off the create's path.
    boost::asio::post(bg_, [this, sb] { destroy(sb); });
    guard.lock();
    ++discarded_;
  }
  ++misses_;
  refill(shape, slot);
  return nullptr;
}

std::shared_ptr<local_sandbox> warm_pool::take_any() {
  std::lock_guard<std::mutex> guard{mtx_};
  for (auto& entry : slots_)
    if (!entry.second.ready.empty()) {
      auto sb = std::move(entry.second.ready.front());
      entry.second.ready.pop_front();
      return sb;
    }
  return nullptr;
}

/// On the constructing thread (never a scheduler's: making a registry is
/// slow anyway): the default shape's pool filled as if creates of it were
/// coming, ready before the first create can arrive (filled on the
/// background threads, it still raced the first creates of a run, which
/// then prepared their own at once). Its rate is seeded so the ticks keep
/// it, decaying like any rate: an unused pool drains in about 4 s. It
/// leaves every I/O thread a uid of the half that refills never take.
void warm_pool::prewarm() {
  auto n = cfg_.fill_at_start ? cfg_.max : 0;
  if (auto& uids = cfg_.isolation->uids) {
    size_t half = uids->count() / 2;
    n = std::min(n, half > cfg_.io_threads ? half - cfg_.io_threads : 0);
  }
  if (n == 0)
    return;
  // Named: GCC 12 warns (falsely) about the fields of a temporary.
  sandbox_spec defaults;
  auto shape = shape_of(*cfg_.isolation, defaults);
  std::vector<std::shared_ptr<local_sandbox>> made;
  for (size_t i = 0; i < n; ++i) {
    std::string id;
    {
      std::lock_guard<std::mutex> guard{mtx_};
      id = host_.new_id();
    }
    try {
      made.push_back(host_.prepare(shape, id));
    } catch (const std::exception& e) {
      spdlog::warn("local provider: cannot prepare a pooled sandbox: {}",
                   e.what());
      break;
    }
  }
  std::lock_guard<std::mutex> guard{mtx_};
  auto& slot = slots_[shape];
  slot.rate = static_cast<double>(n) / lead_ticks;
  prepared_ += made.size();
  for (auto& sb : made)
    slot.ready.push_back(std::move(sb));
  refill(shape, slot);
}

/// Under the lock: posts the preparations that bring `slot` to its target.
void warm_pool::refill(const sandbox_shape& shape, slot_type& slot) {
  if (host_.shutting_down())
    return;
  auto want = target(slot);
  // Never more than half the uids in use or pooled: a create must find
  // one (other providers on the host lease from the same range).
  size_t in_use = host_.held_outside_pool() + held();
  auto& uids = cfg_.isolation->uids;
  auto uid_room = [&] { return !uids || (in_use + 1) * 2 <= uids->count(); };
  while (slot.ready.size() + slot.preparing < want && uid_room()) {
    ++in_use;
    ++slot.preparing;
    auto id = host_.new_id();
    boost::asio::post(bg_, [this, shape, id] { prepare(shape, id); });
  }
  arm_timer();
}

/// Prepares one sandbox for the pool (a background thread).
void warm_pool::prepare(const sandbox_shape& shape, const std::string& id) {
  std::shared_ptr<local_sandbox> sb;
  try {
    sb = host_.prepare(shape, id);
  } catch (const std::exception& e) {
    spdlog::warn("local provider: cannot prepare a pooled sandbox: {}",
                 e.what());
  }
  std::unique_lock<std::mutex> guard{mtx_};
  auto& slot = slots_[shape];
  --slot.preparing;
  if (!sb)
    return;
  ++prepared_;
  if (!host_.shutting_down() && slot.ready.size() < target(slot)) {
    slot.ready.push_back(std::move(sb));
    return;
  }
  guard.unlock();
  destroy(sb);
}

void warm_pool::destroy(const std::shared_ptr<local_sandbox>& sb) {
  sb->torn_down = true;
  auto err = teardown_local_sandbox(*sb);
  if (!err)
    return;
  std::lock_guard<std::mutex> guard{mtx_};
  host_.adopt_failed(sb, err);
}

/// Under the lock: ticks the pool while it holds or prepares anything.
void warm_pool::arm_timer() {
  if (timer_armed_ || host_.shutting_down())
    return;
  timer_armed_ = true;
  timer_.expires_after(cfg_.tick);
  timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec)
      tick();
  });
}

/// One tick: rates decay; what a shape no longer needs is destroyed.
void warm_pool::tick() {
  std::vector<std::shared_ptr<local_sandbox>> surplus;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    timer_armed_ = false;
    if (host_.shutting_down())
      return;
    bool busy = false;
    for (auto i = slots_.begin(); i != slots_.end();) {
      auto& slot = i->second;
      // Halves in about three ticks: an idle shape drains in ~2 s.
      slot.rate = 0.8 * slot.rate + 0.2 * static_cast<double>(slot.creates);
      slot.creates = 0;
      auto want = target(slot);
      while (slot.ready.size() > want) {
        surplus.push_back(std::move(slot.ready.back()));
        slot.ready.pop_back();
      }
      if (slot.ready.empty() && slot.preparing == 0 && want == 0) {
        i = slots_.erase(i);
        continue;
      }
      busy = true;
      ++i;
    }
    if (busy)
      arm_timer();
  }
  for (auto& sb : surplus)
    destroy(sb);
}

std::vector<std::shared_ptr<local_sandbox>> warm_pool::drain() {
  std::vector<std::shared_ptr<local_sandbox>> out;
  for (auto& entry : slots_) {
    for (auto& sb : entry.second.ready)
      out.push_back(std::move(sb));
    entry.second.ready.clear();
  }
  if (timer_armed_)
    timer_.cancel();
  return out;
}

size_t warm_pool::held() const {
  size_t n = 0;
  for (auto& entry : slots_)
    n += entry.second.ready.size() + entry.second.preparing;
  return n;
}

void warm_pool::add_stats(local_registry_stats& out) const {
  out.pool_hits += hits_;
  out.pool_misses += misses_;
  out.pool_discarded += discarded_;
  out.pool_prepared += prepared_;
  for (auto& entry : slots_) {
    out.pooled += entry.second.ready.size();
    out.pool_preparing += entry.second.preparing;
  }
}

} // namespace sv::detail
