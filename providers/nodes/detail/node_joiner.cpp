#include "providers/nodes/detail/node_joiner.hpp"

#include "actors/detail/quiet.hpp"
#include "messages/atoms.hpp"
#include "providers/nodes/detail/transport/basp_gate.hpp"

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/io/middleman.hpp>
#include <caf/stateful_actor.hpp>
#include <chrono>
#include <set>
#include <spdlog/spdlog.h>

namespace sv {

namespace {

using namespace std::chrono_literals;

using rejoin_atom = caf::atom_constant<caf::atom("rejoin")>;

constexpr caf::timespan first_backoff = 250ms;
constexpr caf::timespan max_backoff = 2s;
constexpr caf::timespan call_timeout = 5s;
constexpr caf::timespan join_interval = 1s;

struct joiner_state {
  join_settings settings;
  node_actor node;
  caf::actor registrar;
  caf::timespan backoff = first_backoff;
  /// Tags the timer: a stale one does nothing.
  uint64_t gen = 0;
  /// The last failure logged (the first of a streak is a warning).
  std::string last_error;
  static inline const char* name = "sv.node_joiner";
};

using self_ptr = caf::stateful_actor<joiner_state>*;

void dial(self_ptr self);

/// A message of this process (its timers); the front's process can name
/// the joiner too (it sends the joins).
bool from_own_process(self_ptr self) {
  auto& sender = self->current_sender();
  return sender && sender->node() == self->node();
}

/// The reply comes from the registrar asked (CAF 0.17 matches replies by
/// message id only).
bool from_registrar(self_ptr self, const caf::actor& asked) {
  auto& sender = self->current_sender();
  return sender && asked && sender->node() == asked.node() &&
         sender->id() == asked.id();
}

void retry_later(self_ptr self, const std::string& why) {
  auto& st = self->state;
  if (st.registrar) {
    self->demonitor(st.registrar);
    st.registrar = caf::actor{};
  }
  if (why != st.last_error)
    spdlog::warn("cannot join the front {}:{}: {}", st.settings.host,
                 st.settings.port, why);
  st.last_error = why;
  self->delayed_send(self, st.backoff, rejoin_atom::value, ++st.gen);
  st.backoff = std::min(st.backoff * 2, max_backoff);
}

/// Offers the node to the registrar; repeated every second while it lasts.
void offer(self_ptr self) {
  auto& st = self->state;
  auto gen = st.gen;
  auto asked = st.registrar;
  self
    ->request(st.registrar, call_timeout, join_atom::value, st.settings.name,
              caf::actor_cast<caf::actor>(st.node))
    .then(
      [=](ok_atom) {
        auto& st = self->state;
        if (gen != st.gen)
          return;
        if (!from_registrar(self, asked)) {
          retry_later(self, "a join reply did not come from the front "
                            "(dropped)");
          return;
        }
        if (!st.last_error.empty() || st.backoff != first_backoff)
          spdlog::info("joined the front {}:{} as {}", st.settings.host,
                       st.settings.port, st.settings.name);
        st.last_error.clear();
        st.backoff = first_backoff;
        self->delayed_send(self, join_interval, rejoin_atom::value, ++st.gen);
      },
      [=](caf::error& err) {
        if (gen == self->state.gen)
          retry_later(self, self->system().render(err));
      });
}

void dial(self_ptr self) {
  auto& st = self->state;
  auto gen = st.gen;
  auto& sys = self->system();
  auto mm = transport::gate_actor(sys);
  self
    ->request(mm, call_timeout, caf::connect_atom::value, st.settings.host,
              st.settings.port)
    .then(
      [=](caf::node_id&, caf::strong_actor_ptr& ptr, std::set<std::string>&) {
        auto& st = self->state;
        if (gen != st.gen)
          return;
        if (!ptr) {
          retry_later(self, "no front listens there");
          return;
        }
        st.registrar = caf::actor_cast<caf::actor>(ptr);
        self->monitor(st.registrar);
        offer(self);
      },
      [=](caf::error& err) {
        if (gen != self->state.gen)
          return;
        retry_later(self, self->system().render(err));
      });
}

caf::behavior joiner(self_ptr self, node_actor node, join_settings settings) {
  auto& st = self->state;
  st.node = std::move(node);
  st.settings = std::move(settings);
  self->set_default_handler(log_and_drop_unexpected);
  self->set_down_handler([=](caf::down_msg& dm) {
    auto& st = self->state;
    if (st.registrar && dm.source == st.registrar.address()) {
      st.registrar = caf::actor{};
      ++st.gen; // the pending offer, if any, is stale
      retry_later(self, "the front is gone");
    }
  });
  dial(self);
  return {
    [=](rejoin_atom, uint64_t gen) {
      auto& st = self->state;
      if (!from_own_process(self) || gen != st.gen)
        return;
      if (st.registrar)
        offer(self);
      else
        dial(self);
    },
  };
}

} // namespace

caf::actor spawn_node_joiner(caf::actor_system& sys, node_actor node,
                             join_settings settings) {
  return sys.spawn(joiner, std::move(node), std::move(settings));
}

} // namespace sv
