#include "apps/sv_serve/sandboxes.hpp"

#include "actors/detail/quiet.hpp"
#include "apps/sv_serve/metrics.hpp"
#include "messages/bounded_json.hpp"
#include "messages/errors.hpp"
#include "messages/json.hpp"
#include "messages/validation.hpp"

#include <atomic>
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <spdlog/spdlog.h>
#include <unordered_map>

namespace sv::serve {

namespace {

using work_atom = caf::atom_constant<caf::atom("sbx_work")>;
using reap_atom = caf::atom_constant<caf::atom("sbx_reap")>;
using drain_atom = caf::atom_constant<caf::atom("sbx_drain")>;
using finish_atom = caf::atom_constant<caf::atom("sbx_fin")>;
using abort_atom = caf::atom_constant<caf::atom("sbx_abort")>;

using clock = std::chrono::steady_clock;
using op = sandbox_op;

// -- the actor ----------------------------------------------------------------

/// What the Asio side hands over; the actor drains it on `work_atom`.
struct inbox {
  std::mutex mtx;
  std::deque<std::pair<sandbox_call, sandbox_reply_fn>> calls;
  std::vector<uint64_t> abandoned; // call ids
  std::atomic<uint64_t> next_call{1};
  std::promise<void> finished;
  std::atomic<bool> done{false};
};

struct api_sandbox {
  std::string owner;
  sandbox_handle handle; // the provider's
  std::string idempotency_key;
  double ttl_s = 0;
  clock::time_point deadline;  // created + ttl
  clock::time_point last_used; // for the idle timeout
  size_t busy = 0;             // calls in flight
  bool stopping = false;
  clock::time_point next_stop{};
  std::chrono::seconds stop_backoff{1};
  std::vector<uint64_t> stop_waiters;
};

/// A create the provider has not answered yet.
struct pending_create {
  clock::time_point deadline; // its caller's
  uint64_t slot = 0;
  /// Its (owner, Idempotency-Key), if any.
  std::optional<std::pair<std::string, std::string>> key;
  /// Its caller (and its key's joiners) heard 504 at the deadline; a
  /// sandbox it still makes is stopped at once.
  bool expired = false;
};

/// A create in flight (or done) under an idempotency key.
struct keyed_create {
  std::string fingerprint; // the spec's JSON
  std::string id;          // once created
  std::vector<uint64_t> waiters;
};

struct api_state {
  static inline const char* name = "sv.serve_sandboxes";
  std::function<provider_actor()> provider;
  sandbox_api_options opts;
  metrics* counters = nullptr;
  std::shared_ptr<inbox> in;
  /// Reply callbacks by slot (the call's id): the provider replies'
  /// handlers capture only the slot, so clearing this map releases every
  /// session at once.
  std::unordered_map<uint64_t, sandbox_reply_fn> slots;
  /// Creates in flight by their number.
  std::unordered_map<uint64_t, pending_create> creates;
  uint64_t next_create = 1;
  std::unordered_map<std::string, api_sandbox> live;
  std::map<std::pair<std::string, std::string>, keyed_create> keys;
  std::unordered_map<std::string, size_t> per_owner; // live + creating
  size_t creating = 0;
  /// Ids stopped lately and their owners: a repeated DELETE is 204.
  std::unordered_map<std::string, std::string> tombstones;
  std::deque<std::string> tombstone_order;
  bool draining = false;
  bool finishing = false;
};

using api_ptr = caf::stateful_actor<api_state>*;

constexpr size_t max_tombstones = 65536;

void publish_live(api_ptr self) {
  if (self->state.counters)
    self->state.counters->api.live = self->state.live.size();
}

uint64_t hold(api_ptr self, uint64_t slot, sandbox_reply_fn fn) {
  self->state.slots.emplace(slot, std::move(fn));
  return slot;
}

bool waited_for(api_ptr self, uint64_t slot) {
  return self->state.slots.count(slot) > 0;
}

void answer(api_ptr self, uint64_t slot, sandbox_reply reply) {
  auto i = self->state.slots.find(slot);
  if (i == self->state.slots.end())
    return;
  auto fn = std::move(i->second);
  self->state.slots.erase(i);
  fn(std::move(reply));
}

void maybe_finish(api_ptr self) {
  auto& st = self->state;
  if (!st.finishing || !st.live.empty() || st.creating > 0)
    return;
  st.slots.clear();
  self->quit();
}

void forget(api_ptr self, const std::string& id) {
  auto& st = self->state;
  auto i = st.live.find(id);
  if (i == st.live.end())
    return;
  auto& sb = i->second;
  if (!sb.idempotency_key.empty())
    st.keys.erase({sb.owner, sb.idempotency_key});
  if (--st.per_owner[sb.owner] == 0)
    st.per_owner.erase(sb.owner);
  st.tombstones[id] = sb.owner;
  st.tombstone_order.push_back(id);
  while (st.tombstone_order.size() > max_tombstones) {
    st.tombstones.erase(st.tombstone_order.front());
    st.tombstone_order.pop_front();
  }
  auto waiters = std::move(sb.stop_waiters);
  st.live.erase(i);
  publish_live(self);
  for (auto w : waiters)
    answer(self, w, no_content());
  maybe_finish(self);
}

void stop_sandbox(api_ptr self, const std::string& id) {
  auto& sb = self->state.live.at(id);
  if (sb.stopping)
    return;
  sb.stopping = true;
  self
    ->request(self->state.provider(), self->state.opts.call_timeout,
              stop_atom::value, sb.handle)
    .then([=](ok_atom) { forget(self, id); },
          [=](caf::error& err) {
            if (provider_error_code(err) ==
                static_cast<uint8_t>(provider_errc::no_such_sandbox))
              return forget(self, id);
            auto i = self->state.live.find(id);
            if (i == self->state.live.end())
              return;
            auto& sb = i->second;
            spdlog::warn("stopping sandbox {} failed: {}", id, describe(err));
            sb.stopping = false;
            sb.next_stop = clock::now() + sb.stop_backoff;
            sb.stop_backoff =
              std::min(sb.stop_backoff * 2, std::chrono::seconds{30});
            auto waiters = std::move(sb.stop_waiters);
            sb.stop_waiters.clear();
            for (auto w : waiters)
              answer(self, w, provider_failure(err, "stop"));
            if (self->state.finishing)
              forget(self, id); // the provider's own TTL is the last resort
          });
}

/// Ends a call on a sandbox: marks it used, answers.
void release(api_ptr self, const std::string& id, uint64_t slot,
             sandbox_reply reply) {
  if (auto i = self->state.live.find(id); i != self->state.live.end()) {
    i->second.last_used = clock::now();
    if (i->second.busy > 0)
      --i->second.busy;
  }
  answer(self, slot, std::move(reply));
}

// -- create -------------------------------------------------------------------

void answer_create(api_ptr self, const keyed_create* kc, uint64_t first,
                   const std::optional<sandbox_reply>& failure,
                   const json& created) {
  if (failure) {
    answer(self, first, *failure);
    if (kc)
      for (auto w : kc->waiters)
        answer(self, w, *failure);
    return;
  }
  answer(self, first, json_reply(201, created));
  if (kc)
    for (auto w : kc->waiters)
      answer(self, w, json_reply(200, created));
}

json created_json(const std::string& id, const api_sandbox& sb) {
  return json{{"sandbox_id", id},
              {"provider_name", sb.handle.provider_name},
              {"state", sb.handle.state},
              {"ttl_s", sb.ttl_s}};
}

using owner_key = std::pair<std::string, std::string>;

/// Answers a create that needs no provider call: a replay or a join of its
/// key, draining, the per-token limit. True when it did.
bool answered_without_create(api_ptr self, const sandbox_call& call,
                             const std::string& fingerprint, uint64_t slot) {
  auto& st = self->state;
  if (call.has_idempotency_key) {
    auto k = st.keys.find({call.owner, call.idempotency_key});
    if (k != st.keys.end()) {
      if (k->second.fingerprint != fingerprint) {
        answer(self, slot,
               error_reply(422, "idempotency_key_reused",
                           "Idempotency-Key " + call.idempotency_key +
                             " was used with another spec"));
        return true;
      }
      if (k->second.id.empty()) { // still creating: join it
        k->second.waiters.push_back(slot);
        return true;
      }
      if (auto i = st.live.find(k->second.id); i != st.live.end()) {
        if (i->second.stopping) {
          // Not a sandbox to hand out: say so. Once stopped, the key is
          // free again and a retry creates a new one.
          answer(
            self, slot,
            json_reply(409, json{{"error",
                                  {{"code", "sandbox_stopping"},
                                   {"message",
                                    "Idempotency-Key " + call.idempotency_key +
                                      ": its sandbox " + i->first +
                                      " is being stopped; retry once "
                                      "it is gone for a new one"},
                                   {"sandbox_id", i->first},
                                   {"state", "stopping"}}}}));
          return true;
        }
        answer(self, slot, json_reply(200, created_json(i->first, i->second)));
        return true;
      }
    }
  }
  if (st.draining) {
    answer(self, slot,
           error_reply(503, "draining", "draining: no new sandboxes"));
    return true;
  }
  if (auto n = st.per_owner.find(call.owner);
      n != st.per_owner.end() && n->second >= st.opts.max_per_owner) {
    auto r = error_reply(429, "too_many_sandboxes",
                         "at most " + std::to_string(st.opts.max_per_owner) +
                           " live sandboxes per token");
    r.headers.emplace_back("Retry-After", "1");
    answer(self, slot, std::move(r));
    return true;
  }
  return false;
}

/// Ends create `n`'s bookkeeping; whether its caller already heard 504.
bool take_create(api_ptr self, uint64_t n) {
  auto& st = self->state;
  --st.creating;
  auto i = st.creates.find(n);
  if (i == st.creates.end())
    return true;
  auto expired = i->second.expired;
  st.creates.erase(i);
  return expired;
}

/// The provider made the sandbox: it gets its public id, its TTL starts.
/// Made after its caller's deadline, or with nobody waiting for it (and no
/// key to fetch it by), it is stopped at once: nobody could ever use it.
void on_created(api_ptr self, uint64_t n, const std::string& owner,
                std::optional<owner_key> key, double ttl, sandbox_handle& h,
                uint64_t slot) {
  auto& st = self->state;
  auto expired = take_create(self, n);
  if (expired)
    key.reset(); // forgotten at the deadline (maybe taken again since)
  auto id = fresh_sandbox_id();
  api_sandbox sb;
  sb.owner = owner;
  sb.handle = std::move(h);
  sb.ttl_s = ttl;
  sb.idempotency_key = key ? key->second : std::string{};
  sb.last_used = clock::now();
  sb.deadline = sb.last_used + std::chrono::duration_cast<clock::duration>(
                                 std::chrono::duration<double>(ttl));
  auto created = created_json(id, sb);
  st.live.emplace(id, std::move(sb));
  publish_live(self);
  keyed_create* kc = nullptr;
  bool waited = !expired && waited_for(self, slot);
  if (key) {
    kc = &st.keys[*key];
    kc->id = id;
    for (auto w : kc->waiters)
      waited = waited || waited_for(self, w);
  }
  if (!expired)
    answer_create(self, kc, slot, std::nullopt, created);
  if (kc)
    kc->waiters.clear();
  if (expired || (!waited && !key)) {
    spdlog::info("sandbox {} made {}: stopping it", id,
                 expired ? "after its create's deadline"
                         : "for a client that went away");
    if (st.counters)
      ++st.counters->api.unclaimed;
    stop_sandbox(self, id);
  } else if (st.finishing) {
    stop_sandbox(self, id);
  }
}

void on_create_failed(api_ptr self, uint64_t n, const std::string& owner,
                      const std::optional<owner_key>& key,
                      const caf::error& err, uint64_t slot) {
  auto& st = self->state;
  auto expired = take_create(self, n);
  if (--st.per_owner[owner] == 0)
    st.per_owner.erase(owner);
  if (expired) {
    // Its caller heard 504 already; its key was forgotten then.
    if (err == caf::sec::request_timeout)
      spdlog::warn("a create got no answer within {} ms after its deadline: "
                   "a sandbox it made late is the provider's TTL's",
                   st.opts.call_timeout.count());
    return maybe_finish(self);
  }
  std::optional<keyed_create> kc;
  if (key) {
    if (auto k = st.keys.find(*key); k != st.keys.end()) {
      kc = std::move(k->second);
      st.keys.erase(k);
    }
  }
  answer_create(self, kc ? &*kc : nullptr, slot,
                provider_failure(err, "create"), json{});
  maybe_finish(self);
}

void start_create(api_ptr self, const sandbox_call& call, sandbox_spec spec,
                  const std::string& fingerprint, uint64_t slot) {
  if (answered_without_create(self, call, fingerprint, slot))
    return;
  auto& st = self->state;
  auto& opts = st.opts;
  if (!(spec.ttl_s > 0))
    spec.ttl_s = opts.default_ttl_s;
  spec.ttl_s = std::min(spec.ttl_s, opts.max_ttl_s);
  // The provider's patience is ours: up to the end of the late window (a
  // sandbox made in it is still stopped here).
  auto patience =
    std::chrono::duration<double>(opts.create_timeout + opts.call_timeout)
      .count();
  if (!(spec.create_deadline_s > 0) || spec.create_deadline_s > patience)
    spec.create_deadline_s = patience;
  ++st.per_owner[call.owner];
  ++st.creating;
  std::optional<owner_key> key;
  if (call.has_idempotency_key) {
    key.emplace(call.owner, call.idempotency_key);
    st.keys[*key] = keyed_create{fingerprint, {}, {}};
  }
  if (st.counters)
    ++st.counters->api.created;
  auto ttl = spec.ttl_s;
  auto owner = call.owner;
  auto n = st.next_create++;
  st.creates.emplace(
    n, pending_create{clock::now() + opts.create_timeout, slot, key, false});
  // The caller hears 504 at create_timeout (the reaper's tick); the create
  // is awaited call_timeout longer, so a late sandbox is still stopped.
  self
    ->request(st.provider(), opts.create_timeout + opts.call_timeout,
              create_atom::value, std::move(spec))
    .then(
      [=](sandbox_handle& h) { on_created(self, n, owner, key, ttl, h, slot); },
      [=](caf::error& err) {
        on_create_failed(self, n, owner, key, err, slot);
      });
}

/// Creates past their caller's deadline: 504 to the caller and its key's
/// joiners, the key forgotten (a retry creates anew); the create itself is
/// still awaited.
void expire_creates(api_ptr self, clock::time_point now) {
  auto& st = self->state;
  for (auto& [n, pc] : st.creates) {
    if (pc.expired || now < pc.deadline)
      continue;
    pc.expired = true;
    auto failure =
      provider_failure(caf::make_error(caf::sec::request_timeout), "create");
    answer(self, pc.slot, failure);
    if (!pc.key)
      continue;
    if (auto k = st.keys.find(*pc.key); k != st.keys.end()) {
      auto waiters = std::move(k->second.waiters);
      st.keys.erase(k);
      for (auto w : waiters)
        answer(self, w, failure);
    }
  }
}

// -- the calls ----------------------------------------------------------------

json_limits limits_of(const sandbox_api_options& opts) {
  json_limits l;
  l.max_depth = opts.max_json_depth;
  l.max_values = opts.max_json_values;
  l.max_bytes = opts.max_body_bytes;
  return l;
}

/// Parses a body; on failure answers 400 and returns false.
bool parse_body(api_ptr self, const std::string& body, json& out,
                uint64_t slot) {
  if (auto err = parse_bounded(body, out, limits_of(self->state.opts));
      !err.empty()) {
    answer(self, slot,
           error_reply(400, "invalid_request", "body is not JSON: " + err));
    return false;
  }
  return true;
}

sandbox_reply schema_error(const std::exception& e) {
  return error_reply(400, "invalid_request", e.what());
}

/// The reply handler of a failed provider call on sandbox `id`.
auto failure_handler(api_ptr self, std::string id, uint64_t slot,
                     const char* what) {
  return [=](caf::error& err) {
    release(self, id, slot, provider_failure(err, what));
  };
}

void call_status(api_ptr self, const std::string& id, api_sandbox& sb,
                 uint64_t slot) {
  ++sb.busy;
  self
    ->request(self->state.provider(), self->state.opts.call_timeout,
              status_atom::value, sb.handle)
    .then(
      [=](sandbox_status s) {
        release(self, id, slot, json_reply(200, json{{"status", s}}));
      },
      failure_handler(self, id, slot, "status"));
}

/// An upload of raw bytes: `PUT .../files?path=P` with Content-Type
/// application/octet-stream writes the body as the file P (relative to the
/// sandbox's workdir, or absolute in the sandbox).
bool read_raw_upload(sandbox_call& call, const std::string& query,
                     std::string& dir, file_map& files,
                     sandbox_reply& refusal) {
  std::string path;
  if (!query_value(query, "path", path) || path.empty()) {
    refusal = error_reply(400, "invalid_request",
                          "an application/octet-stream upload names its file "
                          "as ?path=FILE (percent-encoded)");
    return false;
  }
  if (!sv::is_path_in_sandbox(path)) {
    refusal = error_reply(400, "invalid_path",
                          "path \"" + path +
                            "\" escapes the sandbox (a '.', '..' or empty "
                            "component)");
    return false;
  }
  auto slash = path.rfind('/');
  if (slash == 0) {
    refusal = error_reply(400, "invalid_path",
                          "path \"" + path +
                            "\" is not a file in a directory of the "
                            "sandbox");
    return false;
  }
  if (slash != std::string::npos) {
    dir = path.substr(0, slash);
    path.erase(0, slash + 1);
  }
  files.emplace(std::move(path), std::move(call.body));
  return true;
}

void call_upload(api_ptr self, const std::string& id, api_sandbox& sb,
                 sandbox_call& call, const std::string& query, uint64_t slot) {
  std::string dir;
  file_map files;
  if (is_media_type(call.content_type, "application/octet-stream")) {
    sandbox_reply refusal;
    if (!read_raw_upload(call, query, dir, files, refusal))
      return answer(self, slot, std::move(refusal));
  } else {
    json j;
    if (!parse_body(self, call.body, j, slot))
      return;
    try {
      check_object(j, "upload", {"dir", "files"});
      if (!j.contains("files"))
        throw json_error("files", "is required");
      dir = j.value("dir", std::string{});
      try {
        files_from_json(j.at("files"), files);
      } catch (const json_error& e) {
        throw json_error("files" + std::string{e.path().empty() ? "" : "."} +
                           e.path(),
                         e.reason());
      }
    } catch (const std::exception& e) {
      return answer(self, slot, schema_error(e));
    }
  }
  ++sb.busy;
  self
    ->request(self->state.provider(), self->state.opts.call_timeout,
              upload_atom::value, sb.handle, std::move(dir), std::move(files))
    .then([=](ok_atom) { release(self, id, slot, no_content()); },
          failure_handler(self, id, slot, "upload"));
}

void call_exec(api_ptr self, const std::string& id, api_sandbox& sb,
               const std::string& body, uint64_t slot) {
  json j;
  if (!parse_body(self, body, j, slot))
    return;
  exec_request req;
  try {
    req = j.get<exec_request>();
  } catch (const std::exception& e) {
    return answer(self, slot, schema_error(e));
  }
  auto& opts = self->state.opts;
  auto limit = req.timeout_s > 0 && req.timeout_s < opts.max_exec_s
                 ? req.timeout_s
                 : opts.max_exec_s;
  auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::duration<double>(limit)) +
                 opts.exec_grace;
  ++sb.busy;
  self
    ->request(self->state.provider(), timeout, exec_atom::value, sb.handle,
              std::move(req))
    .then(
      [=](exec_result& r) {
        release(self, id, slot, json_reply(200, json(r)));
      },
      failure_handler(self, id, slot, "exec"));
}

void call_download(api_ptr self, const std::string& id, api_sandbox& sb,
                   const std::string& query, uint64_t slot) {
  std::string path;
  if (!query_value(query, "path", path) || path.empty())
    return answer(self, slot,
                  error_reply(400, "invalid_request",
                              "expected ?path=FILE (percent-encoded)"));
  ++sb.busy;
  self
    ->request(self->state.provider(), self->state.opts.call_timeout,
              download_atom::value, sb.handle, std::move(path))
    .then(
      [=](std::string& bytes) {
        sandbox_reply r;
        r.body = std::move(bytes);
        r.content_type = "application/octet-stream";
        release(self, id, slot, std::move(r));
      },
      failure_handler(self, id, slot, "download"));
}

/// A call on one sandbox: only its owner sees it.
void on_sandbox_call(api_ptr self, sandbox_call& call, const sandbox_target& t,
                     uint64_t slot) {
  auto& st = self->state;
  auto i = st.live.find(t.id);
  if (i == st.live.end() || i->second.owner != call.owner) {
    if (t.what == op::stop && i == st.live.end()) {
      auto ts = st.tombstones.find(t.id);
      if (ts != st.tombstones.end() && ts->second == call.owner)
        return answer(self, slot, no_content());
    }
    return answer(self, slot, no_such_sandbox(t.id));
  }
  auto& sb = i->second;
  if (t.what == op::stop) {
    sb.stop_waiters.push_back(slot);
    return stop_sandbox(self, t.id);
  }
  if (sb.stopping)
    return answer(self, slot, no_such_sandbox(t.id));
  switch (t.what) {
  case op::status:
    return call_status(self, t.id, sb, slot);
  case op::upload:
    return call_upload(self, t.id, sb, call, t.query, slot);
  case op::exec:
    return call_exec(self, t.id, sb, call.body, slot);
  case op::download:
    return call_download(self, t.id, sb, t.query, slot);
  default:
    return answer(self, slot, no_such_sandbox(t.id));
  }
}

void on_call(api_ptr self, sandbox_call& call, uint64_t slot) {
  auto t = parse_sandbox_target(call.method, call.target);
  if (*t.allow == '\0')
    return answer(self, slot,
                  error_reply(404, "no_such_endpoint", "no such endpoint"));
  if (t.what == op::none) {
    auto r = error_reply(405, "method_not_allowed",
                         call.method + " is not allowed here");
    r.headers.emplace_back("Allow", t.allow);
    return answer(self, slot, std::move(r));
  }
  if (self->state.finishing)
    return answer(self, slot,
                  error_reply(503, "draining", "sv-serve is stopping"));
  if (t.what != op::create)
    return on_sandbox_call(self, call, t, slot);
  if (call.has_idempotency_key && !valid_idempotency_key(call.idempotency_key))
    return answer(self, slot,
                  error_reply(400, "invalid_request",
                              "Idempotency-Key: 1 to " +
                                std::to_string(max_idempotency_key) +
                                " characters of [A-Za-z0-9._:-]"));
  json j;
  if (!parse_body(self, call.body, j, slot))
    return;
  sandbox_spec spec;
  try {
    spec = j.get<sandbox_spec>();
  } catch (const std::exception& e) {
    return answer(self, slot, schema_error(e));
  }
  start_create(self, call, std::move(spec),
               j.dump(-1, ' ', false, json::error_handler_t::replace), slot);
}

void reap(api_ptr self) {
  auto& st = self->state;
  auto now = clock::now();
  expire_creates(self, now);
  auto idle = std::chrono::duration_cast<clock::duration>(
    std::chrono::duration<double>(st.opts.idle_timeout_s));
  std::vector<std::string> due;
  for (auto& [id, sb] : st.live) {
    if (sb.stopping || now < sb.next_stop)
      continue;
    bool expired = now >= sb.deadline;
    bool abandoned = sb.busy == 0 && now - sb.last_used >= idle;
    if (expired || abandoned)
      due.push_back(id);
  }
  for (auto& id : due) {
    spdlog::info("reaping sandbox {} ({})", id,
                 now >= st.live.at(id).deadline ? "TTL" : "idle");
    if (st.counters)
      ++st.counters->api.reaped;
    stop_sandbox(self, id);
  }
}

caf::behavior api_actor(api_ptr self, std::shared_ptr<inbox> in) {
  self->set_default_handler(sv::log_and_drop_unexpected);
  self->state.in = in;
  self->delayed_send(self, self->state.opts.reap_interval, reap_atom::value);
  return {
    [=](work_atom) {
      std::deque<std::pair<sandbox_call, sandbox_reply_fn>> calls;
      {
        std::lock_guard<std::mutex> guard{in->mtx};
        calls.swap(in->calls);
      }
      std::vector<uint64_t> abandoned;
      {
        std::lock_guard<std::mutex> guard{in->mtx};
        abandoned.swap(in->abandoned);
      }
      for (auto& [call, fn] : calls) {
        auto slot = hold(self, call.call_id, std::move(fn));
        // An exception would kill the owner of every sandbox: answer 500.
        try {
          on_call(self, call, slot);
        } catch (const std::exception& e) {
          spdlog::error("sandbox API: {} {}: {}", call.method, call.target,
                        e.what());
          answer(self, slot, error_reply(500, "internal", e.what()));
        }
      }
      // (After the calls: a call is always handed over before its abandon.)
      for (auto id : abandoned)
        self->state.slots.erase(id);
    },
    [=](reap_atom) {
      if (self->state.finishing)
        return;
      reap(self);
      self->delayed_send(self, self->state.opts.reap_interval,
                         reap_atom::value);
    },
    [=](drain_atom) { self->state.draining = true; },
    [=](finish_atom) {
      auto& st = self->state;
      st.draining = st.finishing = true;
      std::vector<std::string> ids;
      for (auto& [id, sb] : st.live)
        ids.push_back(id);
      for (auto& id : ids)
        stop_sandbox(self, id);
      maybe_finish(self);
    },
    [=](abort_atom) {
      self->state.slots.clear();
      self->quit();
    },
  };
}

} // namespace

struct sandbox_api::impl {
  std::shared_ptr<inbox> in = std::make_shared<inbox>();
  std::shared_future<void> finished = in->finished.get_future().share();
  caf::actor actor;
};

sandbox_api::sandbox_api(caf::actor_system& sys,
                         std::function<provider_actor()> provider,
                         sandbox_api_options opts, metrics* counters)
    : impl_(std::make_unique<impl>()) {
  auto in = impl_->in;
  impl_->actor = sys.spawn(
    [provider, opts, counters](api_ptr self,
                               std::shared_ptr<inbox> in) -> caf::behavior {
      self->state.provider = provider;
      self->state.opts = opts;
      self->state.counters = counters;
      return api_actor(self, std::move(in));
    },
    in);
  impl_->actor->attach_functor([in] {
    {
      std::lock_guard<std::mutex> guard{in->mtx};
      in->calls.clear();
    }
    if (!in->done.exchange(true))
      in->finished.set_value();
  });
}

sandbox_api::~sandbox_api() {
  if (!ended())
    shut_down(std::chrono::seconds{10});
}

uint64_t sandbox_api::handle(sandbox_call call, sandbox_reply_fn done) {
  auto& in = *impl_->in;
  auto id = call.call_id = in.next_call++;
  {
    std::lock_guard<std::mutex> guard{in.mtx};
    if (!in.done) {
      in.calls.emplace_back(std::move(call), std::move(done));
      done = nullptr;
    }
  }
  if (done) {
    done(error_reply(503, "draining", "sv-serve is stopping"));
    return id;
  }
  caf::anon_send(impl_->actor, work_atom::value);
  return id;
}

void sandbox_api::abandon(uint64_t id) {
  auto& in = *impl_->in;
  {
    std::lock_guard<std::mutex> guard{in.mtx};
    if (in.done)
      return;
    in.abandoned.push_back(id);
  }
  caf::anon_send(impl_->actor, work_atom::value);
}

void sandbox_api::drain() {
  caf::anon_send(impl_->actor, drain_atom::value);
}

bool sandbox_api::shut_down(std::chrono::milliseconds timeout) {
  begin_shut_down();
  return wait_shut_down(timeout);
}

void sandbox_api::begin_shut_down() {
  caf::anon_send(impl_->actor, finish_atom::value);
}

bool sandbox_api::wait_shut_down(std::chrono::milliseconds timeout) {
  auto& fut = impl_->finished;
  if (fut.wait_for(timeout) == std::future_status::ready)
    return true;
  spdlog::warn("the sandbox API did not stop its sandboxes within {} ms "
               "(their TTLs will)",
               timeout.count());
  caf::anon_send(impl_->actor, abort_atom::value);
  fut.wait_for(std::chrono::seconds{5});
  return false;
}

bool sandbox_api::ended() const {
  return impl_->in->done;
}

} // namespace sv::serve
