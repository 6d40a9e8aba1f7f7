#include "providers/local/detail/bwrap_argv.hpp"

#include "providers/local/detail/isolation.hpp"

#include <algorithm>
#include <initializer_list>

namespace sv::detail {

namespace {

void add(std::vector<std::string>& args,
         std::initializer_list<std::string> xs) {
  args.insert(args.end(), xs);
}

/// A private, world-writable tmpfs of `bytes` (charged to the writer's
/// memory cgroup).
void add_scratch(std::vector<std::string>& args, const std::string& path,
                 uint64_t bytes) {
  add(args,
      {"--perms", "1777", "--size", std::to_string(bytes), "--tmpfs", path});
}

bool is_within(const std::string& path, const std::string& dir) {
  return path_within(path, dir);
}

} // namespace

bwrap_argv bwrap_command(const isolation_settings& s,
                         const std::string& host_dir,
                         const std::string& workdir, const std::string& cwd,
                         int64_t uid, const std::vector<std::string>& argv,
                         const std::map<std::string, std::string>& env,
                         bool scratch, bool own_netns,
                         const std::string& image_root) {
  std::vector<std::string> out{s.bwrap, "--unshare-pid"};
  // Unless the launcher entered the sandbox's own empty one already.
  if (!own_netns)
    out.push_back("--unshare-net");
  add(out, {"--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--hostname", "sandbox", "--die-with-parent",
            // No TIOCSTI into the service's terminal.
            "--new-session"});
  if (!host_dir.empty())
    add(out, {"--json-status-fd", "3"});
  if (s.seccomp)
    add(out, {"--seccomp", "4"});
  // bwrap applies these to its command only, after its own set-up.
  out.push_back("--clearenv");
  for (auto& [k, v] : env)
    add(out, {"--setenv", k, v});
  // The prepared view holds a mount point for the workdir unless it is a
  // new top-level directory other than /sandbox.
  auto top = workdir.substr(0, workdir.find('/', 1));
  if (!image_root.empty()) {
    // The image's overlay (writable: its upper layer is the sandbox's),
    // with a private /proc and /dev; the host's paths are not there.
    add(out, {"--bind", image_root, "/", "--proc", "/proc", "--dev", "/dev"});
  } else if (s.view &&
             (workdir.empty() || is_within(workdir, "/tmp") ||
              s.view->has(top.substr(1)) ||
              std::any_of(s.hidden.begin(), s.hidden.end(),
                          [&](auto& h) { return is_within(workdir, h); }))) {
    add(out, {"--ro-bind", s.view->path(), "/"});
    out.insert(out.end(), s.view_tail.begin(), s.view_tail.end());
  } else {
    out.insert(out.end(), s.host_view.begin(), s.host_view.end());
  }
  // /tmp and /dev/shm: the sandbox's own tmpfs (size and inode limits),
  // else (not root, or the probe) bwrap's, sized only.
  if (scratch) {
    add(out, {"--bind", host_dir + ".tmp", "/tmp"});
    add(out, {"--bind", host_dir + ".shm", "/dev/shm"});
  } else {
    auto bytes = s.default_disk_mib * 1024 * 1024;
    add_scratch(out, "/dev/shm", bytes);
    add_scratch(out, "/tmp", bytes);
  }
  auto dir = workdir.empty() ? std::string{"/"} : workdir;
  if (!host_dir.empty())
    add(out, {"--bind", host_dir, workdir});
  // An absolute cwd is the sandbox's own path (sandbox/places.hpp).
  add(out, {"--chdir", cwd.empty()          ? dir
                       : cwd.front() == '/' ? cwd
                                            : dir + "/" + cwd});
  bwrap_argv result;
  if (s.privileged && uid >= 0) {
    // bwrap as root keeps the host's uid 0 (without a user namespace):
    // sv-drop (freestanding: no loader, no libc, it reads no variable) or
    // setpriv drops to the sandbox's own uid before the command runs. Both
    // run as root with the command's environment, which holds no variable
    // that steers the loader or libc (refused at the provider's door).
    add(out, {"--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"});
    if (!s.drop.empty()) {
      // In an image the host's path is not there.
      auto inside =
        image_root.empty() ? s.drop_inside : std::string{drop_mount_point};
      if (inside != s.drop)
        add(out, {"--ro-bind", s.drop, inside});
      auto id = std::to_string(uid);
      result.command = {inside, id, id, "--"};
    } else
      result.command = {s.setpriv,
                        "--reuid=" + std::to_string(uid),
                        "--regid=" + std::to_string(uid),
                        "--clear-groups",
                        "--inh-caps=-all",
                        "--bounding-set=-all",
                        "--no-new-privs",
                        "--"};
  } else if (!s.privileged) {
    add(out, {"--unshare-user", "--disable-userns"});
  }
  result.command.insert(result.command.end(), argv.begin(), argv.end());
  result.options = std::move(out);
  return result;
}

std::vector<std::string> bwrap_argv::flat() const {
  auto out = options;
  out.push_back("--");
  out.insert(out.end(), command.begin(), command.end());
  return out;
}

} // namespace sv::detail
