#include "providers/local/detail/sandbox/lifecycle.hpp"

#include "messages/errors.hpp"
#include "providers/local/detail/host/mounts.hpp"
#include "providers/local/detail/host/netns.hpp"
#include "providers/local/detail/host/process.hpp"
#include "providers/local/detail/image/store.hpp"
#include "providers/local/detail/isolation.hpp"
#include "providers/local/detail/sandbox/confined_fs.hpp"
#include "providers/local/detail/sandbox/exec.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sv::detail {

namespace {

constexpr uint64_t mib = 1024 * 1024;

/// Removes the directory of sandbox `id` and its /tmp and /dev/shm.
std::string remove_sandbox_dirs(int root_fd, const std::string& root,
                                const std::string& id) {
  std::string failed;
  for (auto* suffix :
       {"", scratch_suffixes[0], scratch_suffixes[1], image_root_suffix})
    if (auto err = remove_sandbox_dir(root_fd, root, id + suffix); !err.empty())
      failed += (failed.empty() ? "" : "; ") + err;
  return failed;
}

} // namespace

sandbox_shape shape_of(const isolation_settings& iso,
                       const sandbox_spec& spec) {
  auto& res = spec.resources;
  sandbox_shape out;
  out.disk_bytes =
    res.disk_gib > 0
      ? static_cast<uint64_t>(std::ceil(res.disk_gib * 1024)) * mib
      : iso.default_disk_mib * mib;
  out.memory_bytes = res.memory_mib > 0
                       ? static_cast<uint64_t>(res.memory_mib) * mib
                       : iso.default_memory_mib * mib;
  out.cpus = res.cpu;
  return out;
}

std::shared_ptr<local_sandbox>
prepare_local_sandbox(const isolation_settings& iso, int root_fd,
                      const std::string& root, const std::string& id,
                      const sandbox_shape& shape, io_strand strand) {
  auto path = root + "/" + id;
  sandbox_confinement conf;
  conf.disk_bytes = shape.disk_bytes;
  if (iso.uids) {
    conf.uid = iso.uids->lease();
    if (conf.uid.uid < 0)
      throw std::runtime_error("all " + std::to_string(iso.uids->count()) +
                               " sandbox uids are in use");
  }
  if (::mkdirat(root_fd, id.c_str(), 0700) != 0)
    throw std::runtime_error("cannot create sandbox directory " + path + ": " +
                             std::strerror(errno));
  try {
    if (iso.tmpfs_dirs) {
      mount_sandbox_tmpfs(path, conf.disk_bytes, conf.uid.uid);
      conf.mounted = true;
    }
    if (iso.tmpfs_dirs && iso.mode == isolation_mode::bwrap) {
      conf.scratch = true; // removed below if a mount fails
      for (size_t i = 0; i < 2; ++i) {
        auto name = id + scratch_suffixes[i];
        if (::mkdirat(root_fd, name.c_str(), 0700) != 0)
          throw std::runtime_error("cannot create " + root + "/" + name + ": " +
                                   std::strerror(errno));
        mount_sandbox_tmpfs(root + "/" + name,
                            scratch_bytes(conf.disk_bytes, i), -1, "1777");
      }
    }
    cgroup_limits limits;
    limits.max_processes = iso.max_processes;
    limits.memory_bytes = shape.memory_bytes;
    limits.cpus = shape.cpus;
    conf.cgroups = sandbox_cgroups{iso.cgroups, id, limits};
    if (iso.mode == isolation_mode::bwrap && iso.privileged)
      conf.netns = make_empty_netns();
    unique_fd dir{::openat(root_fd, id.c_str(),
                           O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)};
    if (!dir)
      throw std::runtime_error("cannot open sandbox directory " + path + ": " +
                               std::strerror(errno));
    auto sb = std::make_shared<local_sandbox>(strand, id, path, std::move(dir),
                                              env_map{});
    sb->root_fd = root_fd;
    sb->root = root;
    sb->workdir = path;
    sb->confinement = std::move(conf);
    return sb;
  } catch (...) {
    conf.cgroups.remove();
    remove_sandbox_dirs(root_fd, root, id);
    throw;
  }
}

void attach_image(const isolation_settings& iso, local_sandbox& sb,
                  std::shared_ptr<const image_tree> image) {
  if (iso.mode != isolation_mode::bwrap || !iso.privileged)
    throw fs_error(provider_errc::invalid_argument,
                   "image: runs only under isolation \"bwrap\" with the "
                   "provider as root (it mounts the image's overlay)");
  if (iso.drop.empty())
    throw fs_error(provider_errc::invalid_argument,
                   "image: needs sv-drop (built with the provider), which "
                   "drops to the sandbox's uid without the host's libc");
  auto& conf = sb.confinement;
  // Started on the host's view: never the image's interpreter.
  conf.warm.reset();
  auto name = sb.id + image_root_suffix;
  auto dir = sb.root + "/" + name;
  if (::mkdirat(sb.root_fd, name.c_str(), 0700) != 0)
    throw std::runtime_error("cannot create " + dir + ": " +
                             std::strerror(errno));
  // Whatever the sandbox writes outside its directory, /tmp and /dev/shm,
  // bounded like its directory.
  mount_sandbox_tmpfs(dir, conf.disk_bytes, -1, "0700");
  auto upper = dir + "/upper";
  auto work = dir + "/work";
  auto merged = dir + "/merged";
  for (auto* path : {&upper, &work, &merged})
    if (::mkdir(path->c_str(), 0755) != 0)
      throw std::runtime_error("cannot create " + *path + ": " +
                               std::strerror(errno));
  // The root directory is root's and sticky, like /tmp: `mkdir -p /tests`
  // works, but the sandbox cannot rename or remove what it does not own,
  // such as the mount points the provider makes in it for bwrap
  // (mount_points.hpp).
  if (::chmod(upper.c_str(), 01777) != 0)
    throw std::runtime_error("cannot chmod " + upper + ": " +
                             std::strerror(errno));
  auto options =
    "lowerdir=" + image->rootfs + ",upperdir=" + upper + ",workdir=" + work;
  if (::mount("sv-image", merged.c_str(), "overlay", MS_NOSUID | MS_NODEV,
              options.c_str()) != 0)
    throw std::runtime_error("cannot mount the image's overlay on " + merged +
                             ": " + std::strerror(errno));
  conf.image = std::move(image);
  conf.image_root = merged;
}

void assign_spec(const isolation_settings& iso, local_sandbox& sb,
                 const sandbox_spec& spec) {
  sb.env.clear();
  // The image's environment, under the spec's.
  if (sb.confinement.image)
    for (auto& [k, v] : sb.confinement.image->env)
      sb.env[k] = v;
  for (auto& [k, v] : spec.env)
    sb.env[k] = v;
  sb.workdir = iso.mode == isolation_mode::bwrap ? spec.workdir : sb.path;
  sb.workdir_alias.clear();
  if (iso.mode != isolation_mode::bwrap && spec.workdir.size() > 1 &&
      spec.workdir.front() == '/' && spec.workdir != sb.path)
    sb.workdir_alias = spec.workdir;
  while (sb.workdir_alias.size() > 1 && sb.workdir_alias.back() == '/')
    sb.workdir_alias.pop_back();
}

std::shared_ptr<local_sandbox>
make_local_sandbox(const isolation_settings& iso, int root_fd,
                   const std::string& root, const std::string& id,
                   const sandbox_spec& spec, io_strand strand) {
  if (auto why = check_workdir(iso, spec.workdir); !why.empty())
    throw fs_error(provider_errc::invalid_argument, why);
  auto sb =
    prepare_local_sandbox(iso, root_fd, root, id, shape_of(iso, spec), strand);
  assign_spec(iso, *sb, spec);
  return sb;
}

std::string check_unused(const isolation_settings& iso,
                         const local_sandbox& sb) {
  auto& conf = sb.confinement;
  if (!sb.execs.empty() || sb.torn_down)
    return "it ran a command";
  if (iso.uids && conf.uid.uid < 0)
    return "it holds no uid";
  if (iso.mode == isolation_mode::bwrap && iso.privileged && !conf.netns)
    return "it has no network namespace";
  // The directory (and /tmp, /dev/shm): still empty, still the tmpfs
  // mounted for it at its path.
  auto check_dir = [&](int fd, const std::string& name) -> std::string {
    if (!dir_is_empty(fd))
      return name + " is not empty";
    if (conf.mounted && !is_mount_at(fd, sb.root_fd, name))
      return name + " is no longer its tmpfs";
    return {};
  };
  if (auto why = check_dir(sb.dir.get(), sb.id); !why.empty())
    return why;
  if (conf.scratch)
    for (auto* suffix : scratch_suffixes) {
      auto name = sb.id + suffix;
      unique_fd fd{::openat(sb.root_fd, name.c_str(),
                            O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)};
      if (!fd)
        return name + " is gone";
      if (auto why = check_dir(fd.get(), name); !why.empty())
        return why;
    }
  // A warm interpreter is the one process its cgroups may hold.
  if (conf.warm && !conf.warm->waiting())
    return "its warm interpreter exited";
  return conf.cgroups.check_unused(static_cast<bool>(conf.warm));
}

caf::error teardown_local_sandbox(local_sandbox& sb) {
  // The groups first: cheap. Then the cgroups, which hold every process
  // however it was started, with forks refused. Only a sandbox without
  // cgroups needs the sweep of every host process for its marker (it reads
  // the environment of each one: costly on a busy host).
  for (auto& entry : sb.execs)
    kill_for_stop(*entry.second);
  auto& conf = sb.confinement;
  conf.warm.reset(); // killed and reaped
  auto survivors = conf.cgroups.kill_all(false);
  if (!conf.cgroups.active()) {
    auto marker = sandbox_marker(sb.id);
    survivors +=
      kill_matching([&marker](pid_t p) { return has_env_entry(p, marker); });
  }
  // Whatever still runs as the sandbox's uid (it left the cgroups, or was
  // never in them): the uid is only given back when nothing of it lives.
  if (auto uid = conf.uid.uid; uid >= 0 && survivors == 0)
    survivors +=
      kill_matching([uid](pid_t p) { return process_has_uid(p, uid); });
  // The cgroups before the directory: a directory gone means everything
  // but the uid is gone.
  std::string failed = survivors == 0 ? conf.cgroups.remove() : "";
  sb.dir.reset();
  // The namespace goes with its last process, or now.
  conf.netns.reset();
  // Unmounting a tmpfs frees all of it in one step, however many files it
  // holds (at most its nr_inodes): no walk of the tree.
  auto removed = remove_sandbox_dirs(sb.root_fd, sb.root, sb.id);
  if (!removed.empty())
    failed += (failed.empty() ? "" : "; ") + removed;
  if (survivors > 0)
    return make_error(provider_errc::sandbox_error,
                      std::to_string(survivors) + " processes of sandbox " +
                        sb.id + " survived SIGKILL");
  if (!failed.empty())
    return make_error(provider_errc::io_error, failed);
  // Only now may another sandbox get the uid: nothing of this one is left.
  conf.uid.release();
  conf.image.reset();
  return caf::none;
}

} // namespace sv::detail
