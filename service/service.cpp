#include "service/service.hpp"

#include "actors/scheduler.hpp"
#include "messages/registry.hpp"
#include "providers/factory.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <mutex>
#include <spdlog/spdlog.h>
#include <vector>

namespace sv {

namespace {

/// How long a stopped actor may take to be gone before shutdown goes on.
constexpr auto exit_wait = std::chrono::seconds{10};

} // namespace

/// Every provider the service started: the first and each replacement a
/// restart built (on the supervisor's restarter, a thread of its own), so
/// that shutdown reaches them all.
struct service::provider_set {
  std::mutex mtx;
  std::vector<caf::actor> all;

  void add(const provider_actor& p) {
    std::lock_guard<std::mutex> guard{mtx};
    all.push_back(caf::actor_cast<caf::actor>(p));
  }

  std::vector<caf::actor> snapshot() {
    std::lock_guard<std::mutex> guard{mtx};
    return all;
  }
};

// -- constructors -------------------------------------------------------------

service::service(const provider_block& block, service_options opts)
    : cfg_(std::make_unique<caf::actor_system_config>()) {
  use_one_malloc_arena(); // before any thread of the runtime starts
  backend_ = prepare_provider(block);
  register_protocol(*cfg_);
  install_scheduler(*cfg_);
  if (opts.threads > 0)
    cfg_->set("scheduler.max-threads", opts.threads);
  try {
    backend_->configure(*cfg_); // a nodes backend: a front's middleman
    if (opts.configure)
      opts.configure(*cfg_);
  } catch (const std::runtime_error& e) {
    throw service_setup_error(e.what());
  }
  own_sys_ = std::make_unique<caf::actor_system>(*cfg_);
  sys_ = own_sys_.get();
  start_first(block.default_metadata);
}

service::service(caf::actor_system& sys,
                 std::shared_ptr<provider_backend> backend,
                 json default_metadata)
    : sys_(&sys), backend_(std::move(backend)) {
  start_first(std::move(default_metadata));
}

void service::start_first(json default_metadata) {
  default_metadata_ = std::move(default_metadata);
  providers_ = std::make_shared<provider_set>();
  providers_->add(backend_->spawn(*sys_));
}

service::~service() {
  if (!own_sys_)
    return;
  shut_down(std::chrono::nanoseconds{0});
  // The system waits for every actor; a detached one (the cache front) is
  // gone only once no handle to it is left, so none may be held here.
  entry_ = nullptr;
  supervisor_ = nullptr;
  {
    std::lock_guard<std::mutex> guard{providers_->mtx};
    providers_->all.clear();
  }
  own_sys_.reset();
}

// -- properties ---------------------------------------------------------------

provider_actor service::first_provider() const {
  std::lock_guard<std::mutex> guard{providers_->mtx};
  return caf::actor_cast<provider_actor>(providers_->all.front());
}

provider_actor service::latest_provider() const {
  std::lock_guard<std::mutex> guard{providers_->mtx};
  return caf::actor_cast<provider_actor>(providers_->all.back());
}

// -- start --------------------------------------------------------------------

supervisor_actor service::supervise(supervisor_config cfg, front_factory front,
                                    restarts who) {
  if (cfg.retry.max_retries == 0)
    cfg.retry = backend_->retry_defaults(); // nodes retry, others do not
  if (cfg.default_metadata.empty())
    cfg.default_metadata = default_metadata_;
  if (!cfg.restart_provider && who == restarts::from_backend) {
    // A provider that dies fails what it had in flight; the rest goes on
    // with a fresh one from the same backend, which knows the sandboxes of
    // the one it replaces. The supervisor calls this off its scheduler
    // threads, with backoff, and gives up after repeated crashes.
    cfg.restart_provider = [backend = backend_,
                            set = providers_](caf::actor_system& sys) {
      auto p = backend->spawn(sys);
      set->add(p);
      return p;
    };
  }
  supervisor_ = spawn_supervisor(*sys_, first_provider(), std::move(cfg));
  entry_ = front ? front(*sys_, supervisor_, *backend_) : supervisor_;
  return entry_;
}

// -- stop ---------------------------------------------------------------------

bool service::drain(std::chrono::nanoseconds budget) {
  if (!supervisor_ || budget <= std::chrono::nanoseconds{0})
    return false;
  return await_stops(*sys_, supervisor_, budget);
}

std::optional<supervisor_stats> service::stats() {
  std::optional<supervisor_stats> out;
  if (!supervisor_)
    return out;
  caf::scoped_actor self{*sys_};
  self->request(supervisor_, std::chrono::seconds{10}, stats_atom::value)
    .receive([&](supervisor_stats& s) { out = s; },
             [](caf::error& err) {
               spdlog::warn("no statistics from the supervisor: {}",
                            to_string(err));
             });
  return out;
}

void service::shut_down(std::chrono::nanoseconds budget) {
  if (shut_down_)
    return;
  shut_down_ = true;
  drain(budget);
  caf::scoped_actor self{*sys_};
  // Awaited: a supervisor still alive could build another provider.
  if (supervisor_) {
    self->monitor(supervisor_);
    caf::anon_send_exit(supervisor_, caf::exit_reason::user_shutdown);
    self->receive(
      [](const caf::down_msg&) {},
      caf::after(exit_wait) >>
        [] { spdlog::warn("the supervisor did not stop within 10 s"); });
  }
  // Its exit stopped the sandboxes it still knew of; the providers and
  // then the backend stop the rest.
  auto providers = providers_->snapshot();
  for (auto& p : providers) {
    self->monitor(p);
    caf::anon_send_exit(p, caf::exit_reason::user_shutdown);
  }
  auto left = providers.size();
  auto deadline = std::chrono::steady_clock::now() + exit_wait;
  while (left > 0) {
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      spdlog::warn("{} providers did not stop within 10 s", left);
      break;
    }
    self->receive([&](const caf::down_msg&) { --left; },
                  caf::after(deadline - now) >> [] {});
  }
  backend_->shut_down();
}

} // namespace sv
