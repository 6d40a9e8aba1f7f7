#include "apps/sv_serve/compat_routes.hpp"

#include "apps/sv_serve/bridge.hpp"
#include "apps/sv_serve/execute.hpp"
#include "apps/sv_serve/metrics.hpp"
#include "apps/sv_serve/run_code.hpp"
#include "apps/sv_serve/runner_job.hpp"

#include <caf/actor_system.hpp>
#include <spdlog/spdlog.h>

namespace sv::serve {

namespace {

std::string_view path_of(std::string_view target) {
  return target.substr(0, target.find('?'));
}

sandbox_reply plain_json(unsigned status, std::string body) {
  sandbox_reply r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

/// 405 unless `method` is one of `allow` ("GET" also admits HEAD).
std::optional<sandbox_reply> method_check(const std::string& method,
                                          const char* allow) {
  std::string_view allowed{allow};
  if (method == allowed || (allowed == "GET" && method == "HEAD"))
    return std::nullopt;
  auto r = error_reply(405, "method_not_allowed", "method not allowed");
  r.headers.emplace_back("Allow", allow);
  return r;
}

compat_plan reply_now(sandbox_reply r) {
  compat_plan p;
  p.reply = std::move(r);
  return p;
}

/// The body as JSON, or the route's own refusal.
bool read_body(const compat_call& call, const json_limits& limits, json& out,
               std::string& why) {
  auto err = parse_bounded(call.body, out, limits);
  if (err.empty())
    return true;
  why = "body: not JSON: " + err;
  return false;
}

compat_plan plan_run_code(const compat_call& call,
                          const std::shared_ptr<compat_settings>& settings,
                          const json_limits& limits) {
  if (call.draining)
    return reply_now(run_code_error(504, "draining: this server takes no new "
                                         "work; retry elsewhere"));
  json body;
  std::string why;
  if (!read_body(call, limits, body, why))
    return reply_now(run_code_error(400, why));
  runner_call rc;
  if (auto refusal = read_run_code(body, *settings, rc))
    return reply_now(std::move(*refusal));
  compat_plan p;
  p.request = make_runner_request(rc, *settings);
  p.answer = [settings, rc](const verification_outcome& out) {
    return run_code_reply(out, rc, settings->languages);
  };
  return p;
}

sandbox_reply execute_error(unsigned status, const std::string& message) {
  return plain_json(status, json{{"error", message}}.dump(
                              -1, ' ', false, json::error_handler_t::replace));
}

compat_plan plan_execute(const compat_call& call,
                         const std::shared_ptr<compat_settings>& settings,
                         const json_limits& limits) {
  if (call.draining)
    return reply_now(execute_error(504, "draining: no new work"));
  json body;
  std::string why;
  if (!read_body(call, limits, body, why))
    return reply_now(execute_error(400, why));
  execute_call ec;
  if (auto refusal = read_execute(body, call.has_session_header, *settings, ec))
    return reply_now(std::move(*refusal));
  compat_plan p;
  p.request = make_runner_request(ec.call, *settings);
  p.answer = [settings, ec](const verification_outcome& out) {
    return execute_reply(out, ec, settings->languages);
  };
  return p;
}

} // namespace

bool is_compat_path(std::string_view path) {
  return path == "/run_code" || path == "/v1/ping" || path == "/v1/languages" ||
         path == "/execute" || path == "/health";
}

compat_plan plan_compat_call(const compat_call& call,
                             const std::shared_ptr<compat_settings>& settings,
                             const json_limits& limits) {
  auto path = path_of(call.target);
  auto post = path == "/run_code" || path == "/execute";
  if (auto refusal = method_check(call.method, post ? "POST" : "GET"))
    return reply_now(std::move(*refusal));
  if (path == "/run_code")
    return plan_run_code(call, settings, limits);
  if (path == "/execute")
    return plan_execute(call, settings, limits);
  if (path == "/v1/languages")
    return reply_now(plain_json(200, settings->languages.describe().dump()));
  // /v1/ping (SandboxFusion: the JSON string "pong") and /health
  // (NeMo-Skills): 503 while draining, so a balancer moves on.
  if (call.draining)
    return reply_now(error_reply(503, "draining", "draining: no new work"));
  if (path == "/v1/ping")
    return reply_now(plain_json(200, "\"pong\""));
  return reply_now(plain_json(200, R"({"status":"healthy"})"));
}

compat_routes::compat_routes(caf::actor_system& sys,
                             supervisor_actor supervisor,
                             supervisor_actor probes,
                             std::shared_ptr<compat_settings> settings,
                             open_routes open, metrics* counters,
                             json_limits limits)
    : sys_(&sys), supervisor_(std::move(supervisor)),
      probes_(std::move(probes)), settings_(std::move(settings)),
      open_(std::move(open)), counters_(counters), limits_(limits) {}

bool compat_routes::needs_token(std::string_view path,
                                const std::string& peer) const {
  if (path == "/v1/ping" || path == "/health")
    return false; // as /healthz
  return !open_.open_to(path, peer);
}

void compat_routes::handle(compat_call call, sandbox_reply_fn done) {
  auto path = path_of(call.target);
  if ((path == "/run_code" || path == "/execute" || path == "/v1/languages") &&
      !probed_.exchange(true))
    start_probe();
  auto plan = plan_compat_call(call, settings_, limits_);
  if (plan.reply)
    return done(std::move(*plan.reply));
  counters_->started();
  // The client is ended by its own outcome; the handle it holds to itself
  // is dropped there (or with its behaviour, if shutdown ends it first).
  auto client = std::make_shared<caf::actor>();
  *client = spawn_client(
    *sys_, supervisor_,
    [client, done = std::move(done), answer = std::move(plan.answer),
     counters = counters_](uint64_t, verification_outcome out) mutable {
      counters->finished(out);
      auto reply = answer(out);
      end_client(*client);
      *client = nullptr;
      done(std::move(reply));
    });
  submit(*client, 0, std::move(plan.request));
}

namespace {

void log_languages(const language_table& table, const std::string& image) {
  std::string ready, refused;
  for (auto& name : table.names()) {
    if (table.find(name)->image != image)
      continue;
    auto st = table.state(name);
    if (st.known && st.available)
      ready += (ready.empty() ? "" : ", ") + name;
    else
      refused += (refused.empty() ? "" : "; ") + name + ": " + st.reason;
  }
  auto where = image.empty() ? std::string{"the host's view"} : image;
  spdlog::info("languages in {}: {} served{}{}", where,
               ready.empty() ? "none" : ready, refused.empty() ? "" : "; ",
               refused);
}

} // namespace

void compat_routes::start_probe() {
  for (auto& image : settings_->languages.images()) {
    auto req = make_probe_request(image, settings_->languages.programs(image),
                                  *settings_);
    auto client = std::make_shared<caf::actor>();
    *client = spawn_client(
      *sys_, probes_,
      [client, settings = settings_, image](uint64_t,
                                            verification_outcome out) {
        auto& table = settings->languages;
        auto found = out.ok ? read_probe_answer(out) : json(nullptr);
        if (!found.is_null()) {
          table.apply_probe(image, found);
          log_languages(table, image);
        } else {
          auto why =
            out.ok ? "the runner's answer is malformed" : describe_failure(out);
          table.probe_failed(image, why);
          spdlog::warn("languages probe ({}): {}; calls go ahead, each "
                       "runner checks its toolchain",
                       image.empty() ? "host view" : image, why);
        }
        end_client(*client);
        *client = nullptr;
      });
    submit(*client, 0, std::move(req));
  }
}

} // namespace sv::serve
