#include "messages/errors.hpp"
#include "messages/json.hpp"
#include "messages/validation.hpp"
#include "providers/local.hpp"
#include "providers/local/host/process.hpp"
#include "providers/local/isolation.hpp"
#include "providers/local/reaper.hpp"
#include "providers/local/registry.hpp"

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/response_promise.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>
#include <unordered_map>
#include <unordered_set>

namespace sv {

// -- the provider actor -------------------------------------------------------

namespace {

using detail::expired_atom;
using detail::io_done_atom;

/// A request waiting for its I/O.
struct pending_call {
  caf::response_promise rp;
  /// For create: the sandbox that exists once the I/O succeeded.
  std::string created;
};

struct local_state {
  static inline const char* name = "sv.local_provider";

  /// Declared first, destroyed last: its destructor kills and removes every
  /// sandbox, then joins the I/O threads.
  std::unique_ptr<detail::local_runtime> runtime;
  /// Sandboxes created and not yet stopped.
  std::unordered_set<std::string> live;
  std::unordered_map<uint64_t, pending_call> pending;
  uint64_t next_request = 1;
  uint64_t next_sandbox = 1;
  std::mt19937_64 rng{std::random_device{}()};

  /// Unique across restarts too: pid and start time of this process (the
  /// reaper's proof of ownership), counter and random bits.
  std::string new_id() {
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx",
                  static_cast<unsigned long long>(rng()));
    return "sb-" + detail::instance_tag() + "-" +
           std::to_string(next_sandbox++) + "-" + std::string{hex, 8};
  }

  uint64_t track(caf::response_promise rp, std::string created = {}) {
    auto req = next_request++;
    pending.emplace(req, pending_call{std::move(rp), std::move(created)});
    return req;
  }

  caf::error check_live(const sandbox_handle& h) const {
    if (live.count(h.sandbox_id) == 0)
      return make_error(provider_errc::no_such_sandbox,
                        "no sandbox " + h.sandbox_id +
                          " (never created, or stopped)");
    return caf::none;
  }
};

using local_actor = caf::stateful_actor<local_state>;

caf::error check_path(std::string_view what, const std::string& path) {
  if (is_confined_path(path))
    return caf::none;
  return make_error(provider_errc::invalid_path,
                    std::string{what} + " \"" + path +
                      "\" escapes the sandbox (absolute, empty, '.' or "
                      "'..' component)");
}

caf::error check_env(const env_map& env) {
  for (auto& [k, v] : env)
    if (k.empty() ||
        k.find_first_of(std::string{"=\0", 2}) != std::string::npos ||
        v.find('\0') != std::string::npos)
      return make_error(provider_errc::invalid_argument,
                        "env: invalid variable \"" + k + "\"");
  return caf::none;
}

caf::error check_exec(const exec_request& x) {
  if (x.argv.empty() || x.argv.front().empty())
    return make_error(provider_errc::invalid_argument,
                      "argv: must name a program");
  if (!(x.timeout_s > 0) || x.timeout_s > max_timeout_s)
    return make_error(provider_errc::invalid_argument,
                      "timeout_s: must be a number of seconds in (0, "
                      "604800]");
  if (!x.cwd.empty())
    if (auto err = check_path("cwd", x.cwd))
      return err;
  if (!x.log_path.empty())
    if (auto err = check_path("log_path", x.log_path))
      return err;
  return check_env(x.env);
}

caf::error check_spec(const sandbox_spec& spec) {
  auto invalid = [](const char* what) {
    return make_error(provider_errc::invalid_argument, what);
  };
  if (!(spec.ttl_s >= 0) || spec.ttl_s > max_timeout_s)
    return invalid("ttl_s: must be 0 (none) or seconds up to 604800");
  auto& res = spec.resources;
  if (!(res.cpu >= 0) || res.cpu > 1024)
    return invalid("resources.cpu: must be 0 (unset) or cpus up to 1024");
  if (res.memory_mib < 0 || res.memory_mib > (int64_t{1} << 24))
    return invalid("resources.memory_mib: must be 0 (unset) or MiB up to "
                   "16777216");
  if (!(res.disk_gib >= 0) || res.disk_gib > 16384)
    return invalid("resources.disk_gib: must be 0 (unset) or GiB up to 16384");
  return check_env(spec.env);
}

caf::error check_upload(const std::string& dir, const file_map& files) {
  if (!dir.empty())
    if (auto err = check_path("dir", dir))
      return err;
  for (auto& entry : files)
    if (auto err = check_path("path", entry.first))
      return err;
  return caf::none;
}

/// Answers `rp` with `err` when set; true if it did.
bool refuse(caf::response_promise& rp, caf::error err) {
  if (!err)
    return false;
  rp.deliver(std::move(err));
  return true;
}

void on_io_done(local_actor* self, uint64_t req, caf::message& reply) {
  auto& st = self->state;
  auto i = st.pending.find(req);
  if (i == st.pending.end()) {
    // A stop the provider started itself (TTL) has no requester.
    if (reply.match_elements<caf::error>())
      spdlog::warn("local provider: {}", describe(reply.get_as<caf::error>(0)));
    return;
  }
  auto call = std::move(i->second);
  st.pending.erase(i);
  if (reply.match_elements<caf::error>())
    return call.rp.deliver(reply.get_as<caf::error>(0));
  if (!call.created.empty()) {
    st.live.insert(call.created);
    return call.rp.deliver(sandbox_handle{call.created, "local", ""});
  }
  call.rp.deliver(std::move(reply));
}

/// Answers at once when the sandbox is unknown or `err` is set; otherwise
/// hands the request to `start` with the id its I/O reply will carry.
template <class F>
caf::response_promise start_call(local_actor* self, const sandbox_handle& h,
                                 caf::error err, F start) {
  auto rp = self->make_response_promise();
  if (refuse(rp, self->state.check_live(h)) || refuse(rp, std::move(err)))
    return rp;
  start(self->state.track(rp));
  return rp;
}

void on_expired(local_actor* self, const std::string& id) {
  if (self->state.live.erase(id) == 0)
    return;
  spdlog::warn("local provider: sandbox {} outlived its TTL, stopping it", id);
  self->state.runtime->stop(0, id);
}

void on_exit_msg(local_actor* self, caf::exit_msg& msg) {
  if (!msg.reason)
    return;
  // No broken_promise in CAF 0.17: fail waiting requesters now rather
  // than at their timeouts.
  for (auto& entry : self->state.pending)
    entry.second.rp.deliver(make_error(provider_errc::unavailable,
                                       "the local provider is shutting down"));
  self->state.pending.clear();
  self->quit(std::move(msg.reason));
}

caf::behavior local_provider(local_actor* self, detail::runtime_settings cfg) {
  self->state.runtime =
    std::make_unique<detail::local_runtime>(std::move(cfg), self->address());
  self->set_exit_handler(
    [self](caf::exit_msg& msg) { on_exit_msg(self, msg); });
  return {
    [self](create_atom, sandbox_spec& spec) {
      auto rp = self->make_response_promise();
      if (refuse(rp, check_spec(spec)))
        return rp;
      auto& st = self->state;
      auto id = st.new_id();
      st.runtime->create(st.track(rp, id), id, spec);
      return rp;
    },
    [self](status_atom,
           const sandbox_handle& h) -> caf::result<sandbox_status> {
      if (auto err = self->state.check_live(h))
        return err;
      return sandbox_status::running;
    },
    [self](upload_atom, const sandbox_handle& h, std::string& dir,
           file_map& files) {
      return start_call(self, h, check_upload(dir, files), [&](auto req) {
        self->state.runtime->upload(req, h.sandbox_id, std::move(dir),
                                    std::move(files));
      });
    },
    [self](exec_atom, const sandbox_handle& h, exec_request& x) {
      return start_call(self, h, check_exec(x), [&](auto req) {
        self->state.runtime->exec(req, h.sandbox_id, std::move(x));
      });
    },
    [self](download_atom, const sandbox_handle& h, std::string& path) {
      return start_call(self, h, check_path("path", path), [&](auto req) {
        self->state.runtime->download(req, h.sandbox_id, std::move(path));
      });
    },
    [self](stop_atom, const sandbox_handle& h) {
      return start_call(self, h, caf::none, [&](auto req) {
        // Gone for every later call at once, even while the kill runs.
        self->state.live.erase(h.sandbox_id);
        self->state.runtime->stop(req, h.sandbox_id);
      });
    },
    [self](io_done_atom, uint64_t req, caf::message& reply) {
      on_io_done(self, req, reply);
    },
    [self](expired_atom, const std::string& id) { on_expired(self, id); },
  };
}

std::string default_root() {
  const char* tmp = std::getenv("TMPDIR");
  std::string base = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  return base + "/sv-sandboxes";
}

std::string prepare_root(const std::string& configured) {
  namespace fs = std::filesystem;
  std::error_code ec;
  auto root = fs::absolute(configured.empty() ? default_root() : configured, ec)
                .lexically_normal()
                .string();
  while (root.size() > 1 && root.back() == '/')
    root.pop_back();
  bool created = fs::create_directories(root, ec);
  if (ec || !fs::is_directory(root, ec))
    throw std::runtime_error("local provider: cannot create the sandbox root " +
                             root + (ec ? ": " + ec.message() : "") +
                             "; set the provider's \"root\" setting to a "
                             "writable directory");
  // Sandboxes of several users must not see each other.
  if (created)
    ::chmod(root.c_str(), 0700);
  return root;
}

} // namespace

provider_actor spawn_local_provider(caf::actor_system& sys,
                                    local_provider_config cfg) {
  if (cfg.io_threads == 0)
    throw std::runtime_error("local provider: io_threads must be at least 1");
  detail::runtime_settings settings;
  settings.root = prepare_root(cfg.root);
  settings.python_name = cfg.python;
  // Once, here, on the caller's thread: never on a scheduler thread.
  auto python = detail::resolve_python_install(cfg.python);
  settings.python_path = python.executable;
  settings.max_download_bytes = cfg.max_download_bytes;
  settings.io_threads = cfg.io_threads;
  auto iso = detail::prepare_isolation(cfg, settings.root, python);
  if (auto n = detail::reap_orphans(settings.root, iso.cgroups); n > 0)
    spdlog::warn("local provider: reaped {} sandboxes left by an earlier run "
                 "that did not stop them",
                 n);
  spdlog::info("local provider: root {}, python {}", settings.root,
               settings.python_path);
  detail::log_isolation(iso);
  settings.isolation =
    std::make_shared<const detail::isolation_settings>(std::move(iso));
  return caf::actor_cast<provider_actor>(
    sys.spawn(local_provider, std::move(settings)));
}

} // namespace sv
