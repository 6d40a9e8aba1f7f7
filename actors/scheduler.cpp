#include "actors/scheduler.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/detail/thread_safe_actor_clock.hpp>
#include <caf/policy/work_stealing.hpp>
#include <caf/scheduler/coordinator.hpp>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace sv {

namespace {

/// The timeout bookkeeping of CAF's simple clock behind one mutex. (It
/// derives from thread_safe_actor_clock only because the coordinator's
/// `clock()` must return one; that class's ring buffer stays unused.)
class quiet_clock : public caf::detail::thread_safe_actor_clock {
public:
  using simple = caf::detail::simple_actor_clock;

  void set_ordinary_timeout(time_point t, caf::abstract_actor* self,
                            caf::atom_value type, uint64_t id) override {
    add(t, [&] { simple::set_ordinary_timeout(t, self, type, id); });
  }

  void set_request_timeout(time_point t, caf::abstract_actor* self,
                           caf::message_id id) override {
    add(t, [&] { simple::set_request_timeout(t, self, id); });
  }

  void set_multi_timeout(time_point t, caf::abstract_actor* self,
                         caf::atom_value type, uint64_t id) override {
    add(t, [&] { simple::set_multi_timeout(t, self, type, id); });
  }

  void cancel_ordinary_timeout(caf::abstract_actor* self,
                               caf::atom_value type) override {
    std::lock_guard<std::mutex> guard{mtx_};
    simple::cancel_ordinary_timeout(self, type);
  }

  void cancel_request_timeout(caf::abstract_actor* self,
                              caf::message_id id) override {
    std::lock_guard<std::mutex> guard{mtx_};
    simple::cancel_request_timeout(self, id);
  }

  void cancel_timeouts(caf::abstract_actor* self) override {
    std::lock_guard<std::mutex> guard{mtx_};
    simple::cancel_timeouts(self);
  }

  void schedule_message(time_point t, caf::strong_actor_ptr receiver,
                        caf::mailbox_element_ptr content) override {
    add(t, [&] {
      simple::schedule_message(t, std::move(receiver), std::move(content));
    });
  }

  void schedule_message(time_point t, caf::group target,
                        caf::strong_actor_ptr sender,
                        caf::message content) override {
    add(t, [&] {
      simple::schedule_message(t, std::move(target), std::move(sender),
                               std::move(content));
    });
  }

  void cancel_all() override {
    std::lock_guard<std::mutex> guard{mtx_};
    simple::cancel_all();
  }

  /// The timer thread: sleeps until the earliest deadline or a new earlier
  /// one, fires what is due.
  void run() {
    std::unique_lock<std::mutex> guard{mtx_};
    while (!done_) {
      if (schedule().empty()) {
        cv_.wait(guard);
        continue;
      }
      auto next = schedule().begin()->first;
      if (next > now())
        cv_.wait_until(guard, next);
      else
        trigger_expired_timeouts();
    }
  }

  void stop() {
    std::lock_guard<std::mutex> guard{mtx_};
    done_ = true;
    cv_.notify_all();
  }

private:
  template <class F>
  void add(time_point t, F&& insert) {
    std::lock_guard<std::mutex> guard{mtx_};
    auto earliest = schedule().empty() || t < schedule().begin()->first;
    insert();
    if (earliest)
      cv_.notify_one();
  }

  std::mutex mtx_;
  std::condition_variable cv_;
  bool done_ = false;
};

} // namespace

/// CAF's work stealing with two changes. The type of our own lets the
/// worker loop be specialized below; and stealing takes the victim's oldest
/// job: CAF 0.17 steals the newest through `take_tail`, which finds the new
/// tail by walking the whole job list under both of the victim's locks, so
/// with many runnable actors (100,000 verifications in flight) every steal
/// cost O(queue length) and stalled the victim.
struct lean_stealing : caf::policy::work_stealing {
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
    timer_ = std::thread{[this] { clock_.run(); }};
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

void install_scheduler(caf::actor_system_config& cfg) {
  auto policy = caf::get_or(cfg, "scheduler.policy", caf::atom("stealing"));
  if (policy != caf::atom("stealing"))
    return;
  cfg.module_factories.push_back(
    [](caf::actor_system& sys) -> caf::actor_system::module* {
      return new quiet_coordinator(sys);
    });
}

} // namespace sv
