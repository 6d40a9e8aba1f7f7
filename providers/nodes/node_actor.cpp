#include "actors/detail/quiet.hpp"
#include "actors/detail/waiters.hpp"
#include "messages/errors.hpp"
#include "providers/nodes/detail/node_protocol.hpp"
#include "providers/nodes/detail/peer_identity.hpp"

#include <algorithm>
#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/make_message.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <spdlog/spdlog.h>
#include <tuple>

namespace sv {

namespace {

using namespace std::chrono_literals;
using std::chrono::duration_cast;

/// Long enough for any single call of the inner provider; every request
/// still has a finite timeout.
constexpr auto call_timeout = std::chrono::seconds{900};

/// A sandbox of this node: who may call on it and the inner provider's
/// handle (which never leaves the node).
struct owned_sandbox {
  peer_identity owner;
  caf::actor_addr front;
  sandbox_handle inner;
};

/// A front (the actor that sends the calls) with sandboxes here or being
/// created: monitored while it has any.
struct front_entry {
  uint32_t creating = 0;
  std::set<std::string> ids;
};

struct node_state {
  provider_actor inner;
  node_limits limits;
  node_identity_fn identity;
  /// `grade_identity` questions being answered (each on a thread of its
  /// own): bounded.
  uint32_t identity_asks = 0;
  bool draining = false;
  /// Sandboxes created or being created and not stopped yet.
  uint32_t in_use = 0;
  /// The node's own sandbox id -> its owner and inner handle.
  std::map<std::string, owned_sandbox> sandboxes;
  /// Fronts by address; a front that is gone is not in it, so a create it
  /// started finds no entry when it finishes.
  std::map<caf::actor_addr, front_entry> fronts;
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
/// node -> itself: the sandbox with this id reached the node's max TTL.
using ttl_due_atom = caf::atom_constant<caf::atom("nttldue")>;

using node_impl = node_actor::extend_with<node_drainer_actor>::extend<
  caf::reacts_to<drain_due_atom, uint64_t>,
  caf::reacts_to<ttl_due_atom, std::string>>;

using self_ptr = node_impl::stateful_pointer<node_state>;

/// True for a message of this process (sv-node's own signal handling, the
/// node's timers); a remote peer's or an anonymous one's is not.
bool from_own_process(self_ptr self) {
  auto& sender = self->current_sender();
  return sender && sender->node() == self->node();
}

/// Who sends the current message: nobody (nullopt) when it is anonymous or
/// comes from a node id no connection is bound to (peer_registry); the
/// node's own process is "local".
std::optional<peer_identity> caller(self_ptr self) {
  auto& sender = self->current_sender();
  if (!sender)
    return std::nullopt;
  if (sender->node() == self->node())
    return peer_identity{"local", "local"};
  return peer_registry::find(sender->node());
}

/// A fresh id: 128 random bits, so that nobody can name a sandbox of
/// someone else by guessing.
std::string new_sandbox_id() {
  static thread_local std::random_device rd;
  uint32_t words[4];
  for (auto& w : words)
    w = rd();
  char buf[40];
  std::snprintf(buf, sizeof buf, "sbx-%08x%08x%08x%08x", words[0], words[1],
                words[2], words[3]);
  return buf;
}

/// Answers one `grade_identity` question off the scheduler threads (the
/// backend may run the interpreter to learn its version), then exits.
using identity_helper_actor = caf::typed_actor<
  caf::replies_to<grade_identity_atom, std::string>::with<std::string>>;

identity_helper_actor::behavior_type
identity_helper(identity_helper_actor::pointer self,
                node_identity_fn identity) {
  return {
    [=](grade_identity_atom,
        const std::string& python) -> caf::result<std::string> {
      self->quit();
      auto rp = self->make_response_promise<std::string>();
      try {
        rp.deliver(identity(python).dump());
      } catch (const std::exception& e) {
        rp.deliver(make_error(provider_errc::unavailable,
                              std::string{"this node cannot say what it "
                                          "grades with: "} +
                                e.what()));
      }
      return rp;
    },
  };
}

/// Questions answered at once; more are refused (they cost a thread each).
constexpr uint32_t max_identity_asks = 4;
/// The longest interpreter name asked about.
constexpr size_t max_python_name = 4096;

caf::result<std::string> on_grade_identity(self_ptr self, std::string& python) {
  auto& st = self->state;
  if (!caller(self))
    return make_error(provider_errc::unavailable,
                      "refused: the caller is not an authenticated front");
  if (!st.identity)
    return make_error(provider_errc::unavailable,
                      "this node does not say what it grades with");
  if (python.size() > max_python_name)
    return make_error(provider_errc::invalid_argument,
                      "python: longer than " + std::to_string(max_python_name) +
                        " bytes");
  if (st.identity_asks >= max_identity_asks)
    return make_error(provider_errc::unavailable,
                      "busy: " + std::to_string(max_identity_asks) +
                        " grade identity questions already being answered");
  // Detached (a thread of its own), except on CAF's deterministic test
  // scheduler, which cannot run one.
  auto deterministic = dynamic_cast<caf::scheduler::test_coordinator*>(
                         &self->system().scheduler()) != nullptr;
  auto helper = deterministic
                  ? self->spawn(identity_helper, st.identity)
                  : self->spawn<caf::detached>(identity_helper, st.identity);
  ++st.identity_asks;
  auto rp = self->make_response_promise<std::string>();
  self
    ->request(helper, std::chrono::seconds{30}, grade_identity_atom::value,
              python)
    .then(
      [=](std::string& text) mutable {
        --self->state.identity_asks;
        rp.deliver(std::move(text));
      },
      [=](caf::error& err) mutable {
        --self->state.identity_asks;
        rp.deliver(std::move(err));
      });
  return rp;
}

caf::error no_such(const std::string& id) {
  return make_error(provider_errc::no_such_sandbox,
                    "no sandbox " + id + " on this node");
}

/// The sandbox `id` if the current sender created it, else null: a
/// sandbox of another front and a missing one look the same.
const owned_sandbox* owned_by_caller(self_ptr self, const std::string& id) {
  auto who = caller(self);
  if (!who)
    return nullptr;
  auto& st = self->state;
  auto i = st.sandboxes.find(id);
  if (i == st.sandboxes.end() || i->second.owner != *who ||
      i->second.front !=
        caf::actor_cast<caf::actor_addr>(self->current_sender()))
    return nullptr;
  return &i->second;
}

/// Answers the drain waiters once nothing is in use.
void answer_drain_waiters(self_ptr self) {
  auto& st = self->state;
  if (!st.drain_waiters.empty() && st.in_use == 0)
    st.drain_waiters.answer_all(0);
}

void release_slot(self_ptr self) {
  auto& st = self->state;
  if (st.in_use > 0)
    --st.in_use;
  answer_drain_waiters(self);
}

/// Forgets a front without sandboxes or creates here.
void forget_front_if_idle(self_ptr self, const caf::actor_addr& front) {
  auto& st = self->state;
  auto i = st.fronts.find(front);
  if (i == st.fronts.end() || i->second.creating > 0 || !i->second.ids.empty())
    return;
  st.fronts.erase(i);
  self->demonitor(front);
}

/// Takes `id` out of the tables (its slot stays taken until its stop ends);
/// returns its inner handle.
std::optional<sandbox_handle> take_out(self_ptr self, const std::string& id) {
  auto& st = self->state;
  auto i = st.sandboxes.find(id);
  if (i == st.sandboxes.end())
    return std::nullopt;
  auto hdl = std::move(i->second.inner);
  auto front = i->second.front;
  st.sandboxes.erase(i);
  if (auto j = st.fronts.find(front); j != st.fronts.end()) {
    j->second.ids.erase(id);
    forget_front_if_idle(self, front);
  }
  return hdl;
}

/// Stops an inner sandbox nobody waits for and frees its slot.
void stop_unowned(self_ptr self, sandbox_handle hdl, std::string why) {
  self->request(self->state.inner, call_timeout, stop_atom::value, hdl)
    .then([=](ok_atom) { release_slot(self); },
          [=](caf::error& err) {
            spdlog::warn("stopping a sandbox ({}) failed: {}", why,
                         describe(err));
            release_slot(self);
          });
}

caf::typed_response_promise<uint32_t> drain_and_wait(self_ptr self,
                                                     caf::timespan wait) {
  auto& st = self->state;
  st.draining = true;
  return st.drain_waiters.wait(self, st.in_use == 0, st.in_use, wait,
                               drain_due_atom::value);
}

uint64_t upload_size(const std::string& dir, const file_map& files) {
  uint64_t n = dir.size();
  for (auto& [path, text] : files)
    n += path.size() + text.size();
  return n;
}

/// Seconds of a peer's number as a bounded span (NaN, negative: 0).
caf::timespan bounded_seconds(double s, caf::timespan most) {
  if (!std::isfinite(s) || s <= 0)
    return caf::timespan{0};
  auto most_s = std::chrono::duration<double>(most).count();
  if (s >= most_s)
    return most;
  return duration_cast<caf::timespan>(std::chrono::duration<double>{s});
}

/// One call to the inner provider on behalf of a front, answered by this
/// actor (never delegated: the front hears only the node).
template <class R, class... Ts>
caf::result<R> relay(self_ptr self, caf::timespan timeout, Ts&&... xs) {
  auto rp = self->make_response_promise<R>();
  self->request(self->state.inner, timeout, std::forward<Ts>(xs)...)
    .then([=](R& r) mutable { rp.deliver(std::move(r)); },
          [=](caf::error& err) mutable { rp.deliver(std::move(err)); });
  return rp;
}

caf::result<sandbox_handle> on_create(self_ptr self, sandbox_spec& spec) {
  auto& st = self->state;
  auto who = caller(self);
  if (!who) {
    spdlog::warn("refused a create from {}",
                 self->current_sender() ? "an unknown peer" : "nobody");
    return make_error(provider_errc::unavailable,
                      "refused: the caller is not an authenticated front");
  }
  if (st.draining)
    return make_error(provider_errc::unavailable,
                      "the node is draining: no new sandboxes");
  if (st.in_use >= st.limits.capacity)
    return make_error(provider_errc::unavailable,
                      "overloaded: the node runs " +
                        std::to_string(st.limits.capacity) +
                        " sandboxes at once");
  auto front = caf::actor_cast<caf::actor_addr>(self->current_sender());
  ++st.in_use;
  auto [f, added] = st.fronts.emplace(front, front_entry{});
  if (added)
    self->monitor(front);
  ++f->second.creating;
  // Every sandbox ends at the node's max TTL at the latest.
  auto max_ttl_s = std::chrono::duration<double>(st.limits.max_ttl).count();
  if (!std::isfinite(spec.ttl_s) || spec.ttl_s <= 0 || spec.ttl_s > max_ttl_s)
    spec.ttl_s = max_ttl_s;
  auto rp = self->make_response_promise<sandbox_handle>();
  auto owner = *who;
  self->request(st.inner, call_timeout, create_atom::value, std::move(spec))
    .then(
      [=](sandbox_handle& hdl) mutable {
        auto& st = self->state;
        auto f = st.fronts.find(front);
        if (f == st.fronts.end()) {
          // Its front went away while it was being created.
          spdlog::warn("a front is gone: stopping the sandbox it was "
                       "creating");
          stop_unowned(self, std::move(hdl), "its front is gone");
          rp.deliver(
            make_error(provider_errc::unavailable, "the front is gone"));
          return;
        }
        --f->second.creating;
        auto id = new_sandbox_id();
        while (st.sandboxes.count(id) > 0)
          id = new_sandbox_id();
        f->second.ids.insert(id);
        st.sandboxes.emplace(id, owned_sandbox{owner, front, std::move(hdl)});
        self->delayed_send(self, st.limits.max_ttl, ttl_due_atom::value, id);
        rp.deliver(sandbox_handle{id, "sv-node", ""});
      },
      [=](caf::error& err) mutable {
        auto& st = self->state;
        if (auto f = st.fronts.find(front); f != st.fronts.end()) {
          --f->second.creating;
          forget_front_if_idle(self, front);
        }
        release_slot(self);
        rp.deliver(std::move(err));
      });
  return rp;
}

caf::result<ok_atom> on_stop(self_ptr self, const sandbox_handle& hdl) {
  if (!owned_by_caller(self, hdl.sandbox_id))
    return no_such(hdl.sandbox_id);
  auto inner = take_out(self, hdl.sandbox_id);
  auto rp = self->make_response_promise<ok_atom>();
  self->request(self->state.inner, call_timeout, stop_atom::value, *inner)
    .then(
      [=](ok_atom) mutable {
        release_slot(self);
        rp.deliver(ok_atom::value);
      },
      [=](caf::error& err) mutable {
        release_slot(self);
        rp.deliver(std::move(err));
      });
  return rp;
}

/// A front is lost: stop every sandbox it created (nobody else will); the
/// ones it was creating are stopped when their create ends.
void on_front_down(self_ptr self, const caf::down_msg& dm) {
  auto& st = self->state;
  auto i = st.fronts.find(dm.source);
  if (i == st.fronts.end())
    return;
  auto ids = std::move(i->second.ids);
  auto creating = i->second.creating;
  st.fronts.erase(i);
  spdlog::warn("a front is gone: stopping the {} sandboxes it created ({} "
               "being created)",
               ids.size(), creating);
  for (auto& id : ids) {
    auto j = st.sandboxes.find(id);
    if (j == st.sandboxes.end())
      continue;
    auto hdl = std::move(j->second.inner);
    st.sandboxes.erase(j);
    stop_unowned(self, std::move(hdl), "its front is gone");
  }
}

} // namespace

node_impl::behavior_type node_behavior(self_ptr self, provider_actor inner,
                                       node_limits limits,
                                       node_identity_fn identity) {
  self->state.inner = inner;
  self->state.limits = limits;
  self->state.identity = std::move(identity);
  self->set_default_handler(log_and_drop_unexpected);
  self->set_down_handler([=](caf::down_msg& dm) { on_front_down(self, dm); });
  return {
    [=](create_atom, sandbox_spec& spec) { return on_create(self, spec); },
    [=](status_atom a, sandbox_handle& hdl) -> caf::result<sandbox_status> {
      auto s = owned_by_caller(self, hdl.sandbox_id);
      if (!s)
        return no_such(hdl.sandbox_id);
      return relay<sandbox_status>(self, call_timeout, a, s->inner);
    },
    [=](upload_atom a, sandbox_handle& hdl, std::string& dir,
        file_map& files) -> caf::result<ok_atom> {
      auto s = owned_by_caller(self, hdl.sandbox_id);
      if (!s)
        return no_such(hdl.sandbox_id);
      auto n = upload_size(dir, files);
      if (n > self->state.limits.max_upload_bytes)
        return make_error(
          provider_errc::invalid_argument,
          "upload of " + std::to_string(n) +
            " bytes exceeds the node's limit of " +
            std::to_string(self->state.limits.max_upload_bytes));
      return relay<ok_atom>(self, call_timeout, a, s->inner, std::move(dir),
                            std::move(files));
    },
    [=](exec_atom a, sandbox_handle& hdl,
        exec_request& req) -> caf::result<exec_result> {
      auto s = owned_by_caller(self, hdl.sandbox_id);
      if (!s)
        return no_such(hdl.sandbox_id);
      auto t = call_timeout +
               bounded_seconds(req.timeout_s, self->state.limits.max_ttl);
      return relay<exec_result>(self, t, a, s->inner, std::move(req));
    },
    [=](download_atom a, sandbox_handle& hdl,
        std::string& path) -> caf::result<std::string> {
      auto s = owned_by_caller(self, hdl.sandbox_id);
      if (!s)
        return no_such(hdl.sandbox_id);
      return relay<std::string>(self, call_timeout, a, s->inner,
                                std::move(path));
    },
    [=](stop_atom, sandbox_handle& hdl) { return on_stop(self, hdl); },
    [=](node_info_atom) -> caf::result<uint32_t, uint32_t> {
      // A draining node admits nothing: fronts place elsewhere.
      if (!caller(self))
        return make_error(provider_errc::unavailable,
                          "refused: the caller is not an authenticated "
                          "front");
      auto& st = self->state;
      auto rp = self->make_response_promise<uint32_t, uint32_t>();
      rp.deliver(st.draining ? 0u : st.limits.capacity, st.in_use);
      return rp;
    },
    [=](grade_identity_atom, std::string& python) {
      return on_grade_identity(self, python);
    },
    [=](drain_atom, caf::timespan wait) -> caf::result<uint32_t> {
      if (!from_own_process(self)) {
        spdlog::warn("refused a drain from another process");
        return make_error(provider_errc::unavailable,
                          "refused: a node is drained by its own process");
      }
      return drain_and_wait(self, wait);
    },
    [=](drain_due_atom, uint64_t token) {
      if (from_own_process(self))
        self->state.drain_waiters.expire(token, self->state.in_use);
    },
    [=](ttl_due_atom, std::string& id) {
      if (!from_own_process(self))
        return;
      if (auto hdl = take_out(self, id)) {
        spdlog::warn("sandbox {} reached the node's max TTL: stopping it", id);
        stop_unowned(self, std::move(*hdl), "max TTL");
      }
    },
  };
}

node_actor spawn_node_actor(caf::actor_system& sys, provider_actor inner,
                            node_limits limits, node_identity_fn identity) {
  return caf::actor_cast<node_actor>(
    sys.spawn(node_behavior, std::move(inner), limits, std::move(identity)));
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
