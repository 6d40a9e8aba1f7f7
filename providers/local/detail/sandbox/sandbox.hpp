#pragma once

// One local sandbox: its directory, confinement, running commands and where
// it is in its life (the registry's part). A private header of the local
// provider: it includes Asio, so only the provider's own sources include it.

#include "messages/protocol.hpp"
#include "providers/local/detail/host/cgroups.hpp"
#include "providers/local/detail/host/uid_pool.hpp"
#include "providers/local/detail/host/unique_fd.hpp"
#include "providers/local/detail/sandbox/warm_python.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <caf/error.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace sv::detail {

using io_strand = boost::asio::strand<boost::asio::io_context::executor_type>;

class running_exec;
struct image_tree;

/// The confinement of one sandbox; each part may be absent.
struct sandbox_confinement {
  uid_lease uid;
  /// Whether the sandbox directory is a tmpfs mounted for it.
  bool mounted = false;
  /// Its size in bytes, when mounted.
  uint64_t disk_bytes = 0;
  /// Whether `<root>/<id>.tmp` and `<root>/<id>.shm` are tmpfs mounted for
  /// the sandbox's /tmp and /dev/shm (sizes: scratch_bytes()).
  bool scratch = false;
  sandbox_cgroups cgroups;
  /// Its own empty network namespace (bwrap, as root), entered by each
  /// exec's launcher instead of bwrap making one per exec.
  unique_fd netns;
  /// The image it runs (held while it lives), or null: the host's view.
  std::shared_ptr<const image_tree> image;
  /// The overlay of the image and the sandbox's upper layer (bound at /).
  std::string image_root;
  /// Its warm interpreter (setting `warm_python`), until an exec takes it.
  std::unique_ptr<warm_python> warm;
};

/// The host directories (siblings of the sandbox's, in its root) of its
/// /tmp and /dev/shm, and their sizes: a quarter and a sixteenth of its
/// disk (at least 16 MiB each), so with the defaults (1 GiB disk) all three
/// tmpfs hold 1.3 GiB, below the 2 GiB memory limit they are charged to.
inline const char* const scratch_suffixes[] = {".tmp", ".shm"};

/// The host directory (a sibling of the sandbox's) of the writable root of
/// a sandbox that runs an image: a tmpfs holding the overlay's upper and
/// work directories and, at `merged`, the overlay bwrap binds at /.
inline const char* const image_root_suffix = ".root";
inline uint64_t scratch_bytes(uint64_t disk_bytes, size_t i) {
  uint64_t min = uint64_t{16} << 20;
  auto bytes = i == 0 ? disk_bytes / 4 : disk_bytes / 16;
  return bytes < min ? min : bytes;
}

/// Where a sandbox is in its life. Guarded by the registry's mutex.
enum class sandbox_phase {
  /// Created and serving calls.
  live,
  /// Its teardown runs (a stop call, its TTL, its provider's exit, a retry).
  stopping,
  /// Its last teardown failed; it stays known until a retry succeeds.
  stop_failed,
};

/// Receives the outcome of a stop (none: gone), once, on an I/O thread.
using stop_waiter = std::function<void(caf::error)>;

/// One sandbox: its directory and the commands running in it. Everything
/// that changes is touched on `strand` only, so file operations, spawns,
/// exits and the stop of one sandbox never race with each other.
struct local_sandbox {
  local_sandbox(io_strand s, std::string sandbox_id, std::string dir_path,
                unique_fd dir_fd, env_map spec_env)
      : id(std::move(sandbox_id)), path(std::move(dir_path)),
        dir(std::move(dir_fd)), env(std::move(spec_env)), strand(s), ttl(s),
        retry(s) {
    // nop
  }

  /// The sandbox id, also the value of the SV_SANDBOX_ID marker.
  const std::string id;
  /// Absolute path of the sandbox directory on the host.
  const std::string path;
  /// The sandbox root (the registry's descriptor, which outlives every
  /// sandbox), where teardown removes `id` relative to it.
  int root_fd = -1;
  std::string root;
  /// Where its commands see the directory (HOME): `path`, or the spec's
  /// workdir under bwrap.
  std::string workdir;
  /// Without isolation (`workdir` is `path`): the spec's workdir, another
  /// name of the directory for the provider's calls (sandbox/places.hpp).
  std::string workdir_alias;
  /// The sandbox directory, the base of every confined path walk.
  unique_fd dir;
  /// Environment from the sandbox spec, applied to every exec (set once,
  /// before the sandbox is handed out).
  env_map env;
  /// Serializes everything that happens to this sandbox.
  io_strand strand;
  /// Fires at the sandbox's TTL, when the spec gives one.
  boost::asio::steady_timer ttl;
  /// Commands whose leader has not been reaped yet, by exec number.
  std::map<uint64_t, std::shared_ptr<running_exec>> execs;
  /// Its uid, tmpfs and cgroups; released by a stop that succeeds.
  sandbox_confinement confinement;
  /// Set on the strand when its first teardown starts: calls queued on the
  /// strand before it still run (and a stop then kills their commands),
  /// later ones find no sandbox.
  bool torn_down = false;

  // -- the registry's part, guarded by its mutex -----------------------------

  sandbox_phase phase = sandbox_phase::live;
  /// The provider actor that created it (its registry token).
  uint64_t owner = 0;
  /// Whether the teardown running now was started by its provider's exit:
  /// when it succeeds, a later stop of the id is answered as a success.
  bool by_owner_exit = false;
  /// Failed teardowns so far.
  uint32_t failed_stops = 0;
  /// Stop calls waiting for the teardown running now.
  std::vector<stop_waiter> stop_waiters;
  /// Fires at the next try of a failed stop.
  boost::asio::steady_timer retry;
};

} // namespace sv::detail
