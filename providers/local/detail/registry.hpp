#pragma once

// The one registry of the local provider's sandboxes, and the I/O threads
// that do their blocking work (file I/O, spawning, awaiting children,
// tearing down). It outlives any one provider actor: a replacement actor
// spawned on the same registry after a crash serves (and stops) the
// sandboxes its predecessor created. Every call answers through a typed
// callback, exactly once, on an I/O thread; the actor turns that into a
// message to itself (providers/local/provider.cpp).
//
// The life of a sandbox, all of it here: create → live → stopping (a stop
// call, its TTL, its provider's exit) → gone, or → stop_failed, retried with
// a growing delay (a bounded number of times, then logged) and on every
// later stop call, until really gone. A sandbox whose teardown was started
// by its provider's exit leaves a tombstone: a later stop of it (through a
// replacement) is a success, not `no_such_sandbox`.

#include "messages/protocol.hpp"
#include "providers/local.hpp"

#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace sv {

namespace detail {

struct isolation_settings;
class image_store;

struct registry_settings {
  std::string root;
  std::string python_name;
  std::string python_path;
  uint64_t max_download_bytes = 0;
  size_t io_threads = 1;
  std::shared_ptr<const isolation_settings> isolation;
  /// Where a spec's `image` is pulled and unpacked (null: images refused,
  /// with `image_refusal` saying why).
  std::shared_ptr<image_store> images;
  std::string image_refusal;
  uint32_t stop_attempts = 5;
  std::chrono::milliseconds stop_retry_delay{1000};
  /// Most pooled sandboxes of one shape; 0: no pool.
  size_t warm_pool = 0;
  /// Fill the default shape's pool at start.
  bool warm_pool_start = false;
  std::chrono::milliseconds warm_pool_tick{250};
  /// A warm interpreter in each pooled sandbox (bwrap as root only).
  bool warm_python = false;
  std::function<caf::error(const std::string&)> stop_fault;
  /// What a spec may ask for (checked by the provider actor).
  local_ceilings ceilings;
  /// What `python_name` (and python3, python) runs: its real path, file
  /// identity and version (local_interpreter_identity).
  json interpreter;
};

} // namespace detail

/// Receives the outcome of one call, exactly once, on an I/O thread.
template <class T>
using local_completion = std::function<void(caf::expected<T>)>;

class local_registry {
public:
  /// Opens `cfg.root` and starts the I/O threads. Throws
  /// std::runtime_error when the root cannot be opened.
  explicit local_registry(detail::registry_settings cfg);

  /// shutdown(), when nobody did.
  ~local_registry();

  local_registry(const local_registry&) = delete;
  local_registry& operator=(const local_registry&) = delete;

  // -- provider actors -------------------------------------------------------

  /// A token for one provider actor.
  uint64_t join();

  /// The actor of `owner` is gone: its live sandboxes are torn down (in the
  /// background, never blocking the caller), and a later stop of one of
  /// them is a success.
  void leave(uint64_t owner);

  // -- calls -----------------------------------------------------------------

  /// Makes a fresh sandbox for `owner`; answers its handle.
  void create(uint64_t owner, const sandbox_spec& spec,
              local_completion<sandbox_handle> done);

  /// Whether `id` is live (created, not stopping or stopped). Never blocks.
  bool is_live(const std::string& id) const;

  /// Writes `files` below `dir` of sandbox `id`.
  void upload(const std::string& id, std::string dir, file_map files,
              local_completion<ok_atom> done);

  /// Runs a command to its end, its deadline or the sandbox's stop.
  void exec(const std::string& id, exec_request x,
            local_completion<exec_result> done);

  /// Reads one regular file of sandbox `id`.
  void download(const std::string& id, std::string path,
                local_completion<std::string> done);

  /// Kills everything of sandbox `id` and removes it; joins a teardown that
  /// already runs, tries a failed one again.
  void stop(const std::string& id, local_completion<ok_atom> done);

  // -- the registry as a whole -----------------------------------------------

  local_registry_stats stats() const;

  /// What a spec may ask for.
  const local_ceilings& ceilings() const;

  /// The provider's interpreter: the name it maps (`python_name`) and what
  /// it runs (registry_settings::interpreter).
  const std::string& python_name() const;
  const json& interpreter() const;

  /// Its image store (null when images are refused).
  const std::shared_ptr<detail::image_store>& images() const;

  /// Stops every sandbox (a last try for those whose stop failed) and joins
  /// the I/O threads. Blocks for up to about 30 s: never call it on a CAF
  /// scheduler thread or an I/O thread of this registry. Idempotent.
  void shutdown();

  /// Whether shutdown() has finished.
  bool is_shut_down() const;

  struct impl;

private:
  std::unique_ptr<impl> impl_;
};

} // namespace sv
