#include "providers/nodes/detail/nodes_provider.hpp"

#include "actors/detail/quiet.hpp"
#include "actors/detail/waiters.hpp"
#include "messages/bounded_json.hpp"
#include "messages/detail/endpoint.hpp"
#include "messages/errors.hpp"
#include "messages/json.hpp"
#include "providers/factory.hpp"
#include "providers/nodes/detail/node_protocol.hpp"
#include "providers/nodes/detail/peer_identity.hpp"
#include "providers/nodes/detail/transport/basp_gate.hpp"

#include <algorithm>
#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/io/middleman.hpp>
#include <caf/make_message.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <spdlog/spdlog.h>
#include <thread>

namespace sv {

namespace {

using namespace std::chrono_literals;
using std::chrono::duration_cast;

constexpr const char* provider_name = "nodes";

using reconnect_atom = caf::atom_constant<caf::atom("nreconn")>;
using tick_atom = caf::atom_constant<caf::atom("ntick")>;
/// nodes provider -> itself: the wait of the capacity waiter with this
/// token is over.
using capacity_due_atom = caf::atom_constant<caf::atom("ncapdue")>;

constexpr auto tick_interval = 1s;
constexpr auto max_backoff = std::chrono::milliseconds{4000};
constexpr auto first_backoff = std::chrono::milliseconds{250};
/// Generous bounds for one forwarded call: the verification's own deadlines
/// are shorter and decide.
constexpr auto create_timeout = std::chrono::seconds{900};
constexpr auto call_timeout = std::chrono::seconds{900};

std::string format_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

caf::timespan seconds_span(double s) {
  return duration_cast<caf::timespan>(std::chrono::duration<double>{s});
}

/// A caller's seconds as a span: NaN and negatives are 0, at most a day.
caf::timespan bounded_seconds(double s) {
  if (!std::isfinite(s) || s <= 0)
    return caf::timespan{0};
  return seconds_span(std::min(s, 86400.0));
}

using fail_fn = std::function<void(const caf::error&)>;

/// True when the current message comes from `asked` (CAF
/// 0.17 matches a response to its request by message id only, and ids are
/// sequential, so anyone could answer in its place).
template <class Self, class Handle>
bool from_asked(Self* self, const Handle& asked) {
  auto& sender = self->current_sender();
  return sender && asked && sender->node() == asked.node() &&
         sender->id() == asked.id();
}

/// An error answering a request comes from the asked actor, or from this
/// process when nobody sends it (a timeout, an unreachable receiver).
template <class Self, class Handle>
bool error_from_asked(Self* self, const Handle& asked) {
  return !self->current_sender() || from_asked(self, asked);
}

/// A message of this process (a timer, sv-grade, the supervisor); a remote
/// peer's or an anonymous one's is not.
template <class Self>
bool from_own_process(Self* self) {
  auto& sender = self->current_sender();
  return sender && sender->node() == self->node();
}

/// What a reply from someone else than the actor asked becomes: the call
/// fails (the real reply, if any, is dropped by CAF with its handler).
caf::error forged_reply(const std::string& endpoint) {
  spdlog::warn("dropped a reply to a call on node {} that did not come from "
               "it",
               endpoint);
  return make_error(provider_errc::unavailable,
                    "a reply to a call on node " + endpoint +
                      " did not come from it (dropped)");
}

/// A node's answer to `(grade_identity, python)`: being asked, the JSON
/// text it said, or why it did not say (remembered until it reconnects).
struct identity_answer {
  enum { asking, known, failed } status = asking;
  std::string text;
};

struct node_slot {
  std::string endpoint;
  std::string host;
  uint16_t port = 0;
  node_actor hdl;
  bool up = false;
  bool connecting = false;
  uint32_t capacity = 0;
  /// Our sandboxes there (created, being created, being stopped).
  uint32_t in_use = 0;
  /// Slots the node reported in use beyond ours at its last report (other
  /// fronts'); placement counts them.
  uint32_t foreign = 0;
  /// Our sandboxes there when it was lost (front id -> the node's handle):
  /// stopped when it is back (issue 19 item 8), whatever we answered.
  std::map<std::string, sandbox_handle> orphans;
  uint64_t gen = 0;
  caf::timespan backoff = first_backoff;
  uint64_t losses = 0;
  /// Why the last connection attempt failed (empty: none failed).
  std::string last_error;
  /// A test's node: no middleman, the handle is given.
  bool injected = false;
  /// A node that joined (`listen`): it reconnects itself, we never dial it.
  bool joined = false;
  // Counters for the per-node table of the front's summary.
  uint64_t sandboxes = 0;
  uint64_t create_failures = 0;
  uint64_t failed_by_loss = 0;
  uint64_t call_failures = 0;
  std::vector<double> lifetimes_ms;
  std::map<uint64_t, fail_fn> pending;
  /// What the node said it grades with, by interpreter name, since it
  /// came up: asked when it comes up (and again after a loss: it may have
  /// been reconfigured), never while a submission waits.
  std::map<std::string, identity_answer> identities;
};

/// Slots of `n` in use, ours and other fronts'.
uint64_t busy(const node_slot& n) {
  return uint64_t{n.in_use} + n.foreign;
}

struct placed_sandbox {
  size_t node = 0;
  sandbox_handle inner;
  caf::actor_clock::time_point created;
};

struct queued_create {
  sandbox_spec spec;
  caf::typed_response_promise<sandbox_handle> rp;
  caf::actor_clock::time_point deadline;
  size_t tries = 0;
};

struct nodes_state {
  nodes_settings settings;
  std::vector<node_slot> nodes;
  std::map<std::string, placed_sandbox> sandboxes;
  std::set<std::string> lost;
  std::deque<queued_create> queue;
  uint64_t next_call = 0;
  /// Accepts nodes that join (`listen`), linked to this provider.
  caf::actor registrar;
  /// `nodes_capacity` waiters by token, each answered once: when a node
  /// is up, at its timer, or when the provider exits.
  waiters<uint64_t> capacity_waiters;
  /// Interpreter names the front was asked about (the default first):
  /// every node is asked for each when it comes up. Bounded.
  std::vector<std::string> identity_names{verification_config{}.python};
  static inline const char* name = "sv.nodes_provider";

  /// The summed capacity of the nodes up that have said (or failed to
  /// say) what they grade with under the default interpreter name: a
  /// start that waits for capacity has cache keys from its first
  /// submission on.
  uint64_t capacity_up() const {
    uint64_t total = 0;
    for (auto& n : nodes) {
      if (!n.up)
        continue;
      auto i = n.identities.find(identity_names.front());
      if (i == n.identities.end() ||
          i->second.status != identity_answer::asking)
        total += n.capacity;
    }
    return total;
  }

  /// A front that does not accept joins, whose every node failed its
  /// connection at least once and none is up: nothing to wait for.
  bool all_unreachable() const {
    if (!settings.listen.empty() || nodes.empty())
      return false;
    for (auto& n : nodes)
      if (n.up || n.last_error.empty())
        return false;
    return true;
  }

  nodes_state() = default;
  nodes_state(const nodes_state&) = delete;
  nodes_state& operator=(const nodes_state&) = delete;

  /// CAF destroys the state when the actor exits: its waiters hear it.
  ~nodes_state() { capacity_waiters.answer_all(capacity_up()); }
};

using self_ptr = caf::stateful_actor<nodes_state>*;

void place(self_ptr self, sandbox_spec spec,
           caf::typed_response_promise<sandbox_handle> rp, size_t tries);

/// Answers the capacity waiters once a node with capacity is up.
void answer_capacity_waiters(self_ptr self) {
  auto& st = self->state;
  if (st.capacity_waiters.empty())
    return;
  if (auto total = st.capacity_up(); total > 0 || st.all_unreachable())
    st.capacity_waiters.answer_all(total);
}

/// How long a node may take to say what it grades with (its backend may
/// run the interpreter once). Short: nobody waits for it, but a node that
/// drops the question (an older version) is known as failed sooner.
constexpr auto identity_timeout = std::chrono::seconds{10};

/// Interpreter names the front keeps identities for.
constexpr size_t max_identity_names = 16;

/// Asks node `idx` what it grades with under `python`, unless asked since
/// it came up; the answer (or failure) lands in its slot.
void ask_identity(self_ptr self, size_t idx, const std::string& python) {
  auto& node = self->state.nodes[idx];
  if (!node.up || node.identities.count(python) > 0)
    return;
  node.identities[python] = identity_answer{};
  auto asked = node.hdl;
  auto gen = node.gen;
  auto settle = [self, idx, gen, python](identity_answer answer) {
    auto& n = self->state.nodes[idx];
    if (n.gen != gen || !n.up)
      return; // lost since: asked again when it is back
    if (answer.status == identity_answer::failed)
      spdlog::warn("node {} did not say what it grades with under {}: {}",
                   n.endpoint, python, answer.text);
    n.identities[python] = std::move(answer);
    answer_capacity_waiters(self);
  };
  self->request(asked, identity_timeout, grade_identity_atom::value, python)
    .then(
      [=](std::string& text) {
        auto& n = self->state.nodes[idx];
        if (!from_asked(self, asked)) {
          settle({identity_answer::failed, describe(forged_reply(n.endpoint))});
          return;
        }
        json parsed;
        if (auto err = parse_bounded(text, parsed);
            !err.empty() || !parsed.is_object()) {
          settle({identity_answer::failed,
                  "it answered its grade identity with no JSON object"});
          return;
        }
        settle({identity_answer::known, parsed.dump()});
      },
      [=](caf::error& err) {
        auto& n = self->state.nodes[idx];
        if (!error_from_asked(self, asked)) {
          settle({identity_answer::failed, describe(forged_reply(n.endpoint))});
          return;
        }
        settle({identity_answer::failed, describe(err)});
      });
}

/// A node came up: it is asked for every name the front knows.
void ask_identities(self_ptr self, size_t idx) {
  auto names = self->state.identity_names;
  for (auto& python : names)
    ask_identity(self, idx, python);
}

/// Answers `(grade_identity, python)` at once from the node table: what
/// every node up grades with, as the JSON text of a sorted array of their
/// distinct identities (nodes that differ are all in it: a grade may come
/// from any of them). A node that has not answered yet (asked now, if it
/// never was), one that failed to, no node up, or a name beyond the
/// bound fails the question: the cache then grades without storing.
caf::result<std::string> grade_identities(self_ptr self,
                                          const std::string& python) {
  auto& st = self->state;
  auto& names = st.identity_names;
  if (std::find(names.begin(), names.end(), python) == names.end()) {
    if (names.size() >= max_identity_names)
      return make_error(provider_errc::unavailable,
                        "the nodes front keeps grade identities for " +
                          std::to_string(max_identity_names) +
                          " interpreter names; no key for another (python " +
                          python + ")");
    names.push_back(python);
  }
  bool any = false;
  std::string missing;
  std::set<std::string> distinct;
  for (size_t idx = 0; idx < st.nodes.size(); ++idx) {
    auto& n = st.nodes[idx];
    if (!n.up)
      continue;
    any = true;
    ask_identity(self, idx, python);
    auto& answer = n.identities[python];
    if (answer.status == identity_answer::failed)
      return make_error(provider_errc::unavailable,
                        "node " + n.endpoint +
                          " did not say what it grades with: " + answer.text);
    if (answer.status == identity_answer::asking)
      missing = n.endpoint;
    else
      distinct.insert(answer.text);
  }
  if (!any)
    return make_error(provider_errc::unavailable,
                      "no node is up to say what it grades with");
  if (!missing.empty())
    return make_error(provider_errc::unavailable,
                      "node " + missing +
                        " has not said yet what it grades with");
  auto out = json::array();
  for (auto& text : distinct)
    out.push_back(json::parse(text));
  return out.dump();
}

/// The BASP gate (transport/basp_gate.hpp): connects and publishes like
/// CAF's middleman actor, over TLS with frame checks.
caf::actor mm_actor(self_ptr self) {
  return transport::gate_actor(self->system());
}

/// Hands queued creates to nodes with free capacity.
void dispatch(self_ptr self) {
  auto& st = self->state;
  while (!st.queue.empty()) {
    bool free = false;
    for (auto& n : st.nodes)
      free = free || (n.up && busy(n) < n.capacity);
    if (!free)
      return;
    auto q = std::move(st.queue.front());
    st.queue.pop_front();
    place(self, std::move(q.spec), q.rp, q.tries);
  }
}

void schedule_reconnect(self_ptr self, size_t idx) {
  auto& node = self->state.nodes[idx];
  self->delayed_send(self, node.backoff, reconnect_atom::value, idx, node.gen);
  node.backoff = std::min<caf::timespan>(node.backoff * 2, max_backoff);
}

/// The node is lost: everything in flight on it fails at once.
void lose(self_ptr self, size_t idx, const std::string& why) {
  auto& st = self->state;
  auto& node = st.nodes[idx];
  if (!node.up)
    return;
  spdlog::warn("node {} lost: {}", node.endpoint, why);
  node.up = false;
  node.in_use = 0;
  node.foreign = 0;
  node.identities.clear();
  ++node.gen;
  ++node.losses;
  if (node.hdl)
    self->demonitor(node.hdl.address());
  for (auto i = st.sandboxes.begin(); i != st.sandboxes.end();) {
    if (i->second.node == idx) {
      st.lost.insert(i->first);
      node.orphans.emplace(i->first, i->second.inner);
      i = st.sandboxes.erase(i);
    } else {
      ++i;
    }
  }
  auto pending = std::move(node.pending);
  node.pending.clear();
  node.failed_by_loss += pending.size();
  auto err = make_error(provider_errc::unavailable,
                        "node " + node.endpoint + " lost (" + why + ")");
  for (auto& [id, fail] : pending)
    fail(err);
  if (!node.joined) // a joined node comes back by joining again
    schedule_reconnect(self, idx);
}

/// The node is back: stop what we had there when it was lost (the node
/// kept it: its front, we, lives on). Their slots count as ours until
/// their stops end.
void stop_orphans(self_ptr self, size_t idx) {
  auto& node = self->state.nodes[idx];
  if (node.orphans.empty())
    return;
  auto orphans = std::move(node.orphans);
  node.orphans.clear();
  spdlog::info("node {} is back: stopping the {} sandboxes left there when "
               "it was lost",
               node.endpoint, orphans.size());
  auto gen = node.gen;
  auto asked = node.hdl;
  for (auto& [id, inner] : orphans) {
    ++node.in_use;
    auto done = [=](bool keep) {
      auto& node = self->state.nodes[idx];
      if (node.gen != gen) {
        // Lost again before it answered: stop it when it is back.
        if (keep)
          node.orphans.emplace(id, inner);
        return;
      }
      if (node.in_use > 0)
        --node.in_use;
      dispatch(self);
    };
    self->request(node.hdl, call_timeout, stop_atom::value, inner)
      .then([=](ok_atom) { done(!from_asked(self, asked)); },
            [=](caf::error&) { done(true); });
  }
}

void connect(self_ptr self, size_t idx) {
  auto& node = self->state.nodes[idx];
  node.connecting = true;
  auto gen = node.gen;
  auto timeout = seconds_span(self->state.settings.connect_timeout_s);
  auto fail = [=](const std::string& why) {
    auto& node = self->state.nodes[idx];
    node.connecting = false;
    if (node.gen != gen || node.up)
      return;
    // The first failure of a streak is a warning, the retries info.
    if (node.last_error != why)
      spdlog::warn("node {} not reachable: {}", node.endpoint, why);
    else
      spdlog::info("node {} not reachable: {}", node.endpoint, why);
    node.last_error = why;
    if (!node.joined)
      schedule_reconnect(self, idx);
    answer_capacity_waiters(self);
  };
  auto tls = self->state.settings.tls.enabled();
  auto render = [=](const caf::error& err) {
    auto text = self->system().render(err);
    if (tls && err == caf::sec::disconnect_during_handshake)
      return "TLS handshake refused (is each side's certificate signed by "
             "the other's CA?): " +
             text;
    if (!tls && err == caf::sec::disconnect_during_handshake)
      return "the connection was cut during the handshake (TLS mismatch "
             "suspected: does the node use TLS? then give the front "
             "\"tls\" too): " +
             text;
    return text;
  };
  auto on_node = [=](node_actor hdl) {
    self->request(hdl, timeout, node_info_atom::value)
      .then(
        [=](uint32_t capacity, uint32_t in_use) {
          if (!from_asked(self, hdl)) {
            fail(describe(forged_reply(self->state.nodes[idx].endpoint)));
            return;
          }
          auto& node = self->state.nodes[idx];
          node.connecting = false;
          if (node.gen != gen || node.up)
            return;
          node.hdl = hdl;
          node.up = true;
          node.capacity = capacity;
          node.in_use = 0;
          stop_orphans(self, idx);
          // What it runs beyond our orphans is other fronts'.
          node.foreign = in_use > node.in_use ? in_use - node.in_use : 0;
          node.backoff = first_backoff;
          node.last_error.clear();
          self->monitor(hdl);
          spdlog::info("node {} up, capacity {}", node.endpoint, capacity);
          ask_identities(self, idx);
          dispatch(self);
          answer_capacity_waiters(self);
        },
        [=](caf::error& err) {
          if (!error_from_asked(self, hdl))
            fail(describe(forged_reply(self->state.nodes[idx].endpoint)));
          else
            fail(render(err));
        });
  };
  if (node.injected || node.joined) {
    on_node(node.hdl);
    return;
  }
  self
    ->request(mm_actor(self), timeout, caf::connect_atom::value, node.host,
              node.port)
    .then(
      [=](caf::node_id&, caf::strong_actor_ptr& ptr,
          std::set<std::string>& ifs) {
        if (!from_own_process(self)) {
          fail("a connect reply did not come from the middleman (dropped)");
          return;
        }
        if (!ptr) {
          fail("no actor published there");
          return;
        }
        if (ifs != self->system().message_types<node_actor>()) {
          fail("the actor published there is not an sv-node");
          return;
        }
        on_node(caf::actor_cast<node_actor>(ptr));
      },
      [=](caf::error& err) { fail(render(err)); });
}

/// Forgets a stopped sandbox and frees its slot.
void release(self_ptr self, const std::string& id) {
  auto& st = self->state;
  auto i = st.sandboxes.find(id);
  if (i == st.sandboxes.end())
    return;
  auto& node = st.nodes[i->second.node];
  if (node.in_use > 0)
    --node.in_use;
  node.lifetimes_ms.push_back(std::chrono::duration<double, std::milli>(
                                self->clock().now() - i->second.created)
                                .count());
  st.sandboxes.erase(i);
  dispatch(self);
}

bool retry_elsewhere(const caf::error& err) {
  return err == caf::sec::request_receiver_down ||
         provider_error_code(err) ==
           static_cast<uint8_t>(provider_errc::unavailable);
}

/// The nodes a retried create should not go to (actors/retry.hpp), taken
/// out of the spec: nodes do not know the option.
std::set<std::string> take_avoided(sandbox_spec& spec) {
  std::set<std::string> out;
  auto& opts = spec.provider_options;
  if (!opts.is_object())
    return out;
  auto i = opts.find(avoid_nodes_option);
  if (i == opts.end())
    return out;
  if (i->is_array())
    for (auto& x : *i)
      if (x.is_string())
        out.insert(x.get<std::string>());
  opts.erase(i);
  return out;
}

void place(self_ptr self, sandbox_spec spec,
           caf::typed_response_promise<sandbox_handle> rp, size_t tries) {
  auto& st = self->state;
  node_slot* best = nullptr;
  size_t idx = 0;
  auto avoided = take_avoided(spec);
  // A node to avoid is used only when no other node has room.
  for (int pass = 0; pass < 2 && best == nullptr; ++pass) {
    for (size_t i = 0; i < st.nodes.size(); ++i) {
      auto& n = st.nodes[i];
      if (!n.up || busy(n) >= n.capacity ||
          (pass == 0 && avoided.count(n.endpoint) > 0))
        continue;
      // Least loaded by the fraction of its capacity in use.
      if (best == nullptr ||
          busy(n) * best->capacity < busy(*best) * n.capacity) {
        best = &n;
        idx = i;
      }
    }
  }
  if (best == nullptr) {
    if (st.queue.size() >= st.settings.max_queue) {
      rp.deliver(make_error(provider_errc::unavailable,
                            "overloaded: every node is full and " +
                              std::to_string(st.settings.max_queue) +
                              " creates wait already"));
      return;
    }
    if (!avoided.empty()) // still to avoid when its turn comes
      spec.provider_options[avoid_nodes_option] = json(avoided);
    st.queue.push_back(queued_create{
      std::move(spec), rp,
      self->clock().now() + seconds_span(st.settings.queue_timeout_s), tries});
    return;
  }
  auto& node = *best;
  ++node.in_use;
  auto id = ++st.next_call;
  auto limit = 2 * st.nodes.size();
  node.pending[id] = [=](const caf::error& err) mutable {
    if (tries + 1 < limit)
      place(self, spec, rp, tries + 1);
    else
      rp.deliver(err);
  };
  auto asked = node.hdl;
  auto on_error = std::make_shared<std::function<void(caf::error)>>();
  *on_error = [=](caf::error err) mutable {
    auto& node = self->state.nodes[idx];
    if (node.pending.erase(id) == 0)
      return;
    if (node.in_use > 0)
      --node.in_use;
    ++node.create_failures;
    if (retry_elsewhere(err) && node.up) {
      // Draining or full for other fronts: no more creates there until
      // its next heartbeat says how many it admits.
      node.capacity =
        static_cast<uint32_t>(std::min<uint64_t>(busy(node), node.capacity));
    }
    if (retry_elsewhere(err) && tries + 1 < limit) {
      spdlog::debug("create on {} failed ({}): placing it elsewhere",
                    node.endpoint, describe(err));
      place(self, std::move(spec), rp, tries + 1);
    } else {
      rp.deliver(std::move(err));
    }
    dispatch(self);
  };
  self->request(node.hdl, create_timeout, create_atom::value, spec)
    .then(
      [=](sandbox_handle& inner) mutable {
        auto& st = self->state;
        auto& node = st.nodes[idx];
        if (!from_asked(self, asked)) {
          (*on_error)(forged_reply(node.endpoint));
          return;
        }
        if (node.pending.erase(id) == 0)
          return; // failed already: the node was lost
        sandbox_handle out;
        out.sandbox_id = node.endpoint + "/" + inner.sandbox_id;
        out.provider_name = provider_name;
        out.state = node.endpoint;
        ++node.sandboxes;
        st.sandboxes[out.sandbox_id] =
          placed_sandbox{idx, std::move(inner), self->clock().now()};
        rp.deliver(std::move(out));
      },
      [=](caf::error& err) {
        if (!error_from_asked(self, asked))
          (*on_error)(forged_reply(self->state.nodes[idx].endpoint));
        else
          (*on_error)(std::move(err));
      });
}

template <class R, class Atom, class... Ts>
caf::result<R> forward(self_ptr self, const sandbox_handle& hdl,
                       caf::timespan timeout, Atom atom, Ts... xs) {
  constexpr bool is_stop = std::is_same<Atom, stop_atom>::value;
  auto& st = self->state;
  auto i = st.sandboxes.find(hdl.sandbox_id);
  if (i == st.sandboxes.end()) {
    if (st.lost.count(hdl.sandbox_id) > 0) {
      if constexpr (is_stop) {
        // Its node is gone; the node's own reapers remove what is left.
        st.lost.erase(hdl.sandbox_id);
        return ok_atom::value;
      } else {
        return make_error(provider_errc::unavailable,
                          "the node of " + hdl.sandbox_id + " was lost");
      }
    }
    return make_error(provider_errc::no_such_sandbox,
                      "no sandbox " + hdl.sandbox_id + " on any node");
  }
  auto idx = i->second.node;
  auto& node = st.nodes[idx];
  auto rp = self->make_response_promise<R>();
  auto id = ++st.next_call;
  node.pending[id] = [rp](const caf::error& err) mutable { rp.deliver(err); };
  auto front_id = hdl.sandbox_id;
  auto asked = node.hdl;
  auto on_error = [=](caf::error err) mutable {
    if (self->state.nodes[idx].pending.erase(id) == 0)
      return;
    ++self->state.nodes[idx].call_failures;
    if (is_stop)
      release(self, front_id);
    rp.deliver(std::move(err));
  };
  self->request(node.hdl, timeout, atom, i->second.inner, std::move(xs)...)
    .then(
      [=](R& r) mutable {
        if (!from_asked(self, asked)) {
          on_error(forged_reply(self->state.nodes[idx].endpoint));
          return;
        }
        if (self->state.nodes[idx].pending.erase(id) == 0)
          return;
        if (is_stop)
          release(self, front_id);
        rp.deliver(std::move(r));
      },
      [=](caf::error& err) mutable {
        if (!error_from_asked(self, asked))
          on_error(forged_reply(self->state.nodes[idx].endpoint));
        else
          on_error(std::move(err));
      });
  return rp;
}

void tick(self_ptr self) {
  auto& st = self->state;
  auto now = self->clock().now();
  while (!st.queue.empty() && st.queue.front().deadline <= now) {
    std::string why;
    for (auto& n : st.nodes)
      if (!n.up && !n.last_error.empty())
        why += (why.empty() ? "; " : ", ") + n.endpoint + ": " + n.last_error;
    st.queue.front().rp.deliver(
      make_error(provider_errc::unavailable,
                 "no node with free capacity within " +
                   format_seconds(st.settings.queue_timeout_s) + why));
    st.queue.pop_front();
  }
  // Our own heartbeat on top of BASP's: a node that stops answering
  // (SIGSTOP) is lost within a tick and the connect timeout.
  auto timeout = seconds_span(st.settings.connect_timeout_s);
  for (size_t idx = 0; idx < st.nodes.size(); ++idx) {
    auto& node = st.nodes[idx];
    if (!node.up)
      continue;
    auto gen = node.gen;
    auto asked = node.hdl;
    self->request(node.hdl, timeout, node_info_atom::value)
      .then(
        [=](uint32_t capacity, uint32_t in_use) {
          auto& node = self->state.nodes[idx];
          if (!from_asked(self, asked)) {
            if (node.gen == gen && node.up)
              lose(self, idx, describe(forged_reply(node.endpoint)));
            return;
          }
          if (node.gen != gen || !node.up)
            return;
          // The node never counts more of ours than we do (it counts a
          // create when it arrives, frees a slot before its stop answers).
          auto foreign = in_use > node.in_use ? in_use - node.in_use : 0;
          if (capacity != node.capacity || foreign != node.foreign) {
            node.capacity = capacity;
            node.foreign = foreign;
            dispatch(self);
            answer_capacity_waiters(self);
          }
        },
        [=](caf::error& err) {
          auto& node = self->state.nodes[idx];
          if (node.gen != gen || !node.up)
            return;
          if (!error_from_asked(self, asked))
            lose(self, idx, describe(forged_reply(node.endpoint)));
          else
            lose(self, idx, "missed heartbeat: " + self->system().render(err));
        });
  }
  self->delayed_send(self, tick_interval, tick_atom::value);
}

double percentile(std::vector<double> xs, double p) {
  if (xs.empty())
    return -1;
  std::sort(xs.begin(), xs.end());
  auto rank = static_cast<size_t>(p * static_cast<double>(xs.size() - 1) + 0.5);
  return xs[std::min(rank, xs.size() - 1)];
}

std::string stats_text(self_ptr self) {
  json out = json::array();
  for (auto& n : self->state.nodes)
    out.push_back(json{{"endpoint", n.endpoint},
                       {"up", n.up},
                       {"capacity", n.capacity},
                       {"sandboxes", n.sandboxes},
                       {"create_failures", n.create_failures},
                       {"call_failures", n.call_failures},
                       {"failed_by_node_loss", n.failed_by_loss},
                       {"losses", n.losses},
                       {"last_error", n.up ? std::string{} : n.last_error},
                       {"sandbox_ms_p50", percentile(n.lifetimes_ms, 0.5)},
                       {"sandbox_ms_p99", percentile(n.lifetimes_ms, 0.99)}});
  return out.dump();
}

/// A node joins (or joins again) under `name`: it takes the slot of that
/// name (a new one the first time) and is asked its capacity like a node
/// dialled. A name of a configured endpoint is refused.
caf::result<ok_atom> on_join(self_ptr self, const std::string& name,
                             const caf::actor& hdl) {
  auto& st = self->state;
  if (!hdl || name.empty() || name.size() > 256)
    return make_error(provider_errc::invalid_argument,
                      "a join needs a name (at most 256 bytes) and a node");
  size_t idx = 0;
  while (idx < st.nodes.size() && st.nodes[idx].endpoint != name)
    ++idx;
  if (idx == st.nodes.size()) {
    node_slot n;
    n.endpoint = name;
    n.joined = true;
    st.nodes.push_back(std::move(n));
  } else if (!st.nodes[idx].joined) {
    return make_error(provider_errc::invalid_argument,
                      "the name " + name + " is a configured endpoint");
  }
  auto typed = caf::actor_cast<node_actor>(hdl);
  if (st.nodes[idx].up && st.nodes[idx].hdl == typed)
    return ok_atom::value;
  if (st.nodes[idx].up)
    lose(self, idx, "it joined again");
  spdlog::info("node {} joins", name);
  st.nodes[idx].hdl = std::move(typed);
  ++st.nodes[idx].gen; // whatever an older join still asks is stale
  connect(self, idx);
  return ok_atom::value;
}

/// The actor a front publishes on `listen`: it only passes joins on, so a
/// peer reaching the port sees nothing of the provider interface.
caf::behavior registrar(caf::event_based_actor* self, caf::actor provider) {
  self->set_default_handler(log_and_drop_unexpected);
  return {
    [=](join_atom a, std::string& name,
        caf::actor& node) -> caf::result<ok_atom> {
      // The joiner is who its connection proved (the BASP gate bound its
      // node id): an sv-node certificate, whose CN is the name it joins
      // under, offering a node actor of its own process.
      auto& sender = self->current_sender();
      auto who = sender ? peer_registry::find(sender->node()) : std::nullopt;
      auto refuse = [&](const std::string& why) {
        spdlog::warn("join refused: {}", why);
        return make_error(provider_errc::invalid_argument, why);
      };
      if (!who || who->role != node_role)
        return refuse("only a connected sv-node joins");
      if (!node || node->node() != sender->node())
        return refuse("node " + who->name + " offered another process's actor");
      if (who->name.rfind("insecure/", 0) != 0)
        name = who->name;
      // Asked, not delegated: the provider answers only this process.
      auto rp = self->make_response_promise<ok_atom>();
      self
        ->request(provider, std::chrono::seconds{30}, a, std::move(name),
                  std::move(node))
        .then([=](ok_atom) mutable { rp.deliver(ok_atom::value); },
              [=](caf::error& err) mutable { rp.deliver(std::move(err)); });
      return rp;
    },
  };
}

/// Publishes the registrar on `listen`. A front that cannot listen logs
/// it; sv-grade then finds no node within its join wait.
void start_listening(self_ptr self) {
  auto& st = self->state;
  // Checked by the settings' parser.
  auto where = parse_endpoint(st.settings.listen, port_zero::allowed);
  auto host = where.host;
  auto port = where.port;
  st.registrar =
    self->spawn<caf::linked>(registrar, caf::actor_cast<caf::actor>(self));
  auto listen = st.settings.listen;
  self
    ->request(mm_actor(self), seconds_span(30), caf::publish_atom::value, port,
              caf::actor_cast<caf::strong_actor_ptr>(st.registrar),
              std::set<std::string>{}, host, true)
    .then(
      [=](uint16_t actual) {
        spdlog::info("accepting nodes on {}:{}", host, actual);
      },
      [=](caf::error& err) {
        spdlog::error("cannot accept nodes on {}: {}", listen,
                      self->system().render(err));
      });
}

/// A nodes handle names its node ("HOST:PORT") in `state`.
std::string node_of(const sandbox_handle& hdl) {
  return hdl.state;
}

caf::behavior nodes_provider(self_ptr self, nodes_settings settings,
                             std::vector<node_actor> injected) {
  register_node_pinning(provider_name, node_of);
  auto& st = self->state;
  st.settings = std::move(settings);
  for (size_t i = 0; i < st.settings.endpoints.size(); ++i) {
    node_slot n;
    n.endpoint = st.settings.endpoints[i];
    auto ep = parse_endpoint(n.endpoint); // checked by the settings' parser
    n.host = ep.host;
    n.port = ep.port;
    if (i < injected.size()) {
      n.injected = true;
      n.hdl = injected[i];
    }
    st.nodes.push_back(std::move(n));
  }
  self->set_default_handler(log_and_drop_unexpected);
  self->set_down_handler([=](caf::down_msg& dm) {
    auto& st = self->state;
    for (size_t idx = 0; idx < st.nodes.size(); ++idx)
      if (st.nodes[idx].up && st.nodes[idx].hdl.address() == dm.source)
        lose(self, idx, "down: " + self->system().render(dm.reason));
  });
  for (size_t idx = 0; idx < st.nodes.size(); ++idx)
    connect(self, idx);
  if (!st.settings.listen.empty())
    start_listening(self);
  self->delayed_send(self, tick_interval, tick_atom::value);
  // Every handler answers only this process: the provider's address
  // crosses the wire as the sender of its calls, so a node (or anyone on
  // its connection) can name it (issue 19 item 4).
  auto refused = [=](const char* what) {
    spdlog::warn("refused {} from another process", what);
    return make_error(provider_errc::unavailable,
                      std::string{"refused: "} + what +
                        " comes only from this process");
  };
  return {
    [=](create_atom, sandbox_spec& spec) -> caf::result<sandbox_handle> {
      if (!from_own_process(self))
        return refused("a create");
      auto rp = self->make_response_promise<sandbox_handle>();
      place(self, std::move(spec), rp, 0);
      return rp;
    },
    [=](status_atom a, sandbox_handle& hdl) -> caf::result<sandbox_status> {
      if (!from_own_process(self))
        return refused("a status");
      return forward<sandbox_status>(self, hdl, call_timeout, a);
    },
    [=](upload_atom a, sandbox_handle& hdl, std::string& dir,
        file_map& files) -> caf::result<ok_atom> {
      if (!from_own_process(self))
        return refused("an upload");
      return forward<ok_atom>(self, hdl, call_timeout, a, std::move(dir),
                              std::move(files));
    },
    [=](exec_atom a, sandbox_handle& hdl,
        exec_request& req) -> caf::result<exec_result> {
      if (!from_own_process(self))
        return refused("an exec");
      auto t = call_timeout + bounded_seconds(req.timeout_s);
      return forward<exec_result>(self, hdl, t, a, std::move(req));
    },
    [=](download_atom a, sandbox_handle& hdl,
        std::string& path) -> caf::result<std::string> {
      if (!from_own_process(self))
        return refused("a download");
      return forward<std::string>(self, hdl, call_timeout, a, std::move(path));
    },
    [=](stop_atom a, sandbox_handle& hdl) -> caf::result<ok_atom> {
      // Anonymous stops are this process's too (fire and forget).
      if (self->current_sender() && !from_own_process(self))
        return refused("a stop");
      return forward<ok_atom>(self, hdl, call_timeout, a);
    },
    [=](reconnect_atom, size_t idx, uint64_t gen) {
      // Its index is ours only when it comes from our own timer.
      if (!from_own_process(self) || idx >= self->state.nodes.size())
        return;
      auto& node = self->state.nodes[idx];
      if (node.gen == gen && !node.up && !node.connecting)
        connect(self, idx);
    },
    [=](tick_atom) {
      if (from_own_process(self))
        tick(self);
    },
    [=](nodes_stats_atom) -> caf::result<std::string> {
      if (!from_own_process(self))
        return refused("a stats question");
      return stats_text(self);
    },
    [=](grade_identity_atom, std::string& python) -> caf::result<std::string> {
      if (!from_own_process(self))
        return refused("a grade identity question");
      return grade_identities(self, python);
    },
    [=](nodes_capacity_atom, caf::timespan wait) -> caf::result<uint64_t> {
      if (!from_own_process(self))
        return refused("a capacity question");
      auto total = self->state.capacity_up();
      return self->state.capacity_waiters.wait(
        self, total > 0 || self->state.all_unreachable(), total, wait,
        capacity_due_atom::value);
    },
    [=](capacity_due_atom, uint64_t token) {
      if (from_own_process(self))
        self->state.capacity_waiters.expire(token, self->state.capacity_up());
    },
    [=](join_atom, std::string& name, caf::actor& hdl) -> caf::result<ok_atom> {
      // From the registrar (which checked the joiner) or a test.
      if (!from_own_process(self))
        return refused("a join");
      return on_join(self, name, hdl);
    },
  };
}

} // namespace

provider_actor spawn_nodes_provider(caf::actor_system& sys,
                                    nodes_settings settings,
                                    std::vector<node_actor> nodes) {
  return caf::actor_cast<provider_actor>(
    sys.spawn(nodes_provider, std::move(settings), std::move(nodes)));
}

} // namespace sv
