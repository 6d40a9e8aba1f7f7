// The local provider actor: a thin layer over the registry. It checks each
// call, hands it to the registry with a typed completion that comes back as
// a message to this actor, and delivers the requester's promise here, on
// its own thread (CAF 0.17: never from a foreign thread). It owns those
// promises, so it fails them when it exits (there is no broken_promise).

// clang-format off
// First: caf/result.hpp (included by the headers below) needs it declared.
#include <caf/make_message.hpp>
// clang-format on

#include "actors/detail/quiet.hpp"
#include "messages/bounded_json.hpp"
#include "messages/errors.hpp"
#include "messages/json.hpp"
#include "messages/validation.hpp"
#include "providers/detail/pending_calls.hpp"
#include "providers/local.hpp"
#include "providers/local/detail/host/process.hpp"
#include "providers/local/detail/host/trusted_dir.hpp"
#include "providers/local/detail/image/store.hpp"
#include "providers/local/detail/isolation.hpp"
#include "providers/local/detail/reaper.hpp"
#include "providers/local/detail/registry.hpp"
#include "providers/local/detail/sandbox/launch_plan.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <caf/actor.hpp>
#include <caf/actor_cast.hpp>
#include <caf/actor_clock.hpp>
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/response_promise.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <list>
#include <memory>
#include <mutex>
#include <openssl/evp.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>
#include <unordered_map>

namespace sv {

namespace {

/// Tags the completion of a call the registry ran: `(io_done_atom, call,
/// T)` with the typed result, or `(io_done_atom, call, caf::error)`.
using io_done_atom = caf::atom_constant<caf::atom("io_done")>;

// -- checks before any I/O ----------------------------------------------------

/// A path relative to the sandbox's workdir (`relative_only`), or also an
/// absolute one in the sandbox (the registry says whether it is a place the
/// sandbox may write: detail/sandbox/places.hpp).
caf::error check_path(std::string_view what, const std::string& path,
                      bool relative_only = false) {
  if (relative_only ? is_confined_path(path) : is_path_in_sandbox(path))
    return caf::none;
  return make_error(provider_errc::invalid_path,
                    std::string{what} + " \"" + path +
                      (relative_only ? "\" escapes the sandbox (absolute, "
                                       "empty, '.' or '..' component)"
                                     : "\" escapes the sandbox (empty, '.' "
                                       "or '..' component)"));
}

caf::error check_env(const env_map& env) {
  for (auto& [k, v] : env)
    if (k.empty() ||
        k.find_first_of(std::string{"=\0", 2}) != std::string::npos ||
        v.find('\0') != std::string::npos)
      return make_error(provider_errc::invalid_argument,
                        "env: invalid variable \"" + k + "\"");
    else if (is_loader_variable(k))
      return make_error(provider_errc::invalid_argument,
                        "env: \"" + k +
                          "\" steers the dynamic loader or libc and may not "
                          "be set");
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

/// A number as a person writes it (no trailing zeros).
std::string number_text(double x) {
  auto text = std::to_string(x);
  while (!text.empty() && text.back() == '0')
    text.pop_back();
  if (!text.empty() && text.back() == '.')
    text.pop_back();
  return text;
}

/// Every field of a spec is honoured or refused here: the local provider
/// pulls an `image` at create (its form checked here), takes no provider
/// options and has no GPUs, and what a spec asks for stays under the provider's
/// ceilings.
caf::error check_spec(const sandbox_spec& spec, const local_ceilings& max) {
  auto invalid = [](std::string what) {
    return make_error(provider_errc::invalid_argument, std::move(what));
  };
  if (!(spec.ttl_s >= 0) || spec.ttl_s > max_timeout_s)
    return invalid("ttl_s: must be 0 (none) or seconds up to 604800");
  if (!spec.image.empty())
    try {
      detail::parse_image_ref(spec.image);
    } catch (const std::exception& e) {
      return invalid(e.what());
    }
  if (spec.provider_options.is_object() && !spec.provider_options.empty()) {
    std::string keys;
    for (auto& item : spec.provider_options.items())
      keys += (keys.empty() ? "" : ", ") + item.key();
    return invalid("provider_options: the local provider takes none (got " +
                   truncate_for_message(keys) + ")");
  }
  if (!spec.provider_options.is_null() && !spec.provider_options.is_object())
    return invalid("provider_options: expected an object");
  auto& res = spec.resources;
  if (!(res.cpu >= 0) || res.cpu > max.max_cpu)
    return invalid("resources.cpu: " + number_text(res.cpu) +
                   " is above this provider's max_cpu " +
                   number_text(max.max_cpu) + " (0: unset)");
  if (res.memory_mib < 0 ||
      static_cast<uint64_t>(res.memory_mib) > max.max_memory_mib)
    return invalid("resources.memory_mib: " + std::to_string(res.memory_mib) +
                   " is above this provider's max_memory_mib " +
                   std::to_string(max.max_memory_mib) + " (0: unset)");
  if (!(res.disk_gib >= 0) ||
      res.disk_gib * 1024 > static_cast<double>(max.max_disk_mib))
    return invalid("resources.disk_gib: " + number_text(res.disk_gib) +
                   " GiB is above this provider's max_disk_mib " +
                   std::to_string(max.max_disk_mib) + " (0: unset)");
  if (res.gpu != 0 || !res.gpu_type.empty())
    return invalid(
      std::string{res.gpu != 0 ? "resources.gpu" : "resources.gpu_type"} +
      ": the local provider has no GPUs");
  return check_env(spec.env);
}

caf::error check_upload(const std::string& dir, const file_map& files) {
  if (!dir.empty())
    if (auto err = check_path("dir", dir))
      return err;
  for (auto& entry : files)
    if (auto err = check_path("path", entry.first, true))
      return err;
  return caf::none;
}

// -- the actor ----------------------------------------------------------------

struct local_state {
  static inline const char* name = "sv.local_provider";

  std::shared_ptr<local_registry> registry;
  /// This actor's token in the registry.
  uint64_t owner = 0;
  /// Requesters waiting for the registry, by call.
  pending_calls<io_done_atom> pending;
  /// The create deadlines of creates in flight, by call: a sandbox made
  /// later is nobody's, so it is stopped here instead of handed out.
  std::unordered_map<uint64_t, caf::actor_clock::time_point> create_deadlines;

  local_state() = default;
  local_state(const local_state&) = delete;
  local_state& operator=(const local_state&) = delete;

  /// CAF destroys the state when the actor exits, whatever the reason (a
  /// kill and an exception too), on the actor's own thread.
  ~local_state() {
    pending.fail_all(make_error(provider_errc::unavailable,
                                "the local provider is shutting down"));
    if (registry)
      registry->leave(owner); // never blocks; the teardown runs on I/O threads
    // Dropping the reference never blocks either (make_local_registry).
  }
};

using local_actor = caf::stateful_actor<local_state>;

caf::error check_live(local_actor* self, const sandbox_handle& h) {
  if (self->state.registry->is_live(h.sandbox_id))
    return caf::none;
  return make_error(provider_errc::no_such_sandbox,
                    "no sandbox " + h.sandbox_id +
                      " (never created, or stopped)");
}

/// Answers at once when `err` is set; otherwise hands the call to `run`
/// with its completion.
template <class T, class F>
caf::result<T> call(local_actor* self, caf::error err, F run) {
  if (err)
    return err;
  auto [rp, done] = self->state.pending.template start<T>(self);
  run(std::move(done));
  return caf::result<T>{caf::delegated<T>{}};
}

caf::behavior local_provider(local_actor* self,
                             std::shared_ptr<local_registry> registry) {
  self->set_default_handler(log_and_drop_unexpected);
  auto& st = self->state;
  st.owner = registry->join();
  st.registry = std::move(registry);
  return {
    [self](create_atom,
           const sandbox_spec& spec) -> caf::result<sandbox_handle> {
      if (auto err = check_spec(spec, self->state.registry->ceilings()))
        return err;
      // From the create's arrival when its requester stamped it, else from
      // now: past it nobody waits for the sandbox any more.
      auto now = self->clock().now();
      auto deadline = create_deadline(spec, now);
      if (now > deadline)
        return make_error(provider_errc::sandbox_error,
                          "create: dequeued after its deadline, nobody "
                          "waits for it any more");
      if (deadline != caf::actor_clock::time_point::max())
        self->state.create_deadlines.emplace(self->state.pending.next(),
                                             deadline);
      return call<sandbox_handle>(self, caf::none, [&](auto done) {
        self->state.registry->create(self->state.owner, spec, std::move(done));
      });
    },
    [self](status_atom,
           const sandbox_handle& h) -> caf::result<sandbox_status> {
      if (auto err = check_live(self, h))
        return err;
      return sandbox_status::running;
    },
    [self](upload_atom, const sandbox_handle& h, std::string& dir,
           file_map& files) {
      auto err = check_upload(dir, files);
      return call<ok_atom>(self, std::move(err), [&](auto done) {
        self->state.registry->upload(h.sandbox_id, std::move(dir),
                                     std::move(files), std::move(done));
      });
    },
    [self](exec_atom, const sandbox_handle& h, exec_request& x) {
      return call<exec_result>(self, check_exec(x), [&](auto done) {
        self->state.registry->exec(h.sandbox_id, std::move(x), std::move(done));
      });
    },
    [self](download_atom, const sandbox_handle& h, std::string& path) {
      auto err = check_path("path", path);
      return call<std::string>(self, std::move(err), [&](auto done) {
        self->state.registry->download(h.sandbox_id, std::move(path),
                                       std::move(done));
      });
    },
    [self](stop_atom, const sandbox_handle& h) {
      return call<ok_atom>(self, caf::none, [&](auto done) {
        self->state.registry->stop(h.sandbox_id, std::move(done));
      });
    },
    [self](io_done_atom, uint64_t call, sandbox_handle& h) {
      auto& deadlines = self->state.create_deadlines;
      if (auto i = deadlines.find(call); i != deadlines.end()) {
        auto deadline = i->second;
        deadlines.erase(i);
        if (self->clock().now() > deadline) {
          // Made after its requester stopped waiting: handed to nobody, so
          // stopped here (the one stop it gets).
          spdlog::warn("create finished after its deadline: stopping the "
                       "sandbox {} nobody waits for",
                       h.sandbox_id);
          self->state.registry->stop(h.sandbox_id,
                                     [](caf::expected<ok_atom>) {});
          self->state.pending.finish(
            call, make_error(provider_errc::sandbox_error,
                             "create: finished after its deadline; the "
                             "sandbox was stopped"));
          return;
        }
      }
      self->state.pending.finish(call, std::move(h));
    },
    [self](io_done_atom, uint64_t call, exec_result& r) {
      self->state.pending.finish(call, std::move(r));
    },
    [self](io_done_atom, uint64_t call, std::string& text) {
      self->state.pending.finish(call, std::move(text));
    },
    [self](io_done_atom, uint64_t call, ok_atom ok) {
      self->state.pending.finish(call, ok);
    },
    [self](io_done_atom, uint64_t call, caf::error& err) {
      self->state.create_deadlines.erase(call);
      self->state.pending.finish(call, std::move(err));
    },
  };
}

// -- setting up a registry ----------------------------------------------------

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
  // Made private (0700) where absent; one made by someone else, or reached
  // through a symlink, is refused below, never trusted.
  auto parent = fs::path{root}.parent_path();
  fs::create_directories(parent, ec);
  if (::mkdir(root.c_str(), 0700) != 0 && errno != EEXIST)
    throw std::runtime_error("local provider: cannot create the sandbox root " +
                             root + ": " + std::strerror(errno) +
                             "; set the provider's \"root\" setting to a "
                             "writable directory");
  detail::open_trusted_dir(root); // throws when it cannot be trusted
  return root;
}

/// What a program file is: its real path, size, mtime and inode (a new
/// install, a switched symlink or an edited wrapper changes one of them).
json file_identity(const std::string& path) {
  char* real = ::realpath(path.c_str(), nullptr);
  if (real == nullptr)
    return json{{"path", path}, {"missing", std::strerror(errno)}};
  std::string resolved{real};
  std::free(real);
  struct stat st {};
  if (::stat(resolved.c_str(), &st) != 0)
    return json{{"path", resolved}, {"missing", std::strerror(errno)}};
  return json{
    {"path", resolved},
    {"size", static_cast<int64_t>(st.st_size)},
    {"mtime_ns",
     static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec},
    {"inode", static_cast<uint64_t>(st.st_ino)},
    {"device", static_cast<uint64_t>(st.st_dev)}};
}

/// Runs the last release of registries that were not shut down, each on a
/// thread of its own (whoever drops the last reference, a scheduler thread
/// say, never blocks), and joins those threads at the latest at exit.
class registry_releaser {
public:
  void release(local_registry* r) {
    std::lock_guard<std::mutex> guard{mtx_};
    // Join the ones that are done: their join returns at once.
    for (auto i = threads_.begin(); i != threads_.end();)
      if (*i->second) {
        i->first.join();
        i = threads_.erase(i);
      } else {
        ++i;
      }
    auto done = std::make_shared<std::atomic<bool>>(false);
    threads_.emplace_back(std::thread{[r, done] {
                            delete r;
                            *done = true;
                          }},
                          done);
  }

  ~registry_releaser() {
    for (auto& t : threads_)
      t.first.join();
  }

private:
  std::mutex mtx_;
  std::list<std::pair<std::thread, std::shared_ptr<std::atomic<bool>>>>
    threads_;
};

void release_registry(local_registry* r) {
  if (r->is_shut_down()) {
    delete r; // nothing left to wait for
    return;
  }
  static registry_releaser releaser;
  releaser.release(r);
}

} // namespace

std::shared_ptr<local_registry> make_local_registry(local_provider_config cfg) {
  if (cfg.io_threads == 0)
    throw std::runtime_error("local provider: io_threads must be at least 1");
  detail::registry_settings settings;
  settings.root = prepare_root(cfg.root);
  settings.python_name = cfg.python;
  auto python = detail::resolve_python_install(cfg.python);
  settings.python_path = python.executable;
  settings.interpreter = file_identity(python.executable);
  settings.interpreter["version"] = python.version;
  settings.max_download_bytes = cfg.max_download_bytes;
  settings.io_threads = cfg.io_threads;
  settings.stop_attempts =
    static_cast<uint32_t>(std::max<uint64_t>(1, cfg.stop_attempts));
  settings.stop_retry_delay = cfg.stop_retry_delay;
  settings.warm_pool = cfg.warm_pool;
  settings.warm_pool_start = cfg.warm_pool_start;
  settings.warm_pool_tick = cfg.warm_pool_tick;
  settings.warm_python = cfg.warm_python;
  settings.stop_fault = std::move(cfg.stop_fault);
  settings.ceilings.max_memory_mib = cfg.max_memory_mib;
  settings.ceilings.max_disk_mib = cfg.max_disk_mib;
  settings.ceilings.max_cpu =
    cfg.max_cpu > 0 ? cfg.max_cpu
                    : std::max(1u, std::thread::hardware_concurrency());
  auto iso = detail::prepare_isolation(cfg, settings.root, python);
  if (iso.mode != detail::isolation_mode::bwrap || !iso.privileged)
    settings.image_refusal =
      "the local provider runs images only under "
      "isolation \"bwrap\" as root (here: " +
      std::string{iso.mode == detail::isolation_mode::bwrap
                    ? "bwrap, not root"
                    : "isolation none"} +
      "); leave image empty for the host's view";
  else if (iso.drop.empty())
    settings.image_refusal = "the local provider runs images only with "
                             "sv-drop (built with it), not found here";
  else {
    detail::image_store_settings store;
    store.dir =
      cfg.image_store.empty() ? settings.root + "-images" : cfg.image_store;
    store.max_bytes = cfg.image_store_max_mib << 20;
    store.insecure_registries = cfg.insecure_registries;
    store.image_dirs = cfg.image_dirs;
    store.tag_ttl = std::chrono::seconds{cfg.image_tag_ttl_s};
    store.forbidden = iso.hidden;
    store.forbidden.push_back(store.dir);
    store.skopeo =
      detail::find_program("skopeo", "/usr/bin:/usr/local/bin:/bin");
    settings.images = std::make_shared<detail::image_store>(std::move(store));
    spdlog::info("local provider: images stored in {} (up to {} MiB), "
                 "pulled with {}",
                 settings.images->settings().dir, cfg.image_store_max_mib,
                 settings.images->settings().skopeo.empty()
                   ? std::string{"nothing (skopeo not installed: only root "
                                 "file system directories)"}
                   : settings.images->settings().skopeo);
  }
  auto root_fd = detail::open_trusted_dir(settings.root);
  if (auto n = detail::reap_orphans(root_fd.get(), settings.root, iso.cgroups);
      n > 0)
    spdlog::warn("local provider: reaped {} sandboxes left by an earlier run "
                 "that did not stop them",
                 n);
  spdlog::info("local provider: root {}, python {}", settings.root,
               settings.python_path);
  detail::log_isolation(iso);
  spdlog::info("local provider: a spec may ask for up to {} MiB of memory "
               "(max_memory_mib), {} MiB of disk (max_disk_mib), {} cpus "
               "(max_cpu); no provider options or GPU",
               settings.ceilings.max_memory_mib, settings.ceilings.max_disk_mib,
               settings.ceilings.max_cpu);
  settings.isolation =
    std::make_shared<const detail::isolation_settings>(std::move(iso));
  return std::shared_ptr<local_registry>(
    new local_registry(std::move(settings)), release_registry);
}

provider_actor spawn_local_provider(caf::actor_system& sys,
                                    std::shared_ptr<local_registry> registry) {
  if (!registry)
    throw std::invalid_argument("spawn_local_provider: no registry");
  return caf::actor_cast<provider_actor>(
    sys.spawn(local_provider, std::move(registry)));
}

provider_actor spawn_local_provider(caf::actor_system& sys,
                                    local_provider_config cfg) {
  return spawn_local_provider(sys, make_local_registry(std::move(cfg)));
}

void shut_down_local_registry(local_registry& registry) {
  registry.shutdown();
}

namespace {

/// An opaque digest of what identifies an interpreter (real path, size,
/// mtime, inode, device, version): it changes when any of them does and
/// gives none of them back to whoever asked for a cache key.
json digest_identity(const json& raw) {
  auto text = raw.dump();
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int len = 0;
  if (EVP_Digest(text.data(), text.size(), md.data(), &len, EVP_sha256(),
                 nullptr) != 1)
    throw std::runtime_error("local provider: sha256 failed");
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += hex[md[i] >> 4];
    out += hex[md[i] & 15];
  }
  return json{{"digest", "sha256:" + out}};
}

/// Whether `path` (absolute, normal) lies in a directory of the sandbox's
/// PATH.
bool on_sandbox_path(const std::string& path) {
  std::string dirs = detail::sandbox_path;
  size_t from = 0;
  while (from <= dirs.size()) {
    auto to = dirs.find(':', from);
    if (to == std::string::npos)
      to = dirs.size();
    auto dir = dirs.substr(from, to - from) + "/";
    if (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
        path.find('/', dir.size()) == std::string::npos)
      return true;
    from = to + 1;
  }
  return false;
}

} // namespace

json local_interpreter_identity(const local_registry& registry,
                                const std::string& python) {
  if (python == registry.python_name() || python == "python3" ||
      python == "python") {
    auto& own = registry.interpreter();
    auto out = digest_identity(own);
    if (auto v = own.find("version"); v != own.end())
      out["version"] = *v;
    return out;
  }
  if (python.find('/') == std::string::npos) {
    auto path = detail::find_program(python, detail::sandbox_path);
    if (path.empty())
      return json{{"name", python}, {"missing", "not on the sandbox's PATH"}};
    return digest_identity(file_identity(path));
  }
  // A path the caller chose: looked at (as root) only in the directories
  // of the sandbox's PATH, never elsewhere on the host, and it must stay
  // there once resolved. Anything else has no identity: no cache key.
  auto refuse = [&python] {
    return std::runtime_error(
      "python \"" + python.substr(0, 256) +
      "\": an interpreter path is identified (for a cache key) only in the "
      "sandbox's PATH (" +
      std::string{detail::sandbox_path} +
      ") or as the provider's own python; graded without a key");
  };
  auto normal = std::filesystem::path(python).lexically_normal().string();
  if (python.front() != '/' || !on_sandbox_path(normal))
    throw refuse();
  auto raw = file_identity(normal);
  if (!raw.contains("missing") &&
      !on_sandbox_path(raw.value("path", std::string{})))
    throw refuse();
  return digest_identity(raw);
}

std::string local_image_digest(const local_registry& registry,
                               const std::string& image,
                               std::chrono::steady_clock::time_point deadline) {
  auto& store = registry.images();
  if (!store)
    throw std::runtime_error("images are refused here");
  return store->resolve(image, deadline);
}

bool local_image_unchanged_since(const local_registry& registry,
                                 const std::string& image,
                                 const std::string& digest,
                                 std::chrono::steady_clock::time_point since) {
  auto& store = registry.images();
  return store && store->unchanged_since(image, digest, since);
}

local_registry_stats local_registry_counters(const local_registry& registry) {
  return registry.stats();
}

} // namespace sv
