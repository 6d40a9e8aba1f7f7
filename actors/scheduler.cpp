#include "actors/scheduler.hpp"

#include <array>
#include <atomic>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/detail/set_thread_name.hpp>
#include <caf/detail/thread_safe_actor_clock.hpp>
#include <caf/policy/work_stealing.hpp>
#include <caf/scheduler/coordinator.hpp>
#include <caf/sec.hpp>
#include <caf/system_messages.hpp>
#include <condition_variable>
#include <cstdlib>
#include <malloc.h>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <random>
#include <thread>
#include <vector>

namespace sv {

namespace {

/// Fixed-size blocks for the clock's map nodes, kept for reuse: a timer
/// costs no malloc once the pool is warm (CAF's clock allocates two map
/// nodes per timer). Used only under the clock's lock. At most
/// `max_free` blocks of each size stay free; the rest go back to malloc.
class node_pool {
public:
  node_pool() = default;
  node_pool(const node_pool&) = delete;
  node_pool& operator=(const node_pool&) = delete;

  ~node_pool() {
    for (auto& l : lists_)
      while (l.head != nullptr) {
        auto next = l.head->next;
        ::operator delete(l.head);
        l.head = next;
      }
  }

  void* get(size_t n) {
    auto l = list(n);
    if (l == nullptr || l->head == nullptr)
      return ::operator new(n);
    auto p = l->head;
    l->head = p->next;
    --l->count;
    return p;
  }

  void put(void* p, size_t n) {
    auto l = list(n);
    if (l == nullptr || l->count >= max_free) {
      ::operator delete(p);
      return;
    }
    l->head = new (p) block{l->head};
    ++l->count;
  }

private:
  static constexpr size_t max_free = 16384;

  struct block {
    block* next;
  };

  struct free_list {
    size_t size = 0;
    block* head = nullptr;
    size_t count = 0;
  };

  /// The free list of blocks of `n` bytes, or nullptr when all lists
  /// serve other sizes (never: the clock has two node types).
  free_list* list(size_t n) {
    for (auto& l : lists_) {
      if (l.size == n)
        return &l;
      if (l.size == 0) {
        l.size = n;
        return &l;
      }
    }
    return nullptr;
  }

  std::array<free_list, 4> lists_;
};

/// An allocator on a node_pool (for the clock's maps).
template <class T>
struct pool_allocator {
  using value_type = T;

  explicit pool_allocator(node_pool* pool) : pool(pool) {
    // nop
  }

  template <class U>
  pool_allocator(const pool_allocator<U>& other) : pool(other.pool) {
    // nop
  }

  T* allocate(size_t n) {
    static_assert(sizeof(T) >= sizeof(void*));
    return static_cast<T*>(pool->get(n * sizeof(T)));
  }

  void deallocate(T* p, size_t n) { pool->put(p, n * sizeof(T)); }

  template <class U>
  bool operator==(const pool_allocator<U>& other) const {
    return pool == other.pool;
  }

  template <class U>
  bool operator!=(const pool_allocator<U>& other) const {
    return pool != other.pool;
  }

  node_pool* pool;
};

/// The clock: every timeout and delayed message of the system, fired by one
/// thread ("caf.clock") that sleeps until the earliest deadline (CAF's clock
/// wakes for every new request with a timeout).
///
/// It never runs foreign code under its mutex: sending, and destroying a
/// timer (whose actor reference may be an actor's last, whose destructor
/// calls cancel_timeouts on this clock from the same thread), happen after
/// the lock is released. Expired and cancelled timers leave the schedule as
/// map nodes under the lock and are shipped and destroyed outside it.
///
/// (It derives from thread_safe_actor_clock only because the coordinator's
/// `clock()` must return one; that class's state stays unused.)
class quiet_clock : public caf::detail::thread_safe_actor_clock {
public:
  enum class timer_kind : uint8_t {
    ordinary, // an actor's receive timeout (`after`)
    multi,    // a multi timeout
    request,  // a request's timeout
    message,  // a delayed message to an actor
    group,    // a delayed message to a group
  };

  struct timer {
    timer(timer_kind kind, caf::strong_actor_ptr actor)
        : kind(kind), actor(std::move(actor)) {
      // nop
    }

    timer_kind kind;
    /// The actor that times out, or the receiver of a delayed message.
    caf::strong_actor_ptr actor;
    caf::atom_value type = static_cast<caf::atom_value>(0);
    uint64_t id = 0;
    caf::message_id request_id = caf::make_message_id();
    caf::mailbox_element_ptr content;
    caf::group target;
    caf::strong_actor_ptr sender;
    caf::message group_content;

    bool cancellable() const {
      return kind == timer_kind::ordinary || kind == timer_kind::multi ||
             kind == timer_kind::request;
    }
  };

  using schedule_map =
    std::multimap<time_point, timer, std::less<time_point>,
                  pool_allocator<std::pair<const time_point, timer>>>;

  /// Timers taken out under the lock (moved out of their map nodes, which
  /// go back to the pool there), shipped or destroyed after it. The first
  /// one inline: a cancel allocates nothing.
  class batch {
  public:
    void push(timer&& x) {
      if (!first_)
        first_.emplace(std::move(x));
      else
        rest_.push_back(std::move(x));
    }

    template <class F>
    void each(F f) {
      if (!first_)
        return;
      f(*first_);
      for (auto& x : rest_)
        f(x);
    }

    bool empty() const { return !first_; }

    void clear() {
      first_.reset();
      rest_.clear();
    }

  private:
    std::optional<timer> first_;
    std::vector<timer> rest_;
  };

  ~quiet_clock() override {
    // Normally empty: run() drains the schedule when it stops.
    batch rest;
    drain_all(rest);
  }

  void set_ordinary_timeout(time_point t, caf::abstract_actor* self,
                            caf::atom_value type, uint64_t id) override {
    batch dropped; // destroyed after `guard` unlocks
    std::unique_lock<std::mutex> guard{mtx_};
    // One receive timeout per actor and type: a new one replaces the old.
    take_if(self->id(), dropped, [&](const timer& x) {
      return x.kind == timer_kind::ordinary && x.type == type;
    });
    timer x{timer_kind::ordinary, caf::strong_actor_ptr{self->ctrl()}};
    x.type = type;
    x.id = id;
    insert(t, std::move(x));
  }

  void set_multi_timeout(time_point t, caf::abstract_actor* self,
                         caf::atom_value type, uint64_t id) override {
    std::unique_lock<std::mutex> guard{mtx_};
    timer x{timer_kind::multi, caf::strong_actor_ptr{self->ctrl()}};
    x.type = type;
    x.id = id;
    insert(t, std::move(x));
  }

  void set_request_timeout(time_point t, caf::abstract_actor* self,
                           caf::message_id id) override {
    std::unique_lock<std::mutex> guard{mtx_};
    timer x{timer_kind::request, caf::strong_actor_ptr{self->ctrl()}};
    x.request_id = id;
    insert(t, std::move(x));
  }

  void cancel_ordinary_timeout(caf::abstract_actor* self,
                               caf::atom_value type) override {
    batch dropped;
    std::unique_lock<std::mutex> guard{mtx_};
    take_if(self->id(), dropped, [&](const timer& x) {
      return x.kind == timer_kind::ordinary && x.type == type;
    });
  }

  void cancel_request_timeout(caf::abstract_actor* self,
                              caf::message_id id) override {
    batch dropped;
    std::unique_lock<std::mutex> guard{mtx_};
    take_if(self->id(), dropped, [&](const timer& x) {
      return x.kind == timer_kind::request && x.request_id == id;
    });
  }

  void cancel_timeouts(caf::abstract_actor* self) override {
    batch dropped;
    std::unique_lock<std::mutex> guard{mtx_};
    take_if(self->id(), dropped, [](const timer&) { return true; });
  }

  void schedule_message(time_point t, caf::strong_actor_ptr receiver,
                        caf::mailbox_element_ptr content) override {
    std::unique_lock<std::mutex> guard{mtx_};
    timer x{timer_kind::message, std::move(receiver)};
    x.content = std::move(content);
    insert(t, std::move(x));
  }

  void schedule_message(time_point t, caf::group target,
                        caf::strong_actor_ptr sender,
                        caf::message content) override {
    std::unique_lock<std::mutex> guard{mtx_};
    timer x{timer_kind::group, nullptr};
    x.target = std::move(target);
    x.sender = std::move(sender);
    x.group_content = std::move(content);
    insert(t, std::move(x));
  }

  void cancel_all() override {
    batch dropped;
    drain_all(dropped);
  }

  /// The timer thread: sleeps until the earliest deadline or a new earlier
  /// one, takes what is due out of the schedule, and ships it unlocked.
  /// When stopped, it destroys what is left (unlocked too).
  void run() {
    batch due;
    for (;;) {
      {
        std::unique_lock<std::mutex> guard{mtx_};
        for (;;) {
          if (done_)
            break;
          if (schedule_.empty()) {
            cv_.wait(guard);
            continue;
          }
          auto next = schedule_.begin()->first;
          if (next > now()) {
            cv_.wait_until(guard, next);
            continue;
          }
          take_expired(due);
          break;
        }
      }
      if (due.empty())
        break; // done_
      due.each([](timer& x) { ship(x); });
      due.clear(); // destroys the timers, unlocked
    }
    batch rest;
    drain_all(rest);
  }

  void stop() {
    std::lock_guard<std::mutex> guard{mtx_};
    done_ = true;
    cv_.notify_all();
  }

  clock_counts counts() {
    std::lock_guard<std::mutex> guard{mtx_};
    return {schedule_.size(), lookup_.size()};
  }

private:
  using lookup_map = std::multimap<
    caf::actor_id, schedule_map::iterator, std::less<caf::actor_id>,
    pool_allocator<std::pair<const caf::actor_id, schedule_map::iterator>>>;

  /// Moves the timer at `i` into `out` and frees its node (under the lock).
  void take(schedule_map::iterator i, batch& out) {
    out.push(std::move(i->second));
    schedule_.erase(i);
  }

  /// Adds `x` to the schedule (under the lock); wakes the timer thread if
  /// `x` is the new earliest deadline.
  void insert(time_point t, timer&& x) {
    auto earliest = schedule_.empty() || t < schedule_.begin()->first;
    auto aid = x.actor && x.cancellable() ? x.actor->id() : caf::actor_id{0};
    auto cancellable = x.cancellable();
    // Equal deadlines keep their order of insertion (multimap::emplace).
    auto i = schedule_.emplace(t, std::move(x));
    if (cancellable)
      lookup_.emplace(aid, i);
    if (earliest)
      cv_.notify_one();
  }

  /// Moves the timers of actor `aid` matching `pred` into `out` (under the
  /// lock).
  template <class Predicate>
  void take_if(caf::actor_id aid, batch& out, Predicate pred) {
    auto range = lookup_.equal_range(aid);
    for (auto i = range.first; i != range.second;) {
      if (pred(i->second->second)) {
        take(i->second, out);
        i = lookup_.erase(i);
      } else {
        ++i;
      }
    }
  }

  /// Moves every due timer, earliest first, into `out` (under the lock).
  void take_expired(batch& out) {
    auto t = now();
    while (!schedule_.empty() && schedule_.begin()->first <= t) {
      auto i = schedule_.begin();
      if (i->second.cancellable())
        unlink(i->second.actor->id(), i);
      take(i, out);
    }
  }

  void unlink(caf::actor_id aid, schedule_map::iterator i) {
    auto range = lookup_.equal_range(aid);
    for (auto j = range.first; j != range.second; ++j) {
      if (j->second == i) {
        lookup_.erase(j);
        return;
      }
    }
  }

  /// Moves the whole schedule into `out`.
  void drain_all(batch& out) {
    std::lock_guard<std::mutex> guard{mtx_};
    lookup_.clear();
    while (!schedule_.empty())
      take(schedule_.begin(), out);
  }

  /// Delivers a due timer (never under the lock).
  static void ship(timer& x) {
    switch (x.kind) {
    case timer_kind::ordinary:
    case timer_kind::multi:
      x.actor->get()->eq_impl(caf::make_message_id(), x.actor, nullptr,
                              caf::timeout_msg{x.type, x.id});
      break;
    case timer_kind::request:
      x.actor->get()->eq_impl(x.request_id, x.actor, nullptr,
                              caf::make_error(caf::sec::request_timeout));
      break;
    case timer_kind::message:
      x.actor->enqueue(std::move(x.content), nullptr);
      break;
    case timer_kind::group:
      x.target.eq_impl(caf::make_message_id(), std::move(x.sender), nullptr,
                       std::move(x.group_content));
      break;
    }
  }

  std::mutex mtx_;
  std::condition_variable cv_;
  bool done_ = false;
  /// Before the maps: destroyed after them.
  node_pool pool_;
  schedule_map schedule_{pool_allocator<schedule_map::value_type>{&pool_}};
  lookup_map lookup_{pool_allocator<lookup_map::value_type>{&pool_}};
};

} // namespace

/// CAF's work stealing with two changes. The type of our own lets the
/// worker loop be specialized below; and stealing takes the victim's oldest
/// job: CAF 0.17 steals the newest through `take_tail`, which finds the new
/// tail by walking the whole job list under both of the victim's locks, so
/// with many runnable actors (100,000 verifications in flight) every steal
/// cost O(queue length) and stalled the victim.
struct lean_stealing : caf::policy::work_stealing {
  /// A worker's jobs: a ring buffer under a spinlock. CAF's
  /// `double_ended_queue` allocates a node for every job it queues (every
  /// time an idle actor gets a message), freed by whichever thread takes
  /// the job: ~14 mallocs per verification, most of them freed on another
  /// thread. This one allocates only when it grows and never shrinks.
  class job_queue {
  public:
    job_queue() : buf_(initial_capacity) {
      // nop
    }

    job_queue(const job_queue&) : job_queue() {
      // nop: workers are made by copying a prototype, before any job
    }

    job_queue& operator=(const job_queue&) = delete;

    /// At the back (a job resumed later, or enqueued from outside).
    void append(caf::resumable* job) {
      guard g{lock_};
      grow_if_full();
      buf_[(head_ + size_) & (buf_.size() - 1)] = job;
      size_.store(size_ + 1, std::memory_order_relaxed);
    }

    /// At the front (a job enqueued by this worker's own actors).
    void prepend(caf::resumable* job) {
      guard g{lock_};
      grow_if_full();
      head_ = (head_ + buf_.size() - 1) & (buf_.size() - 1);
      buf_[head_] = job;
      size_.store(size_ + 1, std::memory_order_relaxed);
    }

    caf::resumable* take_head() {
      if (empty())
        return nullptr;
      guard g{lock_};
      if (size_ == 0)
        return nullptr;
      auto job = buf_[head_];
      head_ = (head_ + 1) & (buf_.size() - 1);
      size_.store(size_ - 1, std::memory_order_relaxed);
      return job;
    }

    /// A hint without the lock (exact under it).
    bool empty() const { return size_.load(std::memory_order_relaxed) == 0; }

  private:
    static constexpr size_t initial_capacity = 1024; // a power of two

    struct guard {
      explicit guard(std::atomic_flag& f) : flag(f) {
        while (flag.test_and_set(std::memory_order_acquire))
          std::this_thread::yield();
      }
      ~guard() { flag.clear(std::memory_order_release); }
      std::atomic_flag& flag;
    };

    void grow_if_full() {
      if (size_ < buf_.size())
        return;
      std::vector<caf::resumable*> bigger(buf_.size() * 2);
      for (size_t i = 0; i < size_; ++i)
        bigger[i] = buf_[(head_ + i) & (buf_.size() - 1)];
      buf_.swap(bigger);
      head_ = 0;
    }

    std::atomic_flag lock_ = ATOMIC_FLAG_INIT;
    std::vector<caf::resumable*> buf_;
    size_t head_ = 0;
    std::atomic<size_t> size_{0};
  };

  /// CAF's worker data with the queue above (the base's functions that use
  /// `d(self).queue` pick it up: they are templates on the worker).
  struct worker_data {
    explicit worker_data(caf::scheduler::abstract_coordinator* p)
        : rengine(std::random_device{}()),
          uniform(0, p->num_workers() > 0 ? p->num_workers() - 1 : 0) {
      // nop
    }

    worker_data(const worker_data& other)
        : rengine(std::random_device{}()), uniform(other.uniform) {
      // nop
    }

    job_queue queue;
    std::default_random_engine rengine;
    std::uniform_int_distribution<size_t> uniform;
    wait_strategy waitdata;
  };

  /// Polls before a worker goes to sleep on its condition variable. Few:
  /// the cores are the sandboxes' (every poll yields the CPU, and a sleeping
  /// worker is woken by the next job from outside).
  static constexpr size_t spin_polls = 16;
  /// How long a sleeping worker waits before trying to steal again.
  static constexpr auto nap = std::chrono::milliseconds(10);

  template <class Worker>
  caf::resumable* try_steal(Worker* self) {
    auto parent = self->parent();
    auto n = parent->num_workers();
    if (n < 2)
      return nullptr;
    auto victim = d(self).uniform(d(self).rengine);
    if (victim == self->id())
      victim = n - 1;
    return d(parent->worker_by_id(victim)).queue.take_head();
  }

  template <class Worker>
  caf::resumable* dequeue(Worker* self) {
    auto& data = d(self);
    for (size_t i = 0; i < spin_polls; ++i) {
      if (auto job = data.queue.take_head())
        return job;
      if (auto job = try_steal(self))
        return job;
      std::this_thread::yield();
    }
    for (;;) {
      {
        std::unique_lock<std::mutex> guard{data.waitdata.lock};
        data.waitdata.sleeping = true;
        data.waitdata.cv.wait_for(guard, nap,
                                  [&] { return !data.queue.empty(); });
        data.waitdata.sleeping = false;
      }
      if (auto job = data.queue.take_head())
        return job;
      if (auto job = try_steal(self))
        return job;
    }
  }
};

} // namespace sv

/// The worker loop of CAF 0.17 minus one line: before every resume it
/// cross-casts the job to `abstract_actor*` (a dynamic_cast through virtual
/// bases, about 1,300 instructions) and records its id for a logger that
/// Debian's build compiles out. Measured with callgrind on the null-provider
/// path, that was about a sixth of all instructions.
template <>
void caf::scheduler::worker<sv::lean_stealing>::run() {
  for (;;) {
    auto job = policy_.dequeue(this);
    policy_.before_resume(this, job);
    auto res = job->resume(this, max_throughput_);
    policy_.after_resume(this, job);
    switch (res) {
    case resumable::resume_later:
      policy_.resume_job_later(this, job);
      break;
    case resumable::done:
      policy_.after_completion(this, job);
      intrusive_ptr_release(job);
      break;
    case resumable::awaiting_message:
      intrusive_ptr_release(job);
      break;
    case resumable::shutdown_execution_unit:
      policy_.after_completion(this, job);
      policy_.before_shutdown(this);
      return;
    }
  }
}

namespace sv {

namespace {

using stealing = caf::scheduler::coordinator<lean_stealing>;

class quiet_coordinator : public stealing {
public:
  explicit quiet_coordinator(caf::actor_system& sys) : stealing(sys) {
    // nop
  }

  caf::detail::thread_safe_actor_clock& clock() noexcept override {
    return clock_;
  }

protected:
  void start() override {
    timer_ = std::thread{[this] {
      caf::detail::set_thread_name("caf.clock");
      system().thread_started();
      clock_.run();
      system().thread_terminates();
    }};
    stealing::start();
  }

  void stop() override {
    stealing::stop();
    clock_.stop();
    timer_.join();
  }

private:
  quiet_clock clock_;
  std::thread timer_;
};

} // namespace

bool use_one_malloc_arena() {
  if (std::getenv("MALLOC_ARENA_MAX") != nullptr)
    return false;
  return mallopt(M_ARENA_MAX, 1) == 1;
}

void install_scheduler(caf::actor_system_config& cfg) {
  auto policy = caf::get_or(cfg, "scheduler.policy", caf::atom("stealing"));
  if (policy != caf::atom("stealing"))
    return;
  cfg.module_factories.push_back(
    [](caf::actor_system& sys) -> caf::actor_system::module* {
      return new quiet_coordinator(sys);
    });
}

std::optional<clock_counts> pending_timers(caf::actor_system& sys) {
  auto* clock = dynamic_cast<quiet_clock*>(&sys.scheduler().clock());
  if (clock == nullptr)
    return std::nullopt;
  return clock->counts();
}

} // namespace sv
