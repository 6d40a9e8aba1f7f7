#include "providers/local/detail/isolation.hpp"

#include "providers/local.hpp"
#include "providers/local/detail/host/prepared_view.hpp"
#include "providers/local/detail/host/process.hpp"
#include "providers/local/detail/host/seccomp.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <mutex>
#include <set>
#include <spdlog/spdlog.h>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>

namespace sv::detail {

namespace {

/// Where uid leases are locked, shared by every provider on the host.
constexpr const char* uid_lock_dir = "/run/sv-sandbox-uids";

bool is_within(const std::string& path, const std::string& dir) {
  return path_within(path, dir);
}

bool is_empty_dir(const std::string& path) {
  auto* dir = ::opendir(path.c_str());
  if (dir == nullptr)
    return false;
  size_t entries = 0;
  while (auto* e = ::readdir(dir))
    entries +=
      std::string_view{e->d_name} != "." && std::string_view{e->d_name} != "..";
  ::closedir(dir);
  return entries == 0;
}

std::vector<std::string> list_root() {
  std::vector<std::string> out;
  if (auto* dir = ::opendir("/")) {
    while (auto* e = ::readdir(dir)) {
      std::string name = e->d_name;
      if (name != "." && name != "..")
        out.push_back(name);
    }
    ::closedir(dir);
  }
  std::sort(out.begin(), out.end());
  return out;
}

void add(std::vector<std::string>& args,
         std::initializer_list<std::string> xs) {
  args.insert(args.end(), xs);
}

/// One top-level entry of the host in the sandbox's view: in host_view
/// (bwrap builds it), and in view_entries and view_tail (prepared once).
void add_top_level(isolation_settings& s, const std::string& name) {
  auto path = "/" + name;
  auto& args = s.host_view;
  auto& entries = s.view_entries;
  auto entry = [&](view_entry::kind_t kind, std::string target = {}) {
    entries.push_back(view_entry{name, kind, std::move(target)});
  };
  if (name == "proc" || name == "dev" || name == "tmp")
    return entry(view_entry::empty_dir); // private, added by the caller
  if (path == drop_mount_point)
    return; // sv-drop's, when the view does not show it
  if (std::find(s.hidden.begin(), s.hidden.end(), path) != s.hidden.end()) {
    struct stat st;
    if (::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      add(args, {"--perms", "0755", "--tmpfs", path});
      add(s.view_tail, {"--perms", "0755", "--tmpfs", path});
      entry(view_entry::empty_dir);
    }
    return;
  }
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0)
    return;
  if (S_ISLNK(st.st_mode)) {
    char target[4096];
    auto n = ::readlink(path.c_str(), target, sizeof target - 1);
    if (n > 0) {
      std::string to(target, static_cast<size_t>(n));
      add(args, {"--symlink", to, path});
      entry(view_entry::symlink, to);
    }
  } else if (S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)) {
    add(args, {"--ro-bind", path, path});
    entry(S_ISDIR(st.st_mode) ? view_entry::bind_dir : view_entry::bind_file,
          path);
  }
}

/// Makes `path` visible below the hidden `hidden_dir`, through directories
/// anyone may traverse.
void reveal(std::vector<std::string>& args, const std::string& hidden_dir,
            const std::string& path) {
  for (auto pos = path.find('/', hidden_dir.size() + 1);
       pos != std::string::npos; pos = path.find('/', pos + 1))
    add(args, {"--perms", "0755", "--dir", path.substr(0, pos)});
  add(args, {"--ro-bind", path, path});
}

void build_host_view(isolation_settings& s, const python_install& python) {
  s.top_level = list_root();
  for (auto& name : s.top_level)
    add_top_level(s, name);
  auto tail_from = s.host_view.size();
  add(s.host_view, {"--proc", "/proc", "--dev", "/dev"});
  for (auto& path : s.hidden) {
    struct stat st;
    // Top-level ones are done; /tmp, /dev and /proc are private anyway.
    if (std::count(path.begin(), path.end(), '/') < 2 ||
        is_within(path, "/tmp") || is_within(path, "/dev") ||
        is_within(path, "/proc") || ::lstat(path.c_str(), &st) != 0)
      continue;
    if (S_ISDIR(st.st_mode))
      add(s.host_view, {"--perms", "0755", "--tmpfs", path});
    else
      add(s.host_view, {"--ro-bind", "/dev/null", path});
  }
  // The interpreter may live in a hidden home (pyenv under /root): show
  // exactly its installation again, read-only, outermost first.
  auto roots = python.roots;
  std::sort(roots.begin(), roots.end(),
            [](auto& a, auto& b) { return a.size() < b.size(); });
  std::vector<std::string> shown;
  for (auto& root : roots)
    for (auto& hidden : s.hidden)
      if (is_within(root, hidden) && root != hidden &&
          std::none_of(shown.begin(), shown.end(),
                       [&](auto& x) { return is_within(root, x); })) {
        reveal(s.host_view, hidden, root);
        shown.push_back(root);
      }
  s.view_tail.insert(s.view_tail.end(), s.host_view.begin() + tail_from,
                     s.host_view.end());
}

/// Prepares the view once (root): its entries, a mount point for the
/// default workdir and sv-drop's. Without it, bwrap binds each entry.
void prepare_view(isolation_settings& s) {
  auto entries = s.view_entries;
  auto point = [&](const std::string& name, view_entry::kind_t kind) {
    if (std::none_of(entries.begin(), entries.end(),
                     [&](auto& e) { return e.name == name; }))
      entries.push_back(view_entry{name, kind, {}});
  };
  point("sandbox", view_entry::empty_dir);
  if (!s.drop.empty() && s.drop_inside == drop_mount_point)
    point(std::string{drop_mount_point}.substr(1), view_entry::empty_file);
  try {
    if (auto n = remove_stale_views(); n > 0)
      spdlog::info("local provider: removed {} stale sandbox views from {}", n,
                   view_dir);
    s.view = prepared_view::make(entries);
  } catch (const std::exception& e) {
    spdlog::warn("local provider: {}; bwrap binds the host's top-level "
                 "entries one by one instead (~1.5 ms more CPU per exec)",
                 e.what());
  }
}

/// Runs the interpreter through the full bwrap command once: a mode that
/// cannot run a sandbox must fail here, not on the first submission.
/// Once per command line and process: a provider restarted by a supervisor
/// (possibly on a scheduler thread) does not pay for the probe again.
void probe_bwrap(const isolation_settings& s, const std::string& python) {
  static std::mutex mtx;
  static std::set<std::vector<std::string>> passed;
  spawn_spec spec;
  spec.argv =
    bwrap_command(s, "", "", "", s.uids ? s.uids->base() : -1,
                  {python, "-c", "import sys"}, {{"PATH", "/usr/bin:/bin"}})
      .flat();
  // Views of the same entries are alike: a restarted provider's new one
  // does not make the probe run again.
  auto key = spec.argv;
  if (s.view)
    std::replace(key.begin(), key.end(), s.view->path(),
                 std::string{"<prepared view>"});
  {
    std::lock_guard<std::mutex> guard{mtx};
    if (passed.count(key) > 0)
      return;
  }
  spec.program = spec.argv.front();
  spec.env = {launcher_env_path};
  spec.new_process_group = false;
  unique_fd program;
  if (s.seccomp) {
    program.reset(s.seccomp->open_program());
    if (!program)
      throw std::runtime_error(std::string{"cannot open the seccomp "
                                           "program: "} +
                               std::strerror(errno));
    spec.seccomp_fd = program.get();
  }
  run_and_capture(spec, std::chrono::seconds{30});
  std::lock_guard<std::mutex> guard{mtx};
  passed.insert(key);
}

/// Whether root may run the file at the real path `path`: a regular,
/// executable file owned by root or the service and writable by nobody
/// else, each directory above it owned by root or the service and writable
/// by nobody else unless sticky (like /tmp).
bool trusted_file(const std::string& path) {
  auto me = ::geteuid();
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
      (st.st_uid != 0 && st.st_uid != me) ||
      (st.st_mode & (S_IWGRP | S_IWOTH)) != 0 || (st.st_mode & S_IXUSR) == 0)
    return false;
  auto dir = path;
  do {
    auto slash = dir.rfind('/');
    dir = slash == 0 ? "/" : dir.substr(0, slash);
    if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
        (st.st_uid != 0 && st.st_uid != me) ||
        ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 &&
         (st.st_mode & S_ISVTX) == 0))
      return false;
  } while (dir != "/");
  return true;
}

/// Whether the sandbox's view shows the host path `path` (a real path)
/// where it is on the host: below a top-level directory bound read-only.
bool shown_in_view(const isolation_settings& s, const std::string& path) {
  auto slash = path.find('/', 1);
  if (slash == std::string::npos)
    return false;
  auto top = path.substr(0, slash);
  if (top == "/proc" || top == "/dev" || top == "/tmp" ||
      top == drop_mount_point)
    return false;
  for (auto& hidden : s.hidden)
    if (is_within(path, hidden))
      return false;
  return std::any_of(
    s.view_entries.begin(), s.view_entries.end(), [&](const view_entry& e) {
      return e.kind == view_entry::bind_dir && "/" + e.name == top;
    });
}

std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  auto found = find_program(name, path ? path : "/usr/bin:/bin");
  return found.empty() ? find_program(name, "/usr/bin:/bin") : found;
}

/// Settles on bwrap or none; `explicit_bwrap` turns a failure into an error.
void choose_mode(isolation_settings& s, bool explicit_bwrap,
                 bool allow_user_namespaces, const python_install& python) {
  auto fail = [&](const std::string& why) {
    if (explicit_bwrap)
      throw std::runtime_error("local provider: isolation \"bwrap\" cannot "
                               "work here: " +
                               why +
                               "; install bubblewrap (scripts/setup.sh) or "
                               "set \"isolation\": \"none\"");
    spdlog::warn("local provider: bubblewrap unusable ({}), sandboxes run "
                 "WITHOUT isolation",
                 why);
    s.mode = isolation_mode::none;
    s.uids.reset();
    s.seccomp.reset();
  };
  s.bwrap = find_on_path("bwrap");
  if (s.bwrap.empty())
    return fail("bwrap not found on PATH");
  if (s.privileged) {
    s.drop = find_drop_stub();
    if (!s.drop.empty())
      s.drop_inside = shown_in_view(s, s.drop) ? s.drop : drop_mount_point;
    s.setpriv = find_on_path("setpriv");
    if (s.drop.empty() && s.setpriv.empty())
      return fail("neither sv-drop (built and installed with the provider) "
                  "nor setpriv (util-linux) found");
  }
  s.mode = isolation_mode::bwrap;
  s.seccomp = std::make_shared<const seccomp_filter>(allow_user_namespaces);
  if (s.privileged)
    prepare_view(s);
  if (s.view)
    try {
      probe_bwrap(s, python.executable);
      return;
    } catch (const std::exception& e) {
      spdlog::warn("local provider: a trial run in the prepared view failed "
                   "({}); bwrap binds the host's top-level entries one by "
                   "one instead",
                   e.what());
      s.view.reset();
    }
  try {
    probe_bwrap(s, python.executable);
  } catch (const std::exception& e) {
    if (s.drop.empty() || s.setpriv.empty())
      return fail(std::string{"a trial run failed: "} + e.what());
    spdlog::warn("local provider: a trial run through sv-drop ({}) failed "
                 "({}); dropping uids with setpriv instead",
                 s.drop, e.what());
    s.drop.clear();
    s.drop_inside.clear();
    try {
      probe_bwrap(s, python.executable);
    } catch (const std::exception& again) {
      fail(std::string{"a trial run failed: "} + again.what());
    }
  }
}

} // namespace

bool path_within(const std::string& path, const std::string& dir) {
  if (dir == "/")
    return true;
  return path == dir ||
         (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
          path[dir.size()] == '/');
}

std::string find_drop_stub() {
  std::vector<std::string> candidates;
  char exe[PATH_MAX];
  auto n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    std::string path(exe, static_cast<size_t>(n));
    auto dir = path.substr(0, path.rfind('/'));
    candidates.push_back(dir + "/sv-drop");
#ifdef SV_LIBEXEC_DIR
    candidates.push_back(dir + "/../" SV_LIBEXEC_DIR "/sv-drop");
#endif
  }
#ifdef SV_DROP_INSTALL_PATH
  candidates.push_back(SV_DROP_INSTALL_PATH);
#endif
#ifdef SV_DROP_BUILD_PATH
  candidates.push_back(SV_DROP_BUILD_PATH);
#endif
  for (auto& candidate : candidates) {
    char real[PATH_MAX];
    if (::realpath(candidate.c_str(), real) != nullptr && trusted_file(real))
      return real;
  }
  return {};
}

isolation_settings prepare_isolation(const local_provider_config& cfg,
                                     const std::string& root,
                                     const python_install& python) {
  if (!cfg.isolation.empty() && cfg.isolation != "bwrap" &&
      cfg.isolation != "none")
    throw std::runtime_error("local provider: isolation must be \"bwrap\" "
                             "or \"none\", not \"" +
                             cfg.isolation + "\"");
  isolation_settings s;
  s.privileged = ::geteuid() == 0;
  s.max_processes = cfg.max_processes;
  s.max_log_bytes = cfg.max_log_bytes;
  s.default_memory_mib = cfg.default_memory_mib;
  s.default_disk_mib = cfg.default_disk_mib;
  s.nice = static_cast<int>(cfg.sandbox_nice);
  s.hidden = cfg.hide_paths;
  // Other sandboxes' directories, wherever the root is.
  s.hidden.push_back(root);
  if (s.privileged) {
    s.cgroups = detect_cgroups(cfg.cgroup_parent);
    s.tmpfs_dirs = true;
  }
  if (cfg.isolation == "none")
    return s;
  if (s.privileged) {
    auto count = static_cast<uint32_t>(cfg.uid_count);
    // By default a range no subordinate id range of the host (rootless
    // containers) overlaps, and no user or group.
    auto base = cfg.uid_base != 0 ? static_cast<uint32_t>(cfg.uid_base)
                                  : free_uid_base(count);
    s.uids = std::make_shared<uid_pool>(uid_lock_dir, base, count);
    if (auto n = s.uids->remove_stale_locks(); n > 0)
      spdlog::info("local provider: removed {} stale uid lock files from {}", n,
                   uid_lock_dir);
  }
  build_host_view(s, python);
  choose_mode(s, cfg.isolation == "bwrap", cfg.allow_user_namespaces, python);
  return s;
}

void log_isolation(const isolation_settings& s) {
  std::string hidden;
  for (auto& path : s.hidden)
    hidden += (hidden.empty() ? "" : ", ") + path;
  if (s.mode == isolation_mode::bwrap)
    spdlog::info("local provider: isolation bwrap: new pid, net, ipc, uts "
                 "and cgroup namespaces, host read-only, private /tmp and "
                 "/dev, hidden {}, {}",
                 hidden,
                 s.uids
                   ? "uids " + std::to_string(s.uids->base()) + ".." +
                       std::to_string(s.uids->base() + s.uids->count() - 1) +
                       ", one per sandbox"
                   : "the service's own uid (not root)");
  else
    spdlog::warn("local provider: isolation none: sandboxes run as the "
                 "service's uid {} and see, write and signal what it can",
                 ::geteuid());
  if (s.seccomp) {
    std::string denied;
    for (auto& what : s.seccomp->denied())
      denied += (denied.empty() ? "" : "; ") + what;
    spdlog::info("local provider: seccomp filter denies (EPERM): {}", denied);
  }
  auto& cg = s.cgroups;
  auto memory = s.default_memory_mib == 0
                  ? std::string{"no default limit"}
                  : "default " + std::to_string(s.default_memory_mib) + " MiB";
  spdlog::info(
    "local provider: limits per sandbox: processes {}{}, memory {}{}, disk "
    "default {} MiB{}, cpu from resources.cpu{}, output {} bytes per exec "
    "(the rest dropped), CPU time by the exec deadline (SIGKILL)",
    s.max_processes,
    !cg.pids.empty() ? " (pids cgroup)"
    : s.uids         ? " (RLIMIT_NPROC of the sandbox uid only)"
                     : " (NOT enforced)",
    memory, cg.memory.empty() ? " (NOT enforced)" : " (memory cgroup)",
    s.default_disk_mib,
    s.tmpfs_dirs ? " (tmpfs per sandbox)" : " (RLIMIT_FSIZE per file only)",
    cg.cpu.empty() ? " (NOT enforced)" : " (cpu cgroup quota)",
    s.max_log_bytes);
  if (s.mode == isolation_mode::bwrap && s.view)
    spdlog::info("local provider: the host's read-only view is prepared "
                 "once, at {} (bound at / in each sandbox)",
                 s.view->path());
  if (s.mode == isolation_mode::bwrap && s.privileged) {
    if (!s.drop.empty())
      spdlog::info("local provider: the uid drop inside the sandbox: sv-drop "
                   "{} (at {} in the sandbox)",
                   s.drop, s.drop_inside);
    else
      spdlog::warn("local provider: sv-drop not found or unusable (it is "
                   "built in <build>/libexec/ and installed in libexec/): "
                   "the uid drop inside the sandbox is setpriv {}, one more "
                   "glibc start per exec (~1-2 ms of CPU)",
                   s.setpriv);
  }
  for (auto& problem : cg.problems)
    spdlog::warn("local provider: cgroup limit not enforced: {}", problem);
  if (!s.privileged)
    spdlog::warn("local provider: not root: no per-sandbox cgroups (memory, "
                 "processes), no tmpfs disk limit, no uid per sandbox; "
                 "RLIMIT_FSIZE bounds single files only");
  else if (cg.pids.empty() && !s.uids)
    spdlog::warn("local provider: no per-sandbox process limit holds "
                 "(no pids cgroup; RLIMIT_NPROC is ignored for root)");
}

std::string check_workdir(const isolation_settings& s,
                          const std::string& workdir) {
  if (s.mode != isolation_mode::bwrap)
    return {};
  auto bad = [&](const std::string& why) {
    return "workdir \"" + workdir + "\": " + why;
  };
  if (workdir.size() < 2 || workdir.front() != '/' || workdir.back() == '/' ||
      workdir.find("//") != std::string::npos ||
      workdir.find("/./") != std::string::npos ||
      workdir.find("/../") != std::string::npos ||
      workdir.compare(workdir.size() - 2, 2, "/.") == 0 ||
      workdir.compare(workdir.size() - 3, 3, "/..") == 0)
    return bad("must be an absolute, normalized path other than /");
  if (is_within(workdir, drop_mount_point))
    return bad("is where the sandbox's uid drop is mounted");
  if (is_within(workdir, "/tmp") && workdir != "/tmp")
    return {};
  for (auto& hidden : s.hidden)
    if (is_within(workdir, hidden) && workdir != hidden)
      return {};
  // A new top-level directory is made in bwrap's own root; an existing
  // one must be an empty directory (a mount point made for it).
  auto top = workdir.substr(1);
  if (top.find('/') == std::string::npos &&
      (std::find(s.top_level.begin(), s.top_level.end(), top) ==
         s.top_level.end() ||
       is_empty_dir(workdir)))
    return {};
  return bad("the host's file system is read-only in the sandbox: use a new "
             "top-level directory (like /sandbox) or one below /tmp");
}

} // namespace sv::detail
