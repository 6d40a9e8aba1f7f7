// Orchestration throughput and memory: the full supervisor -> verification
// -> provider path on the scripted provider in all-ok mode (every operation
// answers at once), so what is measured is the runtime itself.
//
//   sv-bench-orchestration --count 100000 --concurrency 1000
//
// Prints one JSON line: n, concurrency, seconds, per_s, base_rss_kib,
// peak_rss_kib, peak_in_flight, kib_per_in_flight, and the caller-visible
// overhead (the outcome's total: submission to reply, minus exec; on this
// provider exec is ~0) as overhead_ms {p50, p99, max}, measured by the
// driver from its send to the reply's arrival (`caller_ms`, which also
// counts the supervisor's queue and the driver's own mailbox).
//
// CPU, which a shared machine's load changes much less than wall time:
// cpu_us (user + system of the whole process, per verification) and
// busiest_thread_us (the thread that used the most, per verification: on
// an idle machine the run cannot take less wall time than that thread's
// CPU, nor less than cpu_us / cores).

#include "actors/scheduler.hpp"
#include "actors/supervisor.hpp"
#include "apps/sv_grade/summary.hpp"
#include "bench/thread_cpu.hpp"
#include "messages/json.hpp"
#include "messages/registry.hpp"
#include "providers/scripted.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <future>
#include <iostream>
#include <spdlog/spdlog.h>
#include <string>
#include <vector>

namespace {

using namespace sv;
using sv::grade::proc_status_kib;

/// What the driver measured, per reply; read after it finished.
struct samples {
  std::vector<double> overhead_ms;
  std::vector<double> caller_ms;
};

struct driver_state {
  static inline const char* name = "sv.bench_driver";
  size_t count = 0;
  size_t sent = 0;
  size_t done = 0;
  size_t ok = 0;
  supervisor_actor supervisor;
  verification_request prototype;
  std::promise<size_t>* finished = nullptr;
  /// Per submission (by id number): when it was sent.
  std::vector<std::chrono::steady_clock::time_point> sent_at;
  struct samples* out = nullptr;
};

/// Keeps `concurrency` submissions outstanding until `count` are done.
/// Plain sends, not requests: CAF 0.17 keeps an actor's pending responses
/// in a flat map searched linearly, which one driver with 100,000 requests
/// outstanding would pay on every reply. The whole run has a deadline
/// (`--limit`).
caf::behavior driver(caf::stateful_actor<driver_state>* self, size_t count,
                     size_t concurrency, supervisor_actor supervisor,
                     std::promise<size_t>* finished, samples* out) {
  auto& st = self->state;
  st.count = count;
  st.supervisor = std::move(supervisor);
  st.finished = finished;
  st.prototype.files["sandbox_runner.py"] = "print('never run')";
  st.prototype.request = {{"task", "null"}};
  st.sent_at.resize(count);
  st.out = out;
  out->overhead_ms.reserve(count);
  out->caller_ms.reserve(count);
  auto submit = [self] {
    auto& st = self->state;
    auto req = st.prototype;
    st.sent_at[st.sent] = std::chrono::steady_clock::now();
    req.id = "n" + std::to_string(st.sent++);
    self->send(st.supervisor, verify_atom::value, std::move(req));
  };
  for (size_t i = 0; i < std::min(count, concurrency); ++i)
    submit();
  return {
    [=](verification_outcome& out) {
      auto& st = self->state;
      st.ok += out.ok ? 1 : 0;
      auto n = std::stoul(out.id.substr(1));
      st.out->caller_ms.push_back(
        std::chrono::duration<double, std::milli>(
          std::chrono::steady_clock::now() - st.sent_at[n])
          .count());
      st.out->overhead_ms.push_back(out.timings.total -
                                    std::max(0.0, out.timings.exec));
      if (++st.done == st.count) {
        st.finished->set_value(st.ok);
        self->quit();
      } else if (st.sent < st.count) {
        submit();
      }
    },
  };
}

/// {p50, p99, max} of `xs` (sorted here).
json percentiles(std::vector<double>& xs) {
  if (xs.empty())
    return nullptr;
  std::sort(xs.begin(), xs.end());
  auto at = [&](double p) {
    auto i =
      static_cast<size_t>(p / 100.0 * static_cast<double>(xs.size() - 1));
    return std::round(xs[i] * 1000.0) / 1000.0;
  };
  return json{{"p50", at(50)}, {"p99", at(99)}, {"max", xs.back()}};
}

} // namespace

int main(int argc, char** argv) {
  size_t count = 100000;
  size_t concurrency = 1000;
  double limit_s = 600;
  CLI::App app{"Orchestration throughput and memory on the all-ok scripted "
               "provider"};
  app.add_option("--count", count, "submissions")->capture_default_str();
  app.add_option("--concurrency", concurrency, "submissions in flight")
    ->capture_default_str();
  app.add_option("--limit", limit_s, "give up after this many seconds")
    ->capture_default_str();
  bool stop_before_reply = false;
  app.add_flag("--stop-before-reply", stop_before_reply,
               "the caller waits for each stop (supervisor_config::"
               "stop_after_reply false)");
  double stop_delay_ms = 0;
  app
    .add_option("--stop-delay-ms", stop_delay_ms,
                "every stop answers this late (a slow teardown)")
    ->capture_default_str();
  size_t threads = 0;
  app
    .add_option("--threads", threads,
                "scheduler threads (0: CAF's default, at least 4)")
    ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);

  // As the runtime does (service/service.cpp).
  sv::use_one_malloc_arena();
  caf::actor_system_config cfg;
  if (threads > 0)
    cfg.set("scheduler.max-threads", threads);
  register_protocol(cfg);
  install_scheduler(cfg);
  caf::actor_system sys{cfg};
  scripted_script script;
  if (stop_delay_ms > 0)
    script.steps[scripted_op::stop].assign(
      count,
      scripted_step{scripted_fault::delay,
                    std::chrono::duration_cast<caf::timespan>(
                      std::chrono::duration<double, std::milli>(stop_delay_ms)),
                    false});
  auto provider = spawn_scripted_provider(sys, std::move(script), nullptr);
  supervisor_config sup_cfg;
  sup_cfg.max_in_flight = concurrency;
  sup_cfg.max_creating = concurrency;
  sup_cfg.max_queue = count;
  sup_cfg.stop_after_reply = !stop_before_reply;
  auto supervisor = spawn_supervisor(sys, provider, std::move(sup_cfg));

  auto base_kib = proc_status_kib("VmRSS:");
  std::promise<size_t> finished;
  auto result = finished.get_future();
  auto cpu_before = bench::thread_cpu_s();
  auto start = std::chrono::steady_clock::now();
  samples measured;
  sys.spawn(driver, count, concurrency, supervisor, &finished, &measured);
  if (result.wait_for(std::chrono::duration<double>(limit_s)) !=
      std::future_status::ready) {
    std::cerr << "gave up after " << limit_s << " s\n";
    std::_Exit(1);
  }
  auto seconds =
    std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
  auto ok = result.get();
  auto peak_kib = proc_status_kib("VmHWM:");
  auto cpu_after = bench::thread_cpu_s();
  double cpu_total = 0;
  double busiest = 0;
  for (auto& [tid, s] : cpu_after) {
    auto d = s - cpu_before[tid];
    cpu_total += d;
    busiest = std::max(busiest, d);
  }
  auto per = [&](double s) {
    return std::round(s / static_cast<double>(count) * 1e7) / 10.0;
  };

  // Not timed: the stops behind the last replies.
  await_stops(sys, supervisor, std::chrono::seconds{120});
  caf::scoped_actor self{sys};
  supervisor_stats stats;
  self->request(supervisor, std::chrono::seconds{10}, stats_atom::value)
    .receive([&](supervisor_stats& s) { stats = s; }, [](caf::error&) {});
  caf::anon_send_exit(supervisor, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(provider, caf::exit_reason::user_shutdown);

  auto in_flight = std::max<uint64_t>(1, stats.peak_in_flight);
  json line{
    {"n", count},
    {"ok", ok},
    {"concurrency", concurrency},
    {"seconds", seconds},
    {"per_s", static_cast<double>(count) / seconds},
    {"base_rss_kib", base_kib},
    {"peak_rss_kib", peak_kib},
    {"peak_in_flight", stats.peak_in_flight},
    {"kib_per_in_flight", static_cast<double>(peak_kib - base_kib) / in_flight},
    {"cpu_us", per(cpu_total)},
    {"busiest_thread_us", per(busiest)},
    {"overhead_ms", percentiles(measured.overhead_ms)},
    {"caller_ms", percentiles(measured.caller_ms)}};
  std::cout << line.dump() << std::endl;
  return ok == count ? 0 : 1;
}
