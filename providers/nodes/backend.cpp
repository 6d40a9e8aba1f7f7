// The nodes provider's backend (providers/factory.hpp): the block's settings,
// what the nodes contribute to a grade identity, the retries, the front's
// transport set-up, and the main-thread questions a front asks at start
// (are nodes reachable, how much capacity, the per-node table).

#include "messages/detail/endpoint.hpp"
#include "messages/errors.hpp"
#include "messages/json.hpp"
#include "providers/factory.hpp"
#include "providers/nodes/detail/node_protocol.hpp"
#include "providers/nodes/detail/nodes_provider.hpp"
#include "providers/nodes/detail/transport/basp_gate.hpp"

#include <algorithm>
#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <spdlog/spdlog.h>
#include <stdexcept>
#include <thread>

namespace sv {

namespace {

using namespace std::chrono_literals;

constexpr const char* provider_name = "nodes";

caf::timespan seconds_span(double s) {
  return std::chrono::duration_cast<caf::timespan>(
    std::chrono::duration<double>{s});
}

class nodes_backend : public provider_backend {
public:
  explicit nodes_backend(const json& settings)
      : settings_(parse_nodes_settings(settings)),
        identity_(settings_identity(
          provider_name, settings,
          {"tls", "connect_timeout_s", "queue_timeout_s", "max_queue"})) {
    // nop
  }

  // What grades here is what the nodes run: the nodes block's settings and
  // every node's own identity (asked by the provider over the
  // authenticated connections when a node comes up, kept while it stays
  // up). The provider answers from its node table at once, never waiting
  // for a node: the caller's thread waits for one mailbox round trip only.
  // A node that has not answered (or failed to) fails it: graded, not
  // stored. Called once per submission by a cache front: an answer is
  // reused for a second (a node lost or joined since changes the key
  // after that).
  json grade_identity(const verification_config& c) const override {
    caf::actor_system* sys = nullptr;
    caf::actor provider;
    auto now = std::chrono::steady_clock::now();
    {
      std::lock_guard<std::mutex> guard{mtx_};
      if (auto i = recent_.find(c.python);
          i != recent_.end() && now - i->second.first < reuse_for)
        return i->second.second;
      sys = sys_;
      provider = caf::actor_cast<caf::actor>(provider_);
    }
    if (!sys || !provider)
      throw std::runtime_error("nodes provider: not started, no node to say "
                               "what it grades with");
    caf::scoped_actor self{*sys};
    std::string text;
    std::string failure;
    // A name new to the nodes is asked by the first question: its answers
    // are waited for a little (a node's round trip), never longer than
    // `first_answer_wait`; a node that failed to answer is not waited for.
    auto until = std::chrono::steady_clock::now() + first_answer_wait;
    for (;;) {
      text.clear();
      failure.clear();
      self
        ->request(provider, std::chrono::seconds{2}, grade_identity_atom::value,
                  c.python)
        .receive([&](std::string& answer) { text = std::move(answer); },
                 [&](caf::error& err) { failure = describe(err); });
      if (failure.find("has not said yet") == std::string::npos ||
          std::chrono::steady_clock::now() >= until)
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds{20});
    }
    if (!failure.empty())
      throw std::runtime_error("nodes provider: " + failure);
    auto out = identity_;
    out["nodes"] = json::parse(text);
    std::lock_guard<std::mutex> guard{mtx_};
    if (recent_.size() >= 64)
      recent_.clear();
    recent_[c.python] = {now, out};
    return out;
  }

  retry_settings retry_defaults() const override {
    retry_settings out;
    out.max_retries = static_cast<uint32_t>(settings_.retry_infra);
    out.budget_ratio = settings_.retry_budget_ratio;
    out.budget_burst = settings_.retry_budget_burst;
    return out;
  }

  provider_actor spawn(caf::actor_system& sys) const override {
    auto hdl =
      caf::actor_cast<provider_actor>(spawn_nodes_provider(sys, settings_, {}));
    std::lock_guard<std::mutex> guard{mtx_};
    sys_ = &sys;
    provider_ = caf::actor_cast<caf::weak_actor_ptr>(hdl);
    return hdl;
  }

  void shut_down() override {
    // the nodes stop what a lost front created
  }

  void configure(caf::actor_system_config& cfg) const override {
    configure_front(cfg, settings_);
  }

  std::string check_started(caf::actor_system& sys,
                            const provider_actor& first) const override {
    return nodes_unreachable(sys, first, settings_);
  }

  // Nodes that join are counted once the first of them is up; dialed ones
  // are asked for their capacity.
  size_t suited_concurrency(caf::actor_system& sys,
                            const provider_actor& first) const override {
    auto n = settings_.listen.empty()
               ? nodes_total_capacity(sys, settings_)
               : nodes_capacity_up(sys, first, settings_.join_wait_s);
    return std::max<size_t>(1, n);
  }

  json usage_table(caf::actor_system& sys,
                   const provider_actor& first) const override {
    return nodes_stats(sys, first);
  }

private:
  nodes_settings settings_;
  json identity_;
  mutable std::mutex mtx_;
  /// The provider spawned last (a restart replaces it), not kept alive.
  mutable caf::actor_system* sys_ = nullptr;
  mutable caf::weak_actor_ptr provider_;
  static constexpr auto reuse_for = std::chrono::seconds{1};
  static constexpr auto first_answer_wait = std::chrono::milliseconds{500};
  /// The last answer per python name, and when it was asked.
  mutable std::map<std::string,
                   std::pair<std::chrono::steady_clock::time_point, json>>
    recent_;
};

} // namespace

std::shared_ptr<provider_backend> make_nodes_backend(const json& settings) {
  return std::make_shared<nodes_backend>(settings);
}

json nodes_stats(caf::actor_system& sys, const provider_actor& provider) {
  json out = json::array();
  caf::scoped_actor self{sys};
  self
    ->request(caf::actor_cast<caf::actor>(provider), std::chrono::seconds{5},
              nodes_stats_atom::value)
    .receive(
      [&](std::string& text) {
        out = json::parse(text, nullptr, false);
        if (out.is_discarded())
          out = json::array();
      },
      [&](caf::error&) {});
  return out;
}

size_t nodes_capacity_up(caf::actor_system& sys, const provider_actor& provider,
                         double wait_s) {
  // The provider answers at the wait at the latest; the margin covers a
  // busy mailbox, so one that never answers still ends the wait.
  auto wait = std::max(caf::timespan{0}, seconds_span(wait_s));
  caf::scoped_actor self{sys};
  size_t total = 0;
  self
    ->request(caf::actor_cast<caf::actor>(provider), wait + 5s,
              nodes_capacity_atom::value, wait)
    .receive([&](uint64_t n) { total = static_cast<size_t>(n); },
             [&](caf::error&) {});
  return total;
}

std::string nodes_unreachable(caf::actor_system& sys,
                              const provider_actor& provider,
                              const nodes_settings& settings) {
  if (!settings.listen.empty() || settings.endpoints.empty())
    return {};
  // Each endpoint's first attempt ends within the connect timeout (and
  // its node_info question within another).
  if (nodes_capacity_up(sys, provider, 2 * settings.connect_timeout_s + 1) > 0)
    return {};
  std::string out = "no node reachable at start:";
  for (auto& n : nodes_stats(sys, provider)) {
    auto why = n.value("last_error", std::string{});
    out += " " + n.value("endpoint", std::string{"?"}) + " (" +
           (why.empty() ? std::string{"no answer"} : why) + ");";
  }
  out.back() = '.';
  return out + " Check the endpoints, that the nodes run, and that both "
               "sides agree on TLS (\"tls\" in the nodes block, --tls-* "
               "on sv-node).";
}

size_t nodes_total_capacity(caf::actor_system& sys,
                            const nodes_settings& settings) {
  auto timeout = seconds_span(settings.connect_timeout_s);
  auto mm = transport::gate_actor(sys);
  caf::scoped_actor self{sys};
  size_t total = 0;
  for (auto& ep : settings.endpoints) {
    auto where = parse_endpoint(ep); // checked by the settings' parser
    caf::strong_actor_ptr ptr;
    self->request(mm, timeout, caf::connect_atom::value, where.host, where.port)
      .receive([&](caf::node_id&, caf::strong_actor_ptr& p,
                   std::set<std::string>&) { ptr = std::move(p); },
               [&](caf::error& err) {
                 spdlog::warn("node {} not reachable: {}", ep, sys.render(err));
               });
    if (!ptr)
      continue;
    auto hdl = caf::actor_cast<node_actor>(ptr);
    self->request(hdl, timeout, node_info_atom::value)
      .receive([&](uint32_t capacity, uint32_t) { total += capacity; },
               [&](caf::error&) {});
  }
  return total;
}

} // namespace sv
