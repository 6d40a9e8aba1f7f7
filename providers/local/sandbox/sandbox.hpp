#pragma once

// The I/O side of one local sandbox. A private header of the local provider:
// it includes Asio, so only the provider's own sources include it.

#include "messages/protocol.hpp"
#include "providers/local/host/cgroups.hpp"
#include "providers/local/host/uid_pool.hpp"
#include "providers/local/host/unique_fd.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace sv::detail {

using io_strand = boost::asio::strand<boost::asio::io_context::executor_type>;

class running_exec;

/// The confinement of one sandbox; each part may be absent.
struct sandbox_confinement {
  uid_lease uid;
  /// Whether the sandbox directory is a tmpfs mounted for it.
  bool mounted = false;
  /// Its size in bytes, when mounted.
  uint64_t disk_bytes = 0;
  sandbox_cgroups cgroups;
};

/// One sandbox: its directory and the commands running in it. Everything
/// that changes is touched on `strand` only, so file operations, spawns,
/// exits and the stop of one sandbox never race with each other.
struct local_sandbox {
  local_sandbox(io_strand s, std::string sandbox_id, std::string dir_path,
                unique_fd dir_fd, env_map spec_env)
      : id(std::move(sandbox_id)), path(std::move(dir_path)),
        dir(std::move(dir_fd)), env(std::move(spec_env)), strand(s), ttl(s) {
    // nop
  }

  /// The sandbox id, also the value of the SV_SANDBOX_ID marker.
  const std::string id;
  /// Absolute path of the sandbox directory on the host.
  const std::string path;
  /// Where its commands see the directory (HOME): `path`, or the spec's
  /// workdir under bwrap.
  std::string workdir;
  /// The sandbox directory, the base of every confined path walk.
  unique_fd dir;
  /// Environment from the sandbox spec, applied to every exec.
  const env_map env;
  /// Serializes everything that happens to this sandbox.
  io_strand strand;
  /// Fires at the sandbox's TTL, when the spec gives one.
  boost::asio::steady_timer ttl;
  /// Commands whose leader has not been reaped yet, by request id.
  std::map<uint64_t, std::shared_ptr<running_exec>> execs;
  /// Its uid, tmpfs and cgroups; released by stop.
  sandbox_confinement confinement;
  /// Set once by stop: later calls find no sandbox.
  bool stopped = false;
};

} // namespace sv::detail
