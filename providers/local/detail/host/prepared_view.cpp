#include "providers/local/detail/host/prepared_view.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <stdexcept>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sv::detail {

namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path) {
  throw std::runtime_error("preparing the sandbox view: " + what + " " + path +
                           ": " + std::strerror(errno));
}

/// Makes `dir` a private mount of its own (once: a bind onto itself), so
/// that views mounted below it never propagate into the host's peers (on a
/// systemd host /run is shared, and a service's private namespace would
/// keep a copy of every view after its provider detached it).
void make_private_mount(const char* dir) {
  struct statx sx {};
  if (::statx(AT_FDCWD, dir, AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, &sx) != 0)
    fail("statx", dir);
  bool mount_root = (sx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) != 0 &&
                    (sx.stx_attributes & STATX_ATTR_MOUNT_ROOT) != 0;
  if (!mount_root && ::mount(dir, dir, nullptr, MS_BIND, nullptr) != 0)
    fail("bind onto itself", dir);
  if (::mount(nullptr, dir, nullptr, MS_PRIVATE, nullptr) != 0)
    fail("make private", dir);
}

void detach(const std::string& dir) {
  ::umount2(dir.c_str(), MNT_DETACH);
  ::rmdir(dir.c_str());
}

} // namespace

std::shared_ptr<const prepared_view>
prepared_view::make(const std::vector<view_entry>& entries) {
  static std::atomic<unsigned> counter{0};
  if (::mkdir(view_dir, 0700) != 0 && errno != EEXIST)
    fail("mkdir", view_dir);
  make_private_mount(view_dir);
  std::shared_ptr<prepared_view> v{new prepared_view};
  v->dir_ = std::string{view_dir} + "/" + std::to_string(::getpid()) + "-" +
            std::to_string(counter++);
  v->root_ = v->dir_ + "/v";
  auto& dir = v->dir_;
  auto& root = v->root_;
  ::rmdir(dir.c_str()); // a leftover of this pid's previous life, if empty
  if (::mkdir(dir.c_str(), 0700) != 0)
    fail("mkdir", dir);
  auto undo = [&](const std::string& what, const std::string& path) {
    auto saved = errno;
    detach(dir);
    errno = saved;
    fail(what, path);
  };
  if (::mount("sv-view", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV,
              "mode=0700,size=64k,nr_inodes=64") != 0) {
    auto saved = errno;
    ::rmdir(dir.c_str());
    errno = saved;
    fail("mount tmpfs on", dir);
  }
  if (::mount(nullptr, dir.c_str(), nullptr, MS_PRIVATE, nullptr) != 0 ||
      ::mount(nullptr, dir.c_str(), nullptr, MS_UNBINDABLE, nullptr) != 0)
    undo("make private and unbindable", dir);
  if (::mkdir(root.c_str(), 0755) != 0)
    undo("mkdir", root);
  if (::mount("sv-view", root.c_str(), "tmpfs", MS_NOSUID | MS_NODEV,
              "mode=0755,size=1m,nr_inodes=1024") != 0 ||
      ::mount(nullptr, root.c_str(), nullptr, MS_PRIVATE, nullptr) != 0)
    undo("mount tmpfs on", root);
  for (auto& e : entries) {
    auto at = root + "/" + e.name;
    switch (e.kind) {
    case view_entry::symlink:
      if (::symlink(e.target.c_str(), at.c_str()) != 0)
        undo("symlink", at);
      break;
    case view_entry::bind_dir:
    case view_entry::empty_dir:
      if (::mkdir(at.c_str(), 0755) != 0)
        undo("mkdir", at);
      // Not recursive: the entry's own file system, none of the mounts
      // below it. A copy of a host mount here would pin it: while the view
      // lives, nobody on the host could remove its mount point (rmdir is
      // EBUSY for a mount point of the caller's namespace), e.g. another
      // provider's sandbox directories or a container runtime's layers.
      if (e.kind == view_entry::bind_dir &&
          ::mount(e.target.c_str(), at.c_str(), nullptr, MS_BIND, nullptr) != 0)
        undo("bind " + e.target + " on", at);
      break;
    case view_entry::bind_file:
    case view_entry::empty_file: {
      auto fd =
        ::open(at.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd < 0)
        undo("create", at);
      ::close(fd);
      if (e.kind == view_entry::bind_file &&
          ::mount(e.target.c_str(), at.c_str(), nullptr, MS_BIND, nullptr) != 0)
        undo("bind " + e.target + " on", at);
      break;
    }
    }
    // Each bound entry read-only on the host side too (bwrap makes every
    // mount below read-only in the sandbox).
    if ((e.kind == view_entry::bind_dir || e.kind == view_entry::bind_file) &&
        ::mount(nullptr, at.c_str(), nullptr,
                MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV,
                nullptr) != 0 &&
        ::mount(nullptr, at.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY,
                nullptr) != 0)
      undo("remount read-only", at);
    v->names_.push_back(e.name);
  }
  // Host mounts made later under a bound directory (sandbox tmpfs below
  // the root) neither propagate in nor out; then the view's own root is
  // read-only.
  if (::mount(nullptr, root.c_str(), nullptr, MS_REC | MS_PRIVATE, nullptr) !=
        0 ||
      ::mount(nullptr, root.c_str(), nullptr,
              MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV,
              nullptr) != 0)
    undo("make private and read-only", root);
  std::sort(v->names_.begin(), v->names_.end());
  return v;
}

prepared_view::~prepared_view() {
  detach(dir_);
}

bool prepared_view::has(const std::string& name) const {
  return std::binary_search(names_.begin(), names_.end(), name);
}

size_t remove_stale_views() {
  size_t removed = 0;
  auto* d = ::opendir(view_dir);
  if (d == nullptr)
    return 0;
  std::vector<std::string> stale;
  while (auto* e = ::readdir(d)) {
    std::string name = e->d_name;
    auto dash = name.find('-');
    if (dash == std::string::npos || dash == 0 ||
        name.find_first_not_of("0123456789") != dash)
      continue;
    auto pid = static_cast<pid_t>(std::stol(name.substr(0, dash)));
    if (pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH)
      stale.push_back(std::string{view_dir} + "/" + name);
  }
  ::closedir(d);
  for (auto& dir : stale) {
    detach(dir);
    removed += ::access(dir.c_str(), F_OK) != 0;
  }
  return removed;
}

} // namespace sv::detail
