// The remote provider actor: each call becomes one request of sv-serve's
// sandbox API on the connection pool (detail/http_client.hpp); its answer is
// mapped to the typed result on the pool's thread (detail/wire.hpp) and sent
// back to this actor, which delivers the requester's promise on its own thread
// (CAF 0.17: never from a foreign thread). It owns those promises and fails
// them when it exits (there is no broken_promise).

// clang-format off
// First: caf/result.hpp (included by the headers below) needs it declared.
#include <caf/make_message.hpp>
// clang-format on

#include "actors/detail/quiet.hpp"
#include "messages/errors.hpp"
#include "providers/detail/pending_calls.hpp"
#include "providers/factory.hpp"
#include "providers/remote.hpp"
#include "providers/remote/detail/http_client.hpp"
#include "providers/remote/detail/wire.hpp"

#include <algorithm>
#include <caf/actor_cast.hpp>
#include <caf/actor_clock.hpp>
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/response_promise.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <chrono>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <spdlog/spdlog.h>
#include <stdexcept>
#include <unordered_map>

namespace sv {

namespace {

using namespace sv::remote;
using steady = std::chrono::steady_clock;

/// Tags the completion of a request: `(remote_done_atom, call, T)` or
/// `(remote_done_atom, call, caf::error)`.
using remote_done_atom = caf::atom_constant<caf::atom("rm_done")>;

/// What every actor of one backend shares: the settings and the pool.
struct remote_client {
  std::shared_ptr<const remote_provider_config> cfg;
  http_pool pool;

  explicit remote_client(std::shared_ptr<const remote_provider_config> c)
      : cfg(c), pool(pool_settings(*c)) {
    // nop
  }

  static http_pool_settings pool_settings(const remote_provider_config& c) {
    http_pool_settings s;
    s.host = c.host;
    s.port = c.port;
    s.connections = c.connections;
    s.max_response_bytes = c.max_response_bytes;
    s.tls = c.tls;
    s.ca_file = c.ca_file;
    return s;
  }
};

struct remote_state {
  static inline const char* name = "sv.remote_provider";

  std::shared_ptr<remote_client> client;
  /// Requesters waiting for an answer, by call.
  pending_calls<remote_done_atom> pending;

  remote_state() = default;
  remote_state(const remote_state&) = delete;
  remote_state& operator=(const remote_state&) = delete;

  /// CAF destroys the state when the actor exits, whatever the reason.
  /// Requests still on the wire finish on the pool; their answers find no
  /// actor and are dropped (a late create's sandbox is stopped).
  ~remote_state() {
    pending.fail_all(make_error(provider_errc::unavailable,
                                "the remote provider is shutting down"));
  }
};

using remote_actor = caf::stateful_actor<remote_state>;

template <class T>
using completion = call_completion<T>;

/// Sends `req`; `read` maps its outcome to the typed result.
template <class T, class Read>
caf::result<T> call(remote_actor* self, http_request req, Read read) {
  auto [rp, done] = self->state.pending.template start<T>(self);
  auto cfg = self->state.client->cfg;
  self->state.client->pool.submit(
    std::move(req), [cfg, read, done{std::move(done)}](http_outcome out) {
      done(read(*cfg, out));
    });
  return caf::result<T>{caf::delegated<T>{}};
}

caf::error check_handle(const sandbox_handle& h) {
  if (!h.sandbox_id.empty())
    return caf::none;
  return make_error(provider_errc::no_such_sandbox, "an empty sandbox id");
}

// -- create: one key, retried while nothing can have been created twice -------

struct create_attempt {
  std::weak_ptr<remote_client> client;
  std::shared_ptr<const remote_provider_config> cfg;
  std::shared_ptr<const sandbox_spec> spec;
  std::string key;
  steady::time_point deadline;
  uint32_t attempt = 1;
  completion<sandbox_handle> done;
};

void send_create(create_attempt a) {
  auto client = a.client.lock();
  if (!client) {
    a.done(make_error(provider_errc::unavailable,
                      "the remote provider is shutting down"));
    return;
  }
  auto left = std::chrono::duration<double>(a.deadline - steady::now()).count();
  auto req = make_create(*a.cfg, *a.spec, a.key, std::max(0.001, left));
  auto& pool = client->pool;
  pool.submit(std::move(req), [a{std::move(a)}](http_outcome out) mutable {
    // 429: the token has as many live sandboxes as sv-serve allows; wait
    // for one to end (Retry-After), until the deadline. Otherwise (nothing
    // answered, 503) a few tries.
    auto full = out.ok && out.response.status == 429;
    auto backoff =
      std::chrono::milliseconds{100 << std::min(a.attempt - 1, 4u)};
    if (out.ok && !out.response.retry_after.empty() &&
        out.response.retry_after.size() < 6 &&
        out.response.retry_after.find_first_not_of("0123456789") ==
          std::string::npos)
      backoff = std::max(
        backoff,
        std::chrono::milliseconds{std::stoi(out.response.retry_after) * 1000});
    if (create_may_retry(out) && (full || a.attempt < a.cfg->create_attempts) &&
        steady::now() + 2 * backoff < a.deadline) {
      if (auto client = a.client.lock()) {
        if (!full)
          spdlog::info("remote provider: create on {} failed ({}), trying "
                       "again with the same key",
                       a.cfg->url,
                       out.ok ? std::to_string(out.response.status)
                              : std::string{to_string(out.failure)});
        ++a.attempt;
        client->pool.after(backoff,
                           [a]() mutable { send_create(std::move(a)); });
        return;
      }
    }
    a.done(read_create(*a.cfg, out));
  });
}

/// A sandbox whose create finished after its actor exited: stopped, so it
/// does not wait for its TTL.
void stop_orphan(std::weak_ptr<remote_client> weak, sandbox_handle& h) {
  auto client = weak.lock();
  if (!client)
    return;
  spdlog::warn("remote provider: stopping {}, created after its provider "
               "exited",
               h.sandbox_id);
  client->pool.submit(make_stop(*client->cfg, h.sandbox_id),
                      [id{h.sandbox_id}](http_outcome out) {
                        if (!out.ok || out.response.status >= 300)
                          spdlog::warn("remote provider: stopping {} failed; "
                                       "its TTL reaps it",
                                       id);
                      });
}

caf::result<sandbox_handle> create(remote_actor* self, sandbox_spec& spec) {
  auto& client = self->state.client;
  std::weak_ptr<remote_client> weak = client;
  auto [rp, done] = self->state.pending.start<sandbox_handle>(
    self, [weak](sandbox_handle& h) { stop_orphan(weak, h); });
  create_attempt a;
  a.client = weak;
  a.cfg = client->cfg;
  auto patience = std::chrono::duration_cast<steady::duration>(
    std::chrono::duration<double>(create_deadline_s(*a.cfg, spec)));
  // A requester in this process stamped its deadline (messages/protocol.hpp):
  // the time the create waited in this mailbox is spent already.
  if (spec.create_deadline_at != steady::time_point{})
    patience = std::min(
      patience, std::max(steady::duration{0},
                         std::chrono::duration_cast<steady::duration>(
                           spec.create_deadline_at - self->clock().now())));
  a.deadline = steady::now() + patience;
  a.spec = std::make_shared<const sandbox_spec>(std::move(spec));
  a.key = new_idempotency_key();
  a.done = std::move(done);
  send_create(std::move(a));
  return caf::result<sandbox_handle>{caf::delegated<sandbox_handle>{}};
}

// -- the actor ----------------------------------------------------------------

caf::behavior remote_provider(remote_actor* self,
                              std::shared_ptr<remote_client> client) {
  self->set_default_handler(log_and_drop_unexpected);
  self->state.client = std::move(client);
  return {
    [self](create_atom, sandbox_spec& spec) { return create(self, spec); },
    [self](status_atom,
           const sandbox_handle& h) -> caf::result<sandbox_status> {
      if (auto err = check_handle(h))
        return err;
      auto& cfg = *self->state.client->cfg;
      return call<sandbox_status>(self, make_status(cfg, h.sandbox_id),
                                  read_status);
    },
    [self](upload_atom, const sandbox_handle& h, const std::string& dir,
           const file_map& files) -> caf::result<ok_atom> {
      if (auto err = check_handle(h))
        return err;
      auto& cfg = *self->state.client->cfg;
      return call<ok_atom>(
        self, make_upload(cfg, h.sandbox_id, dir, files),
        [](const remote_provider_config& c, const http_outcome& out) {
          return read_done(remote_op::upload, c, out);
        });
    },
    [self](exec_atom, const sandbox_handle& h,
           const exec_request& x) -> caf::result<exec_result> {
      if (auto err = check_handle(h))
        return err;
      if (!(x.timeout_s > 0) || x.timeout_s > 604800)
        return make_error(provider_errc::invalid_argument,
                          "timeout_s: must be a number of seconds in (0, "
                          "604800]");
      auto& cfg = *self->state.client->cfg;
      return call<exec_result>(self, make_exec(cfg, h.sandbox_id, x),
                               read_exec);
    },
    [self](download_atom, const sandbox_handle& h,
           const std::string& path) -> caf::result<std::string> {
      if (auto err = check_handle(h))
        return err;
      auto& cfg = *self->state.client->cfg;
      return call<std::string>(
        self, make_download(cfg, h.sandbox_id, path),
        [](const remote_provider_config& c, http_outcome& out) {
          return read_download(c, out);
        });
    },
    [self](stop_atom, const sandbox_handle& h) -> caf::result<ok_atom> {
      if (auto err = check_handle(h))
        return err;
      auto& cfg = *self->state.client->cfg;
      return call<ok_atom>(
        self, make_stop(cfg, h.sandbox_id),
        [](const remote_provider_config& c, const http_outcome& out) {
          return read_done(remote_op::stop, c, out);
        });
    },
    [self](remote_done_atom, uint64_t call, sandbox_handle& h) {
      self->state.pending.finish(call, std::move(h));
    },
    [self](remote_done_atom, uint64_t call, sandbox_status s) {
      self->state.pending.finish(call, s);
    },
    [self](remote_done_atom, uint64_t call, exec_result& r) {
      self->state.pending.finish(call, std::move(r));
    },
    [self](remote_done_atom, uint64_t call, std::string& text) {
      self->state.pending.finish(call, std::move(text));
    },
    [self](remote_done_atom, uint64_t call, ok_atom ok) {
      self->state.pending.finish(call, ok);
    },
    [self](remote_done_atom, uint64_t call, caf::error& err) {
      self->state.pending.finish(call, std::move(err));
    },
  };
}

class remote_backend : public provider_backend {
public:
  explicit remote_backend(remote_provider_config cfg) {
    if (!cfg.token_file.empty())
      cfg.token = read_token_file(cfg.token_file);
    if (!cfg.ca_file.empty() && !std::ifstream{cfg.ca_file})
      throw std::runtime_error("remote provider: cannot read the CA file " +
                               cfg.ca_file);
    client_ = std::make_shared<remote_client>(
      std::make_shared<const remote_provider_config>(std::move(cfg)));
    spdlog::info("remote provider: sv-serve at {}, {} connections",
                 client_->cfg->url, client_->cfg->connections);
  }

  provider_actor spawn(caf::actor_system& sys) const override {
    return caf::actor_cast<provider_actor>(sys.spawn(remote_provider, client_));
  }

  void shut_down() override { client_->pool.shut_down(); }

  // What grades here is what the far sv-serve's backend runs: asked once
  // per python name (blocking this caller's thread, never the pool's).
  // Where, how many and how patiently (url, connections, timeout_s, ...) are
  // not part of it.
  json grade_identity(const verification_config& c) const override {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      if (auto i = identities_.find(c.python); i != identities_.end())
        return i->second;
    }
    auto done = std::make_shared<std::promise<http_outcome>>();
    auto answer = done->get_future();
    auto req = make_identity(*client_->cfg, c.python);
    auto patience = req.deadline + std::chrono::seconds{5};
    client_->pool.submit(std::move(req), [done](http_outcome out) {
      done->set_value(std::move(out));
    });
    if (answer.wait_for(patience) != std::future_status::ready)
      throw std::runtime_error("remote provider: no answer to GET "
                               "/v1/identity from " +
                               client_->cfg->url);
    auto far = read_identity(*client_->cfg, answer.get());
    if (!far)
      throw std::runtime_error("remote provider: " + describe(far.error()));
    json out{{"name", "remote"}, {"far", std::move(*far)}};
    std::lock_guard<std::mutex> guard{mtx_};
    return identities_.emplace(c.python, std::move(out)).first->second;
  }

private:
  std::shared_ptr<remote_client> client_;
  mutable std::mutex mtx_;
  mutable std::map<std::string, json> identities_;
};

} // namespace

std::shared_ptr<provider_backend> make_remote_backend(const json& settings) {
  return std::make_shared<remote_backend>(
    parse_remote_provider_config(settings));
}

} // namespace sv
