#include "actors/quiet.hpp"
#include "actors/waiters.hpp"
#include "messages/errors.hpp"
#include "providers/nodes/node_protocol.hpp"

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/make_message.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <chrono>
#include <map>
#include <set>
#include <spdlog/spdlog.h>
#include <tuple>

namespace sv {

namespace {

using namespace std::chrono_literals;

/// Long enough for any single call of the inner provider; every request
/// still has a finite timeout.
constexpr auto call_timeout = std::chrono::seconds{900};

struct node_state {
  provider_actor inner;
  node_limits limits;
  bool draining = false;
  /// Sandboxes created or being created and not stopped yet.
  uint32_t in_use = 0;
  /// Sandbox id -> the front that created it.
  std::map<std::string, caf::actor_addr> owner;
  /// Front -> the handles of the sandboxes it created.
  std::map<caf::actor_addr, std::map<std::string, sandbox_handle>> by_front;
  /// `(drain, wait)` waiters by token, each answered once: when nothing is
  /// in use, at its timer, or when the actor exits.
  waiters<uint32_t> drain_waiters;
  static inline const char* name = "sv.node";

  node_state() = default;
  node_state(const node_state&) = delete;
  node_state& operator=(const node_state&) = delete;

  /// CAF destroys the state when the actor exits: its waiters hear it.
  ~node_state() { drain_waiters.answer_all(in_use); }
};

/// node -> itself: the wait of the drain waiter with this token is over.
using drain_due_atom = caf::atom_constant<caf::atom("draindue")>;

using node_impl = node_actor::extend_with<node_drainer_actor>::extend<
  caf::reacts_to<drain_due_atom, uint64_t>>;

using self_ptr = node_impl::stateful_pointer<node_state>;

/// Answers the drain waiters once nothing is in use.
void answer_drain_waiters(self_ptr self) {
  auto& st = self->state;
  if (!st.drain_waiters.empty() && st.in_use == 0)
    st.drain_waiters.answer_all(0);
}

caf::typed_response_promise<uint32_t> drain_and_wait(self_ptr self,
                                                     caf::timespan wait) {
  auto& st = self->state;
  st.draining = true;
  return st.drain_waiters.wait(self, st.in_use == 0, st.in_use, wait,
                               drain_due_atom::value);
}

void drain_due(self_ptr self, uint64_t token) {
  self->state.drain_waiters.expire(token, self->state.in_use);
}

void forget(self_ptr self, const std::string& id) {
  auto& st = self->state;
  auto i = st.owner.find(id);
  if (i == st.owner.end())
    return;
  auto j = st.by_front.find(i->second);
  if (j != st.by_front.end()) {
    j->second.erase(id);
    if (j->second.empty())
      st.by_front.erase(j);
  }
  st.owner.erase(i);
  if (st.in_use > 0)
    --st.in_use;
  answer_drain_waiters(self);
}

uint64_t upload_size(const std::string& dir, const file_map& files) {
  uint64_t n = dir.size();
  for (auto& [path, text] : files)
    n += path.size() + text.size();
  return n;
}

} // namespace

node_impl::behavior_type node_behavior(self_ptr self, provider_actor inner,
                                       node_limits limits) {
  self->state.inner = inner;
  self->state.limits = limits;
  self->set_default_handler(log_and_drop_unexpected);
  // A front is lost: stop every sandbox it created (nobody else will).
  self->set_down_handler([=](caf::down_msg& dm) {
    auto& st = self->state;
    auto i = st.by_front.find(dm.source);
    if (i == st.by_front.end())
      return;
    auto handles = std::move(i->second);
    st.by_front.erase(i);
    spdlog::warn("a front is gone: stopping the {} sandboxes it created",
                 handles.size());
    for (auto& [id, hdl] : handles) {
      st.owner.erase(id);
      self->request(st.inner, call_timeout, stop_atom::value, hdl)
        .then(
          [=](ok_atom) {
            if (self->state.in_use > 0)
              --self->state.in_use;
            answer_drain_waiters(self);
          },
          [=](caf::error& err) {
            spdlog::warn("stopping {} of a lost front failed: {}", id,
                         describe(err));
            if (self->state.in_use > 0)
              --self->state.in_use;
            answer_drain_waiters(self);
          });
    }
  });
  return {
    [=](create_atom, sandbox_spec& spec) -> caf::result<sandbox_handle> {
      auto& st = self->state;
      auto front = caf::actor_cast<caf::actor_addr>(self->current_sender());
      if (st.draining)
        return make_error(provider_errc::unavailable,
                          "the node is draining: no new sandboxes");
      if (st.in_use >= st.limits.capacity)
        return make_error(provider_errc::unavailable,
                          "overloaded: the node runs " +
                            std::to_string(st.limits.capacity) +
                            " sandboxes at once");
      ++st.in_use;
      if (front && st.by_front.count(front) == 0)
        self->monitor(front);
      auto rp = self->make_response_promise<sandbox_handle>();
      self->request(st.inner, call_timeout, create_atom::value, std::move(spec))
        .then(
          [=](sandbox_handle& hdl) mutable {
            auto& st = self->state;
            st.owner[hdl.sandbox_id] = front;
            st.by_front[front][hdl.sandbox_id] = hdl;
            rp.deliver(std::move(hdl));
          },
          [=](caf::error& err) mutable {
            if (self->state.in_use > 0)
              --self->state.in_use;
            rp.deliver(std::move(err));
            answer_drain_waiters(self);
          });
      return rp;
    },
    [=](status_atom a, sandbox_handle& hdl) {
      return self->delegate(self->state.inner, a, std::move(hdl));
    },
    [=](upload_atom a, sandbox_handle& hdl, std::string& dir,
        file_map& files) -> caf::result<ok_atom> {
      auto n = upload_size(dir, files);
      if (n > self->state.limits.max_upload_bytes)
        return make_error(
          provider_errc::invalid_argument,
          "upload of " + std::to_string(n) +
            " bytes exceeds the node's limit of " +
            std::to_string(self->state.limits.max_upload_bytes));
      return self->delegate(self->state.inner, a, std::move(hdl),
                            std::move(dir), std::move(files));
    },
    [=](exec_atom a, sandbox_handle& hdl, exec_request& req) {
      return self->delegate(self->state.inner, a, std::move(hdl),
                            std::move(req));
    },
    [=](download_atom a, sandbox_handle& hdl, std::string& path) {
      return self->delegate(self->state.inner, a, std::move(hdl),
                            std::move(path));
    },
    [=](stop_atom, sandbox_handle& hdl) -> caf::result<ok_atom> {
      auto rp = self->make_response_promise<ok_atom>();
      auto id = hdl.sandbox_id;
      self
        ->request(self->state.inner, call_timeout, stop_atom::value,
                  std::move(hdl))
        .then(
          [=](ok_atom) mutable {
            forget(self, id);
            rp.deliver(ok_atom::value);
          },
          [=](caf::error& err) mutable {
            forget(self, id);
            rp.deliver(std::move(err));
          });
      return rp;
    },
    [=](node_info_atom) -> std::tuple<uint32_t, uint32_t> {
      // A draining node admits nothing: fronts place elsewhere.
      auto& st = self->state;
      return std::make_tuple(st.draining ? 0u : st.limits.capacity, st.in_use);
    },
    [=](drain_atom) -> uint32_t {
      self->state.draining = true;
      return self->state.in_use;
    },
    [=](drain_atom, caf::timespan wait) { return drain_and_wait(self, wait); },
    [=](drain_due_atom, uint64_t token) { drain_due(self, token); },
  };
}

node_actor spawn_node_actor(caf::actor_system& sys, provider_actor inner,
                            node_limits limits) {
  return caf::actor_cast<node_actor>(
    sys.spawn(node_behavior, std::move(inner), limits));
}

uint32_t drain_node(caf::actor_system& sys, const node_actor& node,
                    caf::timespan wait) {
  // The node answers at the wait at the latest; the margin covers a busy
  // mailbox, so one that never answers still ends the wait.
  wait = std::max(caf::timespan{0}, wait);
  caf::scoped_actor self{sys};
  uint32_t in_use = 0;
  self
    ->request(caf::actor_cast<node_drainer_actor>(node), wait + 5s,
              drain_atom::value, wait)
    .receive([&](uint32_t n) { in_use = n; }, [](caf::error&) {});
  return in_use;
}

} // namespace sv
