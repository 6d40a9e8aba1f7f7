#pragma once

// How the local provider confines sandboxes on this host, decided once at
// start: the isolation mode (bubblewrap or none), what the host lets it
// enforce (uids, tmpfs disks and cgroups need root), and the bwrap command
// line of an exec. The README's "Isolation and limits" explains the model.

#include "providers/local/detail/bwrap_argv.hpp"
#include "providers/local/detail/host/cgroups.hpp"
#include "providers/local/detail/host/prepared_view.hpp"
#include "providers/local/detail/host/uid_pool.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace sv {
struct local_provider_config;
} // namespace sv

namespace sv::detail {

struct python_install;
class seccomp_filter;

enum class isolation_mode { none, bwrap };

/// The whole environment of bwrap and every other helper the provider runs
/// as root: nothing a caller set reaches them.
inline constexpr const char* launcher_env_path =
  "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What every sandbox of a provider gets, and what holds.
struct isolation_settings {
  isolation_mode mode = isolation_mode::none;
  /// Whether the service runs as root: uids, mounts and cgroups work.
  bool privileged = false;
  /// bubblewrap, and what drops to the sandbox's uid inside it (as root):
  /// sv-drop (`drop`, its host path; `drop_inside`, where bwrap runs it),
  /// else setpriv.
  std::string bwrap;
  std::string drop;
  std::string drop_inside;
  std::string setpriv;
  /// bwrap arguments that build the sandbox's view of the host.
  std::vector<std::string> host_view;
  /// The same view's top-level entries prepared once (as root, at start)
  /// and bound at / in one step, then `view_tail` (hidden paths, /proc,
  /// /dev); null: host_view, one --ro-bind per top-level entry.
  std::shared_ptr<const prepared_view> view;
  std::vector<std::string> view_tail;
  std::vector<view_entry> view_entries;
  /// Top-level entries of the host, which a workdir must not replace.
  std::vector<std::string> top_level;
  /// The seccomp filter bwrap loads before the command (bwrap mode).
  std::shared_ptr<const seccomp_filter> seccomp;
  /// Paths hidden behind an empty tmpfs.
  std::vector<std::string> hidden;
  cgroup_layout cgroups;
  /// Uids for sandboxes; null when processes keep the service's uid.
  std::shared_ptr<uid_pool> uids;
  /// Whether each sandbox directory is a size-limited tmpfs.
  bool tmpfs_dirs = false;
  uint64_t max_processes = 0;
  uint64_t max_log_bytes = 0;
  uint64_t default_memory_mib = 0;
  uint64_t default_disk_mib = 0;
  int nice = 0;
};

/// Where sv-drop is mounted in a sandbox whose view does not show its host
/// path.
inline constexpr const char* drop_mount_point = "/.sv-drop";

/// sv-drop's real path, if the service may trust it (a regular file owned
/// by root or the service, writable by nobody else, in directories nobody
/// else may change), looked for next to the executable, in ../libexec/,
/// and at the install's and the build's path; else "".
std::string find_drop_stub();

/// Decides the mode for `cfg` (the sandbox root is `root`, the interpreter
/// `python`), probing bwrap with a real run. Throws std::runtime_error when
/// the mode `cfg` asks for explicitly cannot work here.
isolation_settings prepare_isolation(const local_provider_config& cfg,
                                     const std::string& root,
                                     const python_install& python);

/// Logs the mode and which limits hold (info), and every limit that does
/// not (warn).
void log_isolation(const isolation_settings& s);

/// Whether `path` is `dir` or below it (both absolute, normalized).
bool path_within(const std::string& path, const std::string& dir);

/// Why `workdir` cannot hold the sandbox in this mode, or "".
std::string check_workdir(const isolation_settings& s,
                          const std::string& workdir);

} // namespace sv::detail
