#pragma once

// The I/O side of the local provider: an io_context run by its own threads,
// where every blocking step (file I/O, spawning, awaiting children, removing
// directories) happens. Each call answers with one message
// `(io_done_atom, request_id, caf::message reply)` to the provider actor,
// where `reply` holds the response or a `caf::error`. The actor delivers it.

#include "messages/protocol.hpp"

#include <caf/atom.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace caf {
class actor_addr;
} // namespace caf

namespace sv::detail {

struct isolation_settings;

/// Tags a finished I/O call.
using io_done_atom = caf::atom_constant<caf::atom("io_done")>;

/// Tags a sandbox whose TTL ran out.
using expired_atom = caf::atom_constant<caf::atom("expired")>;

struct runtime_settings {
  std::string root;
  std::string python_name;
  std::string python_path;
  uint64_t max_download_bytes = 0;
  size_t io_threads = 1;
  std::shared_ptr<const isolation_settings> isolation;
};

class local_runtime {
public:
  /// Opens `cfg.root` and starts the I/O threads; replies go to `provider`
  /// (held weakly: pending I/O never keeps the actor alive).
  local_runtime(runtime_settings cfg, const caf::actor_addr& provider);

  /// Kills every process of every sandbox, removes their directories and
  /// joins the I/O threads.
  ~local_runtime();

  local_runtime(const local_runtime&) = delete;
  local_runtime& operator=(const local_runtime&) = delete;

  /// Makes sandbox `id` (directory, uid, cgroups); replies `ok_atom`.
  void create(uint64_t req, const std::string& id, const sandbox_spec& spec);

  /// Writes `files` below `dir`; replies `ok_atom`.
  void upload(uint64_t req, const std::string& id, std::string dir,
              file_map files);

  /// Runs a command; replies `exec_result`.
  void exec(uint64_t req, const std::string& id, exec_request x);

  /// Reads one regular file; replies `std::string`.
  void download(uint64_t req, const std::string& id, std::string path);

  /// Kills everything of sandbox `id` and removes it; replies `ok_atom`.
  void stop(uint64_t req, const std::string& id);

private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

} // namespace sv::detail
