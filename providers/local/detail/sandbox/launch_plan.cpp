#include "providers/local/detail/sandbox/launch_plan.hpp"

#include "providers/local/detail/host/process.hpp"
#include "providers/local/detail/host/seccomp.hpp"
#include "providers/local/detail/isolation.hpp"
#include "providers/local/detail/sandbox/confined_fs.hpp"
#include "providers/local/detail/sandbox/mount_points.hpp"
#include "providers/local/detail/sandbox/places.hpp"
#include "providers/local/detail/sandbox/sandbox.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace sv::detail {

namespace {

env_map build_env(const local_sandbox& sb, const env_map& extra) {
  // Never the service's own environment: secrets must not reach a runner.
  env_map env{{"PATH", sandbox_path},
              {"HOME", sb.workdir},
              {"LANG", "C.UTF-8"},
              {"PYTHONDONTWRITEBYTECODE", "1"}};
  for (auto& [k, v] : sb.env)
    env[k] = v;
  for (auto& [k, v] : extra)
    env[k] = v;
  // Last, so no request can remove the marker stop relies on.
  env["SV_SANDBOX_ID"] = sb.id;
  return env;
}

std::vector<std::string> env_entries(const env_map& env) {
  std::vector<std::string> out;
  out.reserve(env.size());
  for (auto& [k, v] : env)
    out.push_back(k + "=" + v);
  return out;
}

std::vector<std::pair<int, rlim_t>> limits_for(const local_sandbox& sb,
                                               const isolation_settings& iso) {
  // No core files: they would fill the sandbox's disk for nothing.
  std::vector<std::pair<int, rlim_t>> out{{RLIMIT_CORE, 0}};
  // Counted per uid, so it only means something for a uid of its own.
  if (sb.confinement.uid.uid >= 0 && iso.max_processes > 0)
    out.emplace_back(RLIMIT_NPROC, iso.max_processes);
  // A tmpfs of its own bounds the sandbox's disk with a plain ENOSPC;
  // without one, a file size limit is all that holds (per file).
  if (!sb.confinement.mounted && sb.confinement.disk_bytes > 0)
    out.emplace_back(RLIMIT_FSIZE, sb.confinement.disk_bytes);
  return out;
}

/// A memfd of `args` after argv[0], each ended by a NUL, at offset 0
/// (bwrap reads it once, at start).
unique_fd args_file(const std::vector<std::string>& args) {
  std::string text;
  for (size_t i = 1; i < args.size(); ++i) {
    // A NUL inside an argument would end it early and start another
    // option of bwrap's (which runs as root): refused, never split.
    if (args[i].find('\0') != std::string::npos) {
      errno = EINVAL;
      return unique_fd{};
    }
    text.append(args[i]).push_back('\0');
  }
  unique_fd fd{::memfd_create("sv-bwrap-args", MFD_CLOEXEC)};
  if (!fd)
    return fd;
  size_t done = 0;
  while (done < text.size()) {
    auto n = ::write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return unique_fd{};
    done += static_cast<size_t>(n);
  }
  if (::lseek(fd.get(), 0, SEEK_SET) != 0)
    return unique_fd{};
  return fd;
}

/// The first executable regular file `name` in `path_list` as the image's
/// root `root` shows it (its symlinks resolved inside it), or "".
std::string find_in_image(const std::string& root, const std::string& name,
                          const std::string& path_list) {
  unique_fd dir{
    ::open(root.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)};
  if (!dir)
    return {};
  size_t start = 0;
  while (start <= path_list.size()) {
    auto end = path_list.find(':', start);
    if (end == std::string::npos)
      end = path_list.size();
    auto entry = path_list.substr(start, end - start);
    start = end + 1;
    if (entry.empty() || entry.front() != '/')
      continue;
    auto path = entry + "/" + name;
    open_how how{};
    how.flags = O_PATH | O_CLOEXEC;
    how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
    unique_fd fd{static_cast<int>(
      ::syscall(SYS_openat2, dir.get(), path.c_str(), &how, sizeof how))};
    struct stat st;
    if (fd && ::fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode) &&
        (st.st_mode & 0111) != 0)
      return path;
  }
  return {};
}

/// Resolves argv[0] of a sandbox that runs an image, in the image: the
/// interpreter's names run the image's python3 (or python).
void resolve_in_image(const local_sandbox& sb, const env_map& env,
                      const exec_settings& cfg, launch_plan& p) {
  const auto& name = p.argv.front();
  auto path_var = env.count("PATH") ? env.at("PATH") : sandbox_path;
  const auto& root = sb.confinement.image_root;
  if (name == cfg.python_name || name == "python3" || name == "python") {
    for (auto* candidate : {name == "python" ? "python" : "python3",
                            name == "python" ? "python3" : "python"}) {
      p.program = find_in_image(root, candidate, path_var);
      if (!p.program.empty())
        break;
    }
    if (p.program.empty())
      p.error = "the image has no python3 or python on PATH " + path_var;
  } else if (name.find('/') != std::string::npos) {
    p.program = name; // resolved by the sandbox itself
  } else {
    p.program = find_in_image(root, name, path_var);
    if (p.program.empty())
      p.error =
        "program \"" + name + "\" not found in the image on PATH " + path_var;
  }
  if (!p.program.empty())
    p.argv.front() = p.program;
}

} // namespace

std::string sandbox_marker(const std::string& sandbox_id) {
  return "SV_SANDBOX_ID=" + sandbox_id;
}

launch_plan make_launch_plan(const local_sandbox& sb, const exec_request& req,
                             const exec_settings& cfg) {
  launch_plan p;
  auto cwd = locate(sb, req.cwd);
  p.cwd = open_confined_dir(cwd.base, cwd.rel, false, -1, cwd.shown);
  if (!req.log_path.empty()) {
    auto log = locate_file(sb, req.log_path);
    p.log =
      open_confined_log(log.base, log.rel, sb.confinement.uid.uid, log.shown);
  }
  p.timeout_s = req.timeout_s;
  auto env = build_env(sb, req.env);
  p.env = env_entries(env);
  p.argv = req.argv;
  const auto& name = req.argv.front();
  if (sb.confinement.image) {
    resolve_in_image(sb, env, cfg, p);
  } else if (name == cfg.python_name || name == "python3" || name == "python") {
    p.program = cfg.python_path;
    p.argv.front() = cfg.python_path;
  } else if (name.find('/') != std::string::npos) {
    p.program = name;
    // Without isolation the command sees the host's paths: checked here,
    // as it will see them. Under bwrap the sandbox resolves it in its own
    // view (its exec fails with 127, or bwrap cannot start it): a check on
    // the host, as root, would tell a caller which host paths exist.
    if (cfg.isolation->mode != isolation_mode::bwrap &&
        ::faccessat(p.cwd.get(), name.c_str(), X_OK, 0) != 0)
      p.error = "cannot run " + name + ": " + std::strerror(errno);
  } else {
    p.program = find_program(name, sandbox_path);
    if (p.program.empty())
      p.error = "program \"" + name + "\" not found on PATH " + sandbox_path;
  }
  const auto& iso = *cfg.isolation;
  p.max_output = iso.max_log_bytes;
  p.rlimits = limits_for(sb, iso);
  p.nice = iso.nice;
  if (iso.mode == isolation_mode::bwrap && p.error.empty())
    // bwrap, as root, follows symlinks where it mounts: the provider makes
    // every destination in a tree the sandbox controls first.
    p.error = prepare_mount_points(iso, sb);
  if (iso.mode == isolation_mode::bwrap && iso.privileged && p.error.empty() &&
      !sb.confinement.image && p.program == cfg.python_path) {
    p.warm_key_set = true;
    p.warm_key.program = p.program;
    p.warm_key.env = p.env;
    p.warm_key.workdir = sb.workdir;
    p.warm_key.rlimits = p.rlimits;
    p.warm_key.nice = p.nice;
    // `python script args`: the interpreter's own options run cold. A
    // user site in the workdir (HOME) would be read by a cold start only.
    p.warm_candidate =
      p.argv.size() >= 2 && !p.argv[1].empty() && p.argv[1].front() != '-' &&
      ::faccessat(sb.dir.get(), ".local", F_OK, AT_SYMLINK_NOFOLLOW) != 0;
    if (p.warm_candidate) {
      auto dir = sb.workdir.empty() ? std::string{"/"} : sb.workdir;
      p.warm_cwd = req.cwd.empty()          ? dir
                   : req.cwd.front() == '/' ? req.cwd
                                            : dir + "/" + req.cwd;
      p.warm_argv.assign(p.argv.begin() + 1, p.argv.end());
    }
  }
  if (iso.mode == isolation_mode::bwrap && p.error.empty()) {
    auto argv = std::move(p.argv);
    argv.front() = p.program;
    auto args = bwrap_command(
      iso, sb.path, sb.workdir, req.cwd, sb.confinement.uid.uid, argv, env,
      sb.confinement.scratch, static_cast<bool>(sb.confinement.netns),
      sb.confinement.image_root);
    // The options (with the command's environment) in a file, not on a
    // command line that anyone on the host may read.
    p.args = args_file(args.options);
    if (!p.args)
      p.error =
        std::string{"cannot pass bwrap its arguments: "} + std::strerror(errno);
    p.argv = {iso.bwrap, "--args", "5", "--"};
    p.argv.insert(p.argv.end(), args.command.begin(), args.command.end());
    p.program = iso.bwrap;
    p.bwrap = true;
    // bwrap runs as root: a fixed environment, never the command's
    // (bwrap_command sets that inside, --clearenv and --setenv). The marker
    // stays, so a sweep by environment finds bwrap too.
    p.env = {launcher_env_path, sandbox_marker(sb.id)};
    if (iso.seccomp) {
      p.seccomp.reset(iso.seccomp->open_program());
      if (!p.seccomp)
        p.error = std::string{"cannot open the seccomp program: "} +
                  std::strerror(errno);
    }
  }
  return p;
}

} // namespace sv::detail
