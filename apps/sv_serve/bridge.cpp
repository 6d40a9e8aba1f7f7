#include "apps/sv_serve/bridge.hpp"

#include "actors/detail/quiet.hpp"
#include "messages/batch_format.hpp"
#include "messages/errors.hpp"

#include <atomic>
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <condition_variable>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace sv::serve {

namespace {

using end_atom = caf::atom_constant<caf::atom("end")>;

/// Server-wide sequence of submission ids.
std::atomic<uint64_t> next_id{1};

/// Clients alive, so that shutdown reaches them all; `clients_gone` is
/// notified when the last one ends.
std::mutex clients_mtx;
std::condition_variable clients_gone;
std::unordered_map<caf::actor_id, caf::actor> clients;

struct client_state {
  static inline const char* name = "sv.serve_client";
  struct pending {
    uint64_t tag;
    std::string id; // the submission's own
  };
  /// Outstanding submissions by their server id.
  std::unordered_map<std::string, pending> outstanding;
};

using client_ptr = caf::stateful_actor<client_state>*;

verification_outcome lost_reply(std::string id, const caf::error& err) {
  return make_failed_outcome(
    std::move(id), failure_kind::provider_unavailable,
    verification_state::queue,
    err == caf::sec::request_timeout ? failure_cause::timeout
                                     : failure_cause::crash,
    "sv-serve lost the supervisor's reply: " + describe(err));
}

caf::behavior client(client_ptr self, supervisor_actor supervisor,
                     outcome_callback done) {
  self->set_default_handler(sv::log_and_drop_unexpected);
  return {
    [=](uint64_t tag, verification_request& req) {
      auto server_id = "sv-serve/" + std::to_string(next_id++);
      self->state.outstanding.emplace(server_id,
                                      client_state::pending{tag, req.id});
      auto timeout = reply_timeout(req);
      req.id = server_id;
      auto finish = [self, done, server_id](verification_outcome out) {
        auto& pending = self->state.outstanding;
        auto i = pending.find(server_id);
        if (i == pending.end())
          return;
        out.id = std::move(i->second.id);
        auto tag = i->second.tag;
        pending.erase(i);
        done(tag, std::move(out));
      };
      self->request(supervisor, timeout, verify_atom::value, std::move(req))
        .then([finish](verification_outcome& out) { finish(std::move(out)); },
              [finish](caf::error& err) { finish(lost_reply({}, err)); });
    },
    [=](cancel_atom) {
      for (auto& [server_id, pending] : self->state.outstanding)
        self->send(supervisor, cancel_atom::value, server_id);
      self->state.outstanding.clear();
      self->quit();
    },
    [=](end_atom) { self->quit(); },
  };
}

struct stats_state {
  static inline const char* name = "sv.serve_stats";
};

void stats_asker(caf::stateful_actor<stats_state>* self,
                 supervisor_actor supervisor,
                 std::function<void(std::optional<supervisor_stats>)> done) {
  self->set_default_handler(sv::log_and_drop_unexpected);
  self->request(supervisor, std::chrono::seconds{5}, stats_atom::value)
    .then([=](supervisor_stats& stats) { done(stats); },
          [=](caf::error&) { done(std::nullopt); });
}

/// Registers an actor, which unregisters itself when it ends.
caf::actor track(caf::actor hdl) {
  {
    std::lock_guard<std::mutex> guard{clients_mtx};
    clients.emplace(hdl.id(), hdl);
  }
  hdl->attach_functor([id = hdl.id()] {
    std::lock_guard<std::mutex> guard{clients_mtx};
    clients.erase(id);
    if (clients.empty())
      clients_gone.notify_all();
  });
  return hdl;
}

} // namespace

caf::actor spawn_client(caf::actor_system& sys, supervisor_actor supervisor,
                        outcome_callback done) {
  return track(sys.spawn(client, std::move(supervisor), std::move(done)));
}

void end_all_clients() {
  std::vector<caf::actor> all;
  {
    std::lock_guard<std::mutex> guard{clients_mtx};
    for (auto& [id, hdl] : clients)
      all.push_back(hdl);
  }
  for (auto& hdl : all)
    caf::anon_send_exit(hdl, caf::exit_reason::user_shutdown);
}

void submit(const caf::actor& client, uint64_t tag, verification_request req) {
  caf::anon_send(client, tag, std::move(req));
}

void cancel_client(const caf::actor& client) {
  caf::anon_send(client, cancel_atom::value);
}

void end_client(const caf::actor& client) {
  caf::anon_send(client, end_atom::value);
}

void fetch_stats(caf::actor_system& sys, supervisor_actor supervisor,
                 std::function<void(std::optional<supervisor_stats>)> done) {
  track(sys.spawn(stats_asker, std::move(supervisor), std::move(done)));
}

bool wait_clients_gone(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> guard{clients_mtx};
  return clients_gone.wait_for(guard, timeout, [] { return clients.empty(); });
}

} // namespace sv::serve
