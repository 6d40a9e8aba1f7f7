// The runtime's scheduler (actors/scheduler.cpp) on real threads and the
// real clock: it replaces the part of CAF that every timeout goes through.
// Every wait is bounded; a wait that runs out ends the process with a
// message (a hung clock would otherwise hang ~actor_system too).

#include "actors/detail/quiet.hpp"
#include "actors/scheduler.hpp"
#include "messages/registry.hpp"

#include <atomic>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <spdlog/spdlog.h>
#include <thread>

using namespace std::chrono_literals;

namespace {

using ping_atom = caf::atom_constant<caf::atom("ping")>;
using done_atom = caf::atom_constant<caf::atom("done")>;

// Before the fix, a round of the stress test hung about one time in three
// (on 2 cores); 60 rounds hung every time, and take about 2 s after it (a
// sanitized build: 30, about 6 s there).
#if defined(__SANITIZE_ADDRESS__)
constexpr size_t stress_rounds = 30;
#else
constexpr size_t stress_rounds = 60;
#endif

struct real_config : caf::actor_system_config {
  explicit real_config(size_t threads = 2) {
    spdlog::set_level(spdlog::level::off);
    sv::register_protocol(*this);
    set("scheduler.max-threads", threads);
    sv::install_scheduler(*this);
  }
};

/// Ends the process when `pred` does not hold within `limit`: the clock or
/// the workers are stuck, and nothing after this point could finish.
template <class Predicate>
void wait_or_die(Predicate pred, std::chrono::milliseconds limit,
                 const char* what) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "scheduler_test: HUNG: %s (after %lld ms)\n", what,
                   static_cast<long long>(limit.count()));
      std::fflush(stderr);
      std::_Exit(EXIT_FAILURE);
    }
    std::this_thread::sleep_for(1ms);
  }
}

/// Ends the process unless released within `limit`: for tests whose
/// failure mode is a deadlock that would block the test's own thread.
class watchdog {
public:
  watchdog(std::chrono::seconds limit, const char* what) {
    thread_ = std::thread{[=] {
      std::unique_lock<std::mutex> guard{mtx_};
      if (!cv_.wait_for(guard, limit, [&] { return released_; })) {
        std::fprintf(stderr, "scheduler_test: HUNG: %s (after %lld s)\n", what,
                     static_cast<long long>(limit.count()));
        std::fflush(stderr);
        std::_Exit(EXIT_FAILURE);
      }
    }};
  }

  ~watchdog() {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      released_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

private:
  std::mutex mtx_;
  std::condition_variable cv_;
  bool released_ = false;
  std::thread thread_;
};

/// A sink that takes every request and never answers it.
caf::behavior silent_sink(caf::event_based_actor* self, int) {
  self->set_default_handler(sv::log_and_drop_unexpected);
  return {[=](ping_atom) { self->make_response_promise(); }};
}

/// Asks `sink` once with a short timeout and lives on; nobody holds a handle
/// to it, so the clock's timeout event can hold its last reference (and
/// destroying the event destroys the actor).
caf::behavior short_requester(caf::event_based_actor* self, caf::actor sink,
                              std::shared_ptr<std::atomic<size_t>> timed_out) {
  self->set_default_handler(sv::log_and_drop_unexpected);
  self->request(sink, 2ms, ping_atom::value)
    .then([] {},
          [=](caf::error& err) {
            if (err == caf::sec::request_timeout)
              ++*timed_out;
          });
  return {[](ping_atom) {}};
}

} // namespace

// issue 8: the timer thread fired and destroyed expired events under its
// mutex; an event holding an actor's last reference ran the actor's
// destructor there, whose cancel_timeouts took the same mutex: the whole
// system hung.
TEST_CASE("unreferenced actors whose request timeouts fire do not hang the "
          "clock") {
  constexpr size_t rounds = stress_rounds;
  constexpr size_t per_round = 10000;
  watchdog dog{90s, "the stress test"};
  real_config cfg;
  caf::actor_system sys{cfg};
  auto sink = sys.spawn(silent_sink, 0);
  auto timed_out = std::make_shared<std::atomic<size_t>>(0);
  for (size_t round = 1; round <= rounds; ++round) {
    for (size_t i = 0; i < per_round; ++i)
      sys.spawn(short_requester, sink, timed_out);
    wait_or_die([&] { return *timed_out == round * per_round; }, 60s,
                "request timeouts of a round");
  }
  CHECK(*timed_out == rounds * per_round);
  caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
  wait_or_die([&] { return sys.registry().running() == 0; }, 60s,
              "actors ending");
}

namespace {

caf::behavior idle_actor(caf::event_based_actor* self, int) {
  self->set_default_handler(sv::log_and_drop_unexpected);
  return {[](ping_atom) {}};
}

/// Receives one message of type T within `limit`, or ends the process.
template <class T>
T receive_or_die(caf::scoped_actor& self, std::chrono::milliseconds limit,
                 const char* what) {
  T result{};
  bool got = false;
  self->receive(
    [&](T& x) {
      result = std::move(x);
      got = true;
    },
    caf::after(limit) >> [] {});
  if (!got)
    wait_or_die([] { return false; }, 0ms, what);
  return result;
}

sv::clock_counts counts(caf::actor_system& sys) {
  auto result = sv::pending_timers(sys);
  REQUIRE(result);
  return *result;
}

/// Waits (bounded) until `hdl` has ended.
void await_end(caf::scoped_actor& self, const caf::actor& hdl) {
  self->monitor(hdl);
  receive_or_die<caf::down_msg>(self, 10s, "down_msg");
}

} // namespace

TEST_CASE("a delayed message dropped at a dead receiver may hold an actor's "
          "last handle") {
  // Deterministic shape of the issue-8 deadlock: destroying the dropped
  // message destroys `orphan`, whose cleanup cancels its timeouts.
  watchdog dog{30s, "the orphan's cleanup on the clock thread"};
  real_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto dead = sys.spawn(idle_actor, 0);
  caf::anon_send_exit(dead, caf::exit_reason::kill);
  await_end(self, dead);
  auto cleaned_up = std::make_shared<std::atomic<int>>(0);
  {
    auto orphan = sys.spawn(idle_actor, 0);
    orphan->attach_functor([cleaned_up] { ++*cleaned_up; });
    caf::delayed_anon_send(dead, 5ms, orphan);
  }
  wait_or_die([&] { return *cleaned_up == 1; }, 10s,
              "the orphan's cleanup on the clock thread");
  wait_or_die([&] { return counts(sys).scheduled == 0; }, 10s,
              "the clock emptying");
  CHECK(counts(sys).cancellable == 0);
}

TEST_CASE("timers fire in deadline order, equal deadlines in the order they "
          "were set") {
  real_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto& clock = sys.clock();
  auto t0 = clock.now() + 50ms;
  auto me = caf::actor_cast<caf::strong_actor_ptr>(self);
  auto at = [&](std::chrono::milliseconds dt, int value) {
    clock.schedule_message(
      t0 + dt, me,
      caf::make_mailbox_element(nullptr, caf::make_message_id(), {}, value));
  };
  at(30ms, 4);
  at(0ms, 1);
  at(20ms, 3);
  at(0ms, 2);
  at(40ms, 5);
  at(20ms, 6); // after 3: same deadline, set later
  CHECK(counts(sys).scheduled == 6);
  CHECK(counts(sys).cancellable == 0); // delayed messages cannot be cancelled
  std::vector<int> got;
  for (int i = 0; i < 6; ++i)
    got.push_back(receive_or_die<int>(self, 10s, "a delayed message"));
  CHECK(got == std::vector<int>{1, 2, 3, 6, 4, 5});
  CHECK(clock.now() >= t0 + 40ms); // none early
  CHECK(counts(sys).scheduled == 0);
}

TEST_CASE("delayed_send reaches an actor and a group") {
  real_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto start = std::chrono::steady_clock::now();
  self->delayed_send(self, 20ms, 7);
  CHECK(receive_or_die<int>(self, 10s, "delayed_send") == 7);
  CHECK(std::chrono::steady_clock::now() - start >= 20ms);
  auto grp = sys.groups().get_local("scheduler-test");
  self->join(grp);
  self->delayed_send(grp, 10ms, 8);
  CHECK(receive_or_die<int>(self, 10s, "delayed group message") == 8);
  self->leave(grp);
  CHECK(counts(sys).scheduled == 0);
}

namespace {

/// Asks `server` with `timeout` and tells `client` how it went: `done_atom`
/// for an answer, the error otherwise.
void ask(caf::event_based_actor* self, caf::actor server,
         std::chrono::milliseconds timeout, caf::actor client) {
  self->set_default_handler(sv::log_and_drop_unexpected);
  self->request(server, timeout, ping_atom::value)
    .then([=] { self->send(client, done_atom::value); },
          [=](caf::error& err) { self->send(client, err); });
}

caf::behavior echo(caf::event_based_actor* self, int) {
  self->set_default_handler(sv::log_and_drop_unexpected);
  return {[](ping_atom) {}};
}

} // namespace

TEST_CASE("request timeouts fire, and an answer cancels its timeout") {
  real_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto sink = sys.spawn(silent_sink, 0);
  auto server = sys.spawn(echo, 0);
  SECTION("no answer: request_timeout after the timeout") {
    auto start = std::chrono::steady_clock::now();
    sys.spawn(ask, sink, 30ms, caf::actor{self});
    auto err = receive_or_die<caf::error>(self, 10s, "request timeout");
    CHECK(err == caf::sec::request_timeout);
    CHECK(std::chrono::steady_clock::now() - start >= 30ms);
  }
  SECTION("an answer: no timer left") {
    sys.spawn(ask, server, std::chrono::milliseconds{1h}, caf::actor{self});
    receive_or_die<done_atom>(self, 10s, "the answer");
    wait_or_die([&] { return counts(sys).scheduled == 0; }, 10s,
                "the answered request's timeout going");
  }
  CHECK(counts(sys).cancellable == 0);
  caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(server, caf::exit_reason::user_shutdown);
}

TEST_CASE("an actor's timeouts go when it ends (cancel_timeouts)") {
  real_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto sink = sys.spawn(silent_sink, 0);
  auto asker =
    sys.spawn(ask, sink, std::chrono::milliseconds{1h}, caf::actor{self});
  wait_or_die([&] { return counts(sys).cancellable == 1; }, 10s,
              "the request's timeout being set");
  caf::anon_send_exit(asker, caf::exit_reason::kill);
  await_end(self, asker);
  wait_or_die([&] { return counts(sys).scheduled == 0; }, 10s,
              "the dead actor's timeout going");
  CHECK(counts(sys).cancellable == 0);
  // The clock's own API, on a live actor: a receive timeout replaces the
  // previous one of its type; cancel_timeouts drops all of the actor's.
  auto idle = sys.spawn(idle_actor, 0);
  auto* ptr = caf::actor_cast<caf::abstract_actor*>(idle);
  auto& clock = sys.clock();
  auto far = clock.now() + 1h;
  clock.set_ordinary_timeout(far, ptr, caf::atom("receive"), 1);
  clock.set_ordinary_timeout(far, ptr, caf::atom("receive"), 2);
  clock.set_ordinary_timeout(far, ptr, caf::atom("cycle"), 3);
  clock.set_multi_timeout(far, ptr, caf::atom("multi"), 4);
  clock.set_multi_timeout(far, ptr, caf::atom("multi"), 5);
  clock.set_request_timeout(far, ptr, caf::make_message_id().response_id());
  CHECK(counts(sys).cancellable == 5);
  clock.cancel_ordinary_timeout(ptr, caf::atom("cycle"));
  CHECK(counts(sys).cancellable == 4);
  clock.cancel_request_timeout(ptr, caf::make_message_id().response_id());
  CHECK(counts(sys).cancellable == 3);
  clock.cancel_timeouts(ptr);
  CHECK(counts(sys).scheduled == 0);
  CHECK(counts(sys).cancellable == 0);
  caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(idle, caf::exit_reason::user_shutdown);
}

namespace {

caf::behavior patient(caf::event_based_actor* self, caf::actor client) {
  self->set_default_handler(sv::log_and_drop_unexpected);
  return {[](ping_atom) {}, caf::after(std::chrono::milliseconds(30)) >>
                              [=] {
                                self->send(client, done_atom::value);
                                self->quit();
                              }};
}

} // namespace

TEST_CASE("receive timeouts (after) fire") {
  real_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto start = std::chrono::steady_clock::now();
  sys.spawn(patient, caf::actor{self});
  receive_or_die<done_atom>(self, 10s, "the receive timeout");
  CHECK(std::chrono::steady_clock::now() - start >= 30ms);
}

TEST_CASE("a system shuts down with timers pending") {
  std::atomic<bool> down{false};
  std::thread life{[&] {
    real_config cfg;
    caf::actor_system sys{cfg};
    auto sink = sys.spawn(silent_sink, 0);
    auto idle = sys.spawn(idle_actor, 0);
    {
      caf::scoped_actor self{sys};
      // A request of an hour, whose asker dies; delayed messages of an
      // hour to a live actor, to a dead one, and to the clock directly.
      auto asker =
        sys.spawn(ask, sink, std::chrono::milliseconds{1h}, caf::actor{self});
      wait_or_die([&] { return counts(sys).cancellable == 1; }, 10s,
                  "the request's timeout being set");
      caf::anon_send_exit(asker, caf::exit_reason::kill);
      await_end(self, asker);
      // (down_msg goes out before the asker's cleanup cancels its timeouts)
      wait_or_die([&] { return counts(sys).cancellable == 0; }, 10s,
                  "the dead asker's timeout going");
      caf::delayed_anon_send(idle, 1h, ping_atom::value);
      caf::delayed_anon_send(asker, 1h, ping_atom::value);
      self->delayed_send(self, 1h, 9);
      CHECK(counts(sys).scheduled == 3);
    }
    caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(idle, caf::exit_reason::user_shutdown);
    // ~actor_system: stops the clock, which destroys the three timers.
  }};
  auto start = std::chrono::steady_clock::now();
  std::thread watch{[&] {
    life.join();
    down = true;
  }};
  wait_or_die([&] { return down.load(); }, 30s, "shutting down");
  watch.join();
  CHECK(std::chrono::steady_clock::now() - start < 30s);
}

namespace {

struct steal_probe {
  std::thread::id parent;
  std::atomic<int> ran{0};
  std::atomic<int> ran_elsewhere{0};
};

void child(caf::event_based_actor*, std::shared_ptr<steal_probe> probe) {
  if (std::this_thread::get_id() != probe->parent)
    ++probe->ran_elsewhere;
  ++probe->ran;
}

/// Spawns children onto its own worker's queue and then blocks that worker
/// (on purpose): the children run only if another worker steals them.
void spinner(caf::event_based_actor* self, std::shared_ptr<steal_probe> probe,
             caf::actor client) {
  probe->parent = std::this_thread::get_id();
  for (int i = 0; i < 8; ++i)
    self->spawn(child, probe);
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (probe->ran == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  self->send(client, probe->ran_elsewhere.load());
}

} // namespace

TEST_CASE("an idle worker steals the jobs of a busy one") {
  real_config cfg{2};
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto probe = std::make_shared<steal_probe>();
  sys.spawn(spinner, probe, caf::actor{self});
  auto stolen = receive_or_die<int>(self, 20s, "the spinner's report");
  CHECK(stolen >= 1);
  wait_or_die([&] { return probe->ran == 8; }, 10s, "all children running");
}

TEST_CASE("many actors on few workers all run") {
  real_config cfg{3};
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto server = sys.spawn(echo, 0);
  constexpr int n = 2000;
  for (int i = 0; i < n; ++i)
    sys.spawn(ask, server, std::chrono::milliseconds{10s}, caf::actor{self});
  for (int i = 0; i < n; ++i)
    receive_or_die<done_atom>(self, 20s, "an answer");
  caf::anon_send_exit(server, caf::exit_reason::user_shutdown);
}

namespace {

void counted(caf::event_based_actor*, std::shared_ptr<std::atomic<int>> ran) {
  ++*ran;
}

/// Spawns `n` children in one go: with one worker they all wait in its
/// queue (prepended by this worker) until this handler returns.
void fan_out(caf::event_based_actor* self, int n,
             std::shared_ptr<std::atomic<int>> ran) {
  for (int i = 0; i < n; ++i)
    self->spawn(counted, ran);
}

} // namespace

TEST_CASE("a worker's job queue grows past its first capacity and loses "
          "no job") {
  auto workers = GENERATE(1, 2);
  real_config cfg{static_cast<size_t>(workers)};
  caf::actor_system sys{cfg};
  auto ran = std::make_shared<std::atomic<int>>(0);
  constexpr int n = 5000; // the queue starts with room for 1,024
  sys.spawn(fan_out, n, ran);
  wait_or_die([&] { return ran->load() == n; }, 20s, "every child running");
  CHECK(ran->load() == n);
}
