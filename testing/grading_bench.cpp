#include "testing/grading_bench.hpp"

#include "messages/atoms.hpp"
#include "messages/enums.hpp"
#include "service/service.hpp"

#include <caf/send.hpp>

namespace sv::testing {

verification_request sample_request(std::string id) {
  verification_request req;
  req.id = std::move(id);
  req.files["sandbox_runner.py"] = "print('hello')";
  req.request = {{"question", 42}};
  req.exec_timeout_s = 30;
  req.config.ready_timeout_s = 10;
  req.config.upload_timeout_s = 20;
  req.config.exec_grace_s = 5;
  req.config.download_timeout_s = 40;
  req.config.stop_timeout_s = 50;
  return req;
}

std::string describe(const verification_outcome& out) {
  if (out.ok)
    return "ok";
  auto& f = out.failure;
  return std::string{to_string(f.kind)} + "/" +
         std::string{to_string(f.state)} + "/" +
         std::string{to_string(f.cause)} + ": " + f.message;
}

bool failed_with(const verification_outcome& out, failure_kind kind,
                 verification_state state, failure_cause cause) {
  return !out.ok && out.failure.kind == kind && out.failure.state == state &&
         out.failure.cause == cause;
}

void grading_bench::start(scripted_script script, supervisor_config cfg) {
  assembly = std::make_shared<service>(
    sys, make_scripted_backend(std::move(script), world));
  provider = keep(assembly->first_provider());
  supervisor =
    keep(assembly->supervise(std::move(cfg), {}, restarts::as_configured));
}

supervisor_config grading_bench::restarting(supervisor_config cfg,
                                            scripted_script script) {
  cfg.restart_provider = [this, script](caf::actor_system& sys) {
    auto hdl = spawn_scripted_provider(sys, script, world);
    spawned.push_back(caf::actor_cast<caf::actor>(hdl));
    return hdl;
  };
  return cfg;
}

void grading_bench::submit(verification_request req) {
  client->send(supervisor, verify_atom::value, std::move(req));
}

verification_outcome grading_bench::reply_exactly_at(caf::timespan deadline) {
  if (deadline <= caf::timespan{0})
    throw expectation_failed("reply_exactly_at: the deadline must be > 0");
  run_for(deadline - caf::timespan{1});
  if (auto early = take<verification_outcome>())
    throw expectation_failed("a reply came before its deadline: " +
                             describe(*early));
  run_for(caf::timespan{1});
  auto out = take<verification_outcome>();
  if (!out)
    throw expectation_failed("no reply at the deadline");
  return std::move(*out);
}

verification_outcome grading_bench::reply_now() {
  run();
  auto out = take<verification_outcome>();
  if (!out)
    throw expectation_failed("no reply (without moving the clock)");
  return std::move(*out);
}

supervisor_stats grading_bench::stats() {
  client->send(supervisor, stats_atom::value);
  run();
  auto out = take<supervisor_stats>();
  if (!out)
    throw expectation_failed("the supervisor did not answer stats");
  return *out;
}

void grading_bench::expect_all_stopped_once() const {
  auto bad = world->not_stopped_once();
  if (bad.empty())
    return;
  std::string what = "sandboxes not stopped exactly once:";
  for (auto& id : bad)
    what += " " + id + " (" + std::to_string(world->stops_of(id)) + " stops)";
  throw expectation_failed(what);
}

} // namespace sv::testing
