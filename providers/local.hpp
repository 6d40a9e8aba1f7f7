#pragma once

// The local provider: a sandbox is a private directory under a root and the
// process group(s) started in it. Child processes are awaited on an I/O
// thread (pidfd + epoll via Boost.Asio); results come back as messages, so no
// CAF scheduler thread ever blocks.
//
// Two parts: a `local_registry` (the sandboxes and the I/O threads; made
// once, slowly, off the scheduler threads) and provider actors on it (cheap
// to spawn, anywhere). Every actor of one registry knows every sandbox of
// it: a replacement spawned after a crash stops what its predecessor made.

#include "messages/provider.hpp"

#include <caf/error.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace caf {
class actor_system;
} // namespace caf

namespace sv {

class provider_backend;

struct local_provider_config {
  /// Directory under which each sandbox gets its own directory. Empty means
  /// `$TMPDIR/sv-sandboxes` (or `/tmp/sv-sandboxes`).
  std::string root;
  /// Interpreter for argv[0] == "python3" / "python" (and for this very
  /// name); resolved to an absolute path once, when the provider starts.
  std::string python = "python3";
  /// Largest file `download` returns.
  uint64_t max_download_bytes = 16 * 1024 * 1024;
  /// Threads that run the caller's file I/O and spawns and await child
  /// processes. Teardowns behind the reply (which unmount and remove
  /// cgroups for milliseconds) and the warm pool run on two background
  /// threads of their own, below these in priority, so a create finds one
  /// of these free.
  size_t io_threads = 4;

  // -- images (docs/providers.md, "Images") ---------------------------------

  /// The image store's directory; empty: `<root>-images` (next to the
  /// sandbox root).
  std::string image_store;
  /// Most MiB of unpacked images kept; past it, unused ones are evicted.
  uint64_t image_store_max_mib = 20480;
  /// Registries ("HOST[:PORT]") pulled from over plain HTTP.
  std::vector<std::string> insecure_registries;
  /// Host directories a root file system directory image must lie in
  /// (empty: that form is refused). The overlay's root takes its upper
  /// layer's owner, so any host directory, even a 0700 one, would be
  /// readable by the sandbox: only those listed here may be images.
  std::vector<std::string> image_dirs;
  /// Seconds a tag's digest is trusted before the registry is asked again
  /// (0: every create asks).
  uint64_t image_tag_ttl_s = 60;

  // -- isolation and limits (README: "Isolation and limits") ---------------

  /// "bwrap", "none", or empty: bwrap when it is on PATH and works here.
  std::string isolation;
  /// Host paths a bwrap sandbox sees as empty directories.
  std::vector<std::string> hide_paths = {"/root", "/home", "/run"};
  /// Most processes and threads a sandbox may run at once.
  uint64_t max_processes = 256;
  /// Most bytes of output an exec keeps (its log, or each captured stream).
  uint64_t max_log_bytes = 1024 * 1024;
  /// Memory limit of a sandbox whose spec sets none; 0 for no limit.
  uint64_t default_memory_mib = 2048;
  /// Disk space of a sandbox whose spec sets none.
  uint64_t default_disk_mib = 1024;
  /// Ceilings of what a spec may ask for (`resources.memory_mib`,
  /// `resources.disk_gib`, `resources.cpu`): a create above one is refused
  /// (`invalid_argument` naming the field and the ceiling), never clamped.
  uint64_t max_memory_mib = 16384;
  uint64_t max_disk_mib = 65536;
  /// 0: the number of CPUs of the host (resolved when the registry starts).
  double max_cpu = 0;
  /// Niceness of every sandbox process (0 to 19). Above 0, the runtime's own
  /// short bursts of work (create, stop, the actors) never wait behind
  /// CPU-bound runners for a core; a runner alone on a core loses nothing.
  uint64_t sandbox_nice = 10;
  /// Sandboxes run as uids uid_base .. uid_base + uid_count - 1 (bwrap, as
  /// root), each its own while it lives. 0: the lowest range at or above
  /// 65536 that overlaps no subordinate id range of the host (/etc/subuid,
  /// /etc/subgid, login.defs' SUB_UID_MIN..MAX) and no user or group.
  uint64_t uid_base = 0;
  uint64_t uid_count = 4096;
  /// Whether a bwrap sandbox may create user namespaces (unshare or clone
  /// with CLONE_NEWUSER): more kernel surface, so the seccomp filter denies
  /// it unless this is set.
  bool allow_user_namespaces = false;
  /// The cgroup, below each v1 hierarchy's root, that holds the sandboxes'.
  std::string cgroup_parent = "sv-sandboxes";

  // -- the warm pool ---------------------------------------------------------

  /// Most sandboxes of one shape (disk, memory, cpu) prepared ahead of
  /// demand (directory, tmpfs, cgroups, uid), on the I/O threads; how many
  /// follows the rate of creates of that shape. Each is still used for
  /// exactly one sandbox and removed at its stop. 0 turns the pool off.
  uint64_t warm_pool = 4;
  /// Whether the pool of the default shape (a spec without resources) is
  /// filled at start, as if creates of it were coming: the first creates of
  /// a run then find sandboxes ready instead of preparing their own at
  /// once. Unused, they are removed as the seeded rate decays (~4 s).
  bool warm_pool_start = true;
  /// How often the pool's rates decay (by a fifth per tick); an idle
  /// shape's pool drains in about eight ticks. Not a JSON setting: for
  /// embedders and tests that want a pool that does not drain while they
  /// wait on a busy machine.
  std::chrono::milliseconds warm_pool_tick{250};
  /// A warm interpreter in each pooled sandbox: the configured python
  /// started inside it (bwrap as root: its namespaces, cgroups, uid, limits
  /// and seccomp filter, the command a cold exec would run) before a
  /// submission arrives, blocked reading its instructions; the sandbox's
  /// first python exec that matches how it was started (the interpreter,
  /// the whole environment, the workdir, the limits; no image, no user
  /// site in the workdir) hands it its cwd and argv and it runs the script
  /// as `python script args` would. One exec or none; anything else runs
  /// cold. docs/isolation.md, "Warm interpreter".
  bool warm_python = false;

  // -- failed stops ----------------------------------------------------------

  /// Tries of a failed stop in all (the first included); then it is logged
  /// and the sandbox stays known: a stop call or shutdown tries again.
  uint64_t stop_attempts = 5;
  /// The wait before the second try; it doubles for each one after.
  std::chrono::milliseconds stop_retry_delay{1000};
  /// Tests only: when set, a stop of sandbox `id` first asks it, and a
  /// returned error fails that try instead of the teardown.
  std::function<caf::error(const std::string& id)> stop_fault;
};

/// What a local registry has done so far.
struct local_registry_stats {
  uint64_t created = 0;
  /// Sandboxes really gone (by a stop call, a TTL, a provider's exit).
  uint64_t stopped = 0;
  /// Teardowns that failed (each try counts).
  uint64_t failed_stops = 0;
  /// Sandboxes known now: live, stopping or failed to stop.
  uint64_t known = 0;
  /// Of those, the ones whose last stop failed.
  uint64_t stop_failed = 0;
  /// Creates served from the warm pool, and the ones that found it empty
  /// (both 0 with `warm_pool` 0).
  uint64_t pool_hits = 0;
  uint64_t pool_misses = 0;
  /// Pooled sandboxes found dead or dirty when taken, destroyed instead.
  uint64_t pool_discarded = 0;
  /// Sandboxes prepared for the pool so far, and ready in it now.
  uint64_t pool_prepared = 0;
  uint64_t pooled = 0;
  /// Preparations for the pool posted and not finished (a test waits for
  /// 0: the pool at rest).
  uint64_t pool_preparing = 0;
};

/// What a spec may ask of a local provider (the settings' ceilings, resolved).
struct local_ceilings {
  uint64_t max_memory_mib = 16384;
  uint64_t max_disk_mib = 65536;
  double max_cpu = 1;
};

/// The sandboxes of the local provider and the I/O threads that serve them
/// (providers/local/detail/registry.hpp). Shared by the provider actors spawned
/// on it; it outlives each of them.
class local_registry;

/// Reads the settings of a `{"local": {...}}` provider block (the inner
/// object). Throws `json_error` naming the field on bad input or unknown
/// keys.
local_provider_config parse_local_provider_config(const json& settings);

/// Creates the root, resolves the interpreter, probes the isolation, reaps
/// what dead providers left and starts the I/O threads. Blocks for up to
/// seconds: call it before the actor system runs, or on a detached actor or
/// thread, never on a scheduler thread. Throws std::runtime_error with a
/// message a person can act on when the root cannot be created or the
/// interpreter cannot be found.
///
/// Dropping the last reference never blocks the thread that drops it (a
/// provider actor's, say): the shutdown then runs on a thread of its own,
/// joined at the latest when the process exits. An owner that wants the
/// sandboxes gone at a known point calls `shut_down_local_registry`.
std::shared_ptr<local_registry> make_local_registry(local_provider_config cfg);

/// Spawns a provider actor on `registry`: cheap and non-blocking, fine on
/// a scheduler thread (a supervisor's restart). When the actor exits, for
/// whatever reason, the live sandboxes it created are torn down in the
/// background; a later stop of one of them (through a replacement on the
/// same registry) answers success.
provider_actor spawn_local_provider(caf::actor_system& sys,
                                    std::shared_ptr<local_registry> registry);

/// `make_local_registry` and `spawn_local_provider` on it, for a provider
/// that is never replaced. Blocks like `make_local_registry`.
provider_actor spawn_local_provider(caf::actor_system& sys,
                                    local_provider_config cfg);

/// Stops every sandbox left (a last try for those whose stop failed) and
/// joins the I/O threads; calls on the registry then fail as unavailable.
/// Blocks for up to about 30 s: after its actors are gone, never on a
/// scheduler thread. Idempotent.
void shut_down_local_registry(local_registry& registry);

/// What decides the grade of a command `python` (a submission's
/// `config.python`) on `registry`'s sandboxes, for the result cache's key:
/// the provider's interpreter (a sha256 digest of its real path, size,
/// mtime, inode, device and `sys.version`, found when the registry was
/// made, and the version) for the name it maps (`python`, `python3` and its
/// `python` setting); for any other name, a digest of the same of the
/// program that name finds on the sandboxes' PATH. An absolute path is
/// looked at only in the directories of that PATH (resolved, it must stay
/// there); any other path throws (no cache key). No raw host file metadata
/// is ever returned. Stats files: call it off the scheduler threads.
json local_interpreter_identity(const local_registry& registry,
                                const std::string& python);

/// The digest ("sha256:<hex>") image `image` names now in `registry`'s
/// image store (a registry tag, an `oci:` layout, an archive; by
/// `skopeo inspect` unless resolved within `image_tag_ttl_s`), for the
/// result cache's key; "" for a root file system directory (no digest:
/// not cached). Throws std::runtime_error when it cannot be resolved or
/// images are refused. Blocks up to `deadline`: off the scheduler threads.
std::string local_image_digest(const local_registry& registry,
                               const std::string& image,
                               std::chrono::steady_clock::time_point deadline);

/// Whether `image` has named `digest` since `since` without a change seen
/// by `registry`'s store (a create that found it moved, a failed pull).
/// Never blocks on the network.
bool local_image_unchanged_since(const local_registry& registry,
                                 const std::string& image,
                                 const std::string& digest,
                                 std::chrono::steady_clock::time_point since);

/// The counters of `registry`.
local_registry_stats local_registry_counters(const local_registry& registry);

/// The backend of a `local` block (providers/factory.cpp). Throws
/// `json_error` for bad settings.
std::shared_ptr<provider_backend> make_local_backend(const json& settings);

} // namespace sv
