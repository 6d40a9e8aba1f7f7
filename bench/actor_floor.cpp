// The floor of one CAF 0.17 actor per submission: what the orchestration
// bench (orchestration.cpp) would cost if a verification were nothing but
// an actor. A parent keeps `concurrency` children in flight; each child is
// spawned monitored, makes six requests one after another to one provider
// actor that answers each at once (create, status, upload, exec, download,
// stop), reports to its parent and exits; the parent starts the next on the
// report. No state, no timers, no JSON: only CAF's spawn, mailboxes,
// response handlers, monitor and down message, on the same scheduler as
// sv (actors/scheduler.cpp).
//
//   sv-bench-actor-floor --count 100000 --concurrency 1000 [--timer]
//
// `--timer`: each child also arms one request timeout (a 600 s clock entry,
// cancelled when it exits), as a verification does. `--state-bytes N`:
// each child holds N bytes of state and reads and writes all of it at every
// step (a verification's state, request and supervisor entry are ~2.6 KB:
// bench/README.md, 1e). Prints one JSON line
// like sv-bench-orchestration's: n, concurrency, seconds, per_s,
// base_rss_kib, peak_rss_kib, peak_in_flight, kib_per_in_flight, and the
// sizes of CAF's actor types.

#include "actors/scheduler.hpp"
#include "apps/sv_grade/summary.hpp"
#include "bench/thread_cpu.hpp"
#include "messages/json.hpp"

#include <CLI/CLI.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <chrono>
#include <cmath>
#include <future>
#include <iostream>
#include <vector>

namespace {

using sv::json;
using sv::bench::thread_cpu_s;
using step_atom = caf::atom_constant<caf::atom("step")>;
using report_atom = caf::atom_constant<caf::atom("report")>;

constexpr int steps = 6;

caf::behavior provider(caf::event_based_actor*) {
  return {[](step_atom, int i) { return i + 1; }};
}

struct child_state {
  caf::message_id timer_id;
  std::vector<uint64_t> bytes;
};

/// Reads and writes every cache line of the child's state.
void touch(child_state& st, int step) {
  for (size_t i = 0; i < st.bytes.size(); i += 8)
    st.bytes[i] += static_cast<uint64_t>(step);
}

void next_step(caf::stateful_actor<child_state>* self, caf::actor provider,
               caf::actor parent, int i) {
  touch(self->state, i);
  if (i == steps) {
    self->send(parent, report_atom::value);
    self->quit();
    return;
  }
  self->request(provider, caf::infinite, step_atom::value, i)
    .then([=](int next) { next_step(self, provider, parent, next); });
}

caf::behavior child(caf::stateful_actor<child_state>* self, caf::actor provider,
                    caf::actor parent, bool timer, size_t state_bytes) {
  self->state.bytes.resize(state_bytes / sizeof(uint64_t));
  if (timer) {
    // One clock entry for the actor's life, as a verification's deadline.
    self->state.timer_id =
      self->new_request_id(caf::message_priority::normal).response_id();
    self->add_multiplexed_response_handler(self->state.timer_id,
                                           caf::behavior{[](caf::error&) {}});
    self->clock().set_request_timeout(self->clock().now() +
                                        std::chrono::seconds{600},
                                      self, self->state.timer_id);
  }
  next_step(self, provider, parent, 0);
  return {[](int) {}};
}

struct parent_state {
  size_t count = 0;
  size_t started = 0;
  size_t done = 0;
  size_t in_flight = 0;
  size_t peak_in_flight = 0;
  caf::actor provider;
  bool timer = false;
  size_t state_bytes = 0;
  std::promise<size_t>* finished = nullptr;
};

void start_child(caf::stateful_actor<parent_state>* self) {
  auto& st = self->state;
  ++st.started;
  ++st.in_flight;
  st.peak_in_flight = std::max(st.peak_in_flight, st.in_flight);
  self->spawn<caf::monitored>(child, st.provider,
                              caf::actor_cast<caf::actor>(self), st.timer,
                              st.state_bytes);
}

caf::behavior parent(caf::stateful_actor<parent_state>* self, size_t count,
                     size_t concurrency, caf::actor provider, bool timer,
                     size_t state_bytes, std::promise<size_t>* finished) {
  auto& st = self->state;
  st.state_bytes = state_bytes;
  st.count = count;
  st.provider = std::move(provider);
  st.timer = timer;
  st.finished = finished;
  self->set_down_handler([](caf::down_msg&) {});
  for (size_t i = 0; i < std::min(count, concurrency); ++i)
    start_child(self);
  return {[=](report_atom) {
    auto& st = self->state;
    --st.in_flight;
    if (++st.done == st.count) {
      st.finished->set_value(st.peak_in_flight);
      self->quit();
    } else if (st.started < st.count) {
      start_child(self);
    }
  }};
}

} // namespace

int main(int argc, char** argv) {
  size_t count = 100000;
  size_t concurrency = 1000;
  bool timer = false;
  CLI::App app{"One CAF 0.17 actor per submission and nothing else: the "
               "floor of sv-bench-orchestration"};
  app.add_option("--count", count, "submissions")->capture_default_str();
  app.add_option("--concurrency", concurrency, "submissions in flight")
    ->capture_default_str();
  app.add_flag("--timer", timer, "each child arms one request timeout");
  size_t state_bytes = 0;
  app
    .add_option("--state-bytes", state_bytes,
                "bytes of state each child touches at every step")
    ->capture_default_str();
  size_t threads = 0;
  app
    .add_option("--threads", threads,
                "scheduler threads (0: CAF's default, at least 4)")
    ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  // As the runtime does (service/service.cpp).
  sv::use_one_malloc_arena();
  caf::actor_system_config cfg;
  if (threads > 0)
    cfg.set("scheduler.max-threads", threads);
  sv::install_scheduler(cfg);
  caf::actor_system sys{cfg};
  auto prov = sys.spawn(provider);
  auto base_kib = sv::grade::proc_status_kib("VmRSS:");
  std::promise<size_t> finished;
  auto result = finished.get_future();
  auto start = std::chrono::steady_clock::now();
  auto cpu_before = thread_cpu_s();
  sys.spawn(parent, count, concurrency, prov, timer, state_bytes, &finished);
  if (result.wait_for(std::chrono::minutes{10}) != std::future_status::ready) {
    std::cerr << "gave up\n";
    std::_Exit(1);
  }
  auto seconds =
    std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
  auto peak = result.get();
  auto peak_kib = sv::grade::proc_status_kib("VmHWM:");
  auto cpu_after = thread_cpu_s();
  double cpu_total = 0, busiest = 0;
  for (auto& [tid, s] : cpu_after) {
    auto d = s - cpu_before[tid];
    cpu_total += d;
    busiest = std::max(busiest, d);
  }
  auto per = [&](double s) {
    return std::round(s / static_cast<double>(count) * 1e7) / 10.0;
  };
  caf::anon_send_exit(prov, caf::exit_reason::user_shutdown);
  json line{{"n", count},
            {"concurrency", concurrency},
            {"timer", timer},
            {"state_bytes", state_bytes},
            {"cpu_us", per(cpu_total)},
            {"busiest_thread_us", per(busiest)},
            {"seconds", seconds},
            {"per_s", static_cast<double>(count) / seconds},
            {"base_rss_kib", base_kib},
            {"peak_rss_kib", peak_kib},
            {"peak_in_flight", peak},
            {"kib_per_in_flight", static_cast<double>(peak_kib - base_kib) /
                                    std::max<size_t>(1, peak)},
            {"sizeof_event_based_actor", sizeof(caf::event_based_actor)},
            {"sizeof_stateful_actor",
             sizeof(caf::stateful_actor<child_state, caf::event_based_actor>)},
            {"sizeof_actor_control_block", sizeof(caf::actor_control_block)}};
  std::cout << line.dump() << std::endl;
  return 0;
}
