// Orchestration throughput and memory: the full supervisor -> verification
// -> provider path on the scripted provider in all-ok mode (every operation
// answers at once), so what is measured is the runtime itself.
//
//   sv-bench-orchestration --count 100000 --concurrency 1000
//
// Prints one JSON line: n, concurrency, seconds, per_s, base_rss_kib,
// peak_rss_kib, peak_in_flight, kib_per_in_flight.

#include "actors/scheduler.hpp"
#include "actors/supervisor.hpp"
#include "apps/sv_grade/summary.hpp"
#include "messages/json.hpp"
#include "messages/registry.hpp"
#include "providers/scripted.hpp"

#include <CLI/CLI.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <chrono>
#include <cstdlib>
#include <future>
#include <iostream>
#include <spdlog/spdlog.h>
#include <string>

namespace {

using namespace sv;
using sv::grade::proc_status_kib;

struct driver_state {
  static inline const char* name = "sv.bench_driver";
  size_t count = 0;
  size_t sent = 0;
  size_t done = 0;
  size_t ok = 0;
  supervisor_actor supervisor;
  verification_request prototype;
  std::promise<size_t>* finished = nullptr;
};

/// Keeps `concurrency` submissions outstanding until `count` are done.
/// Plain sends, not requests: CAF 0.17 keeps an actor's pending responses
/// in a flat map searched linearly, which one driver with 100,000 requests
/// outstanding would pay on every reply. The whole run has a deadline
/// (`--limit`).
caf::behavior driver(caf::stateful_actor<driver_state>* self, size_t count,
                     size_t concurrency, supervisor_actor supervisor,
                     std::promise<size_t>* finished) {
  auto& st = self->state;
  st.count = count;
  st.supervisor = std::move(supervisor);
  st.finished = finished;
  st.prototype.files["sandbox_runner.py"] = "print('never run')";
  st.prototype.request = {{"task", "null"}};
  auto submit = [self] {
    auto& st = self->state;
    auto req = st.prototype;
    req.id = "n" + std::to_string(st.sent++);
    self->send(st.supervisor, verify_atom::value, std::move(req));
  };
  for (size_t i = 0; i < std::min(count, concurrency); ++i)
    submit();
  return {
    [=](verification_outcome& out) {
      auto& st = self->state;
      st.ok += out.ok ? 1 : 0;
      if (++st.done == st.count) {
        st.finished->set_value(st.ok);
        self->quit();
      } else if (st.sent < st.count) {
        submit();
      }
    },
  };
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
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);

  caf::actor_system_config cfg;
  register_protocol(cfg);
  install_scheduler(cfg);
  caf::actor_system sys{cfg};
  auto provider = spawn_scripted_provider(sys, {}, nullptr);
  supervisor_config sup_cfg;
  sup_cfg.max_in_flight = concurrency;
  sup_cfg.max_creating = concurrency;
  sup_cfg.max_queue = count;
  auto supervisor = spawn_supervisor(sys, provider, std::move(sup_cfg));

  auto base_kib = proc_status_kib("VmRSS:");
  std::promise<size_t> finished;
  auto result = finished.get_future();
  auto start = std::chrono::steady_clock::now();
  auto hdl = sys.spawn(driver, count, concurrency, supervisor, &finished);
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

  caf::scoped_actor self{sys};
  supervisor_stats stats;
  self->request(supervisor, std::chrono::seconds{10}, stats_atom::value)
    .receive([&](supervisor_stats& s) { stats = s; }, [](caf::error&) {});
  caf::anon_send_exit(supervisor, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(provider, caf::exit_reason::user_shutdown);

  auto in_flight = std::max<uint64_t>(1, stats.peak_in_flight);
  json line{{"n", count},
            {"ok", ok},
            {"concurrency", concurrency},
            {"seconds", seconds},
            {"per_s", static_cast<double>(count) / seconds},
            {"base_rss_kib", base_kib},
            {"peak_rss_kib", peak_kib},
            {"peak_in_flight", stats.peak_in_flight},
            {"kib_per_in_flight",
             static_cast<double>(peak_kib - base_kib) / in_flight}};
  std::cout << line.dump() << std::endl;
  return ok == count ? 0 : 1;
}
