#include "providers/local/detail/host/trusted_dir.hpp"

#include <cerrno>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>
#include <vector>

namespace sv::detail {

namespace {

constexpr int dir_flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;

[[noreturn]] void refuse(const std::string& root, const std::string& why) {
  throw std::runtime_error(
    "local provider: refusing the sandbox root " + root + ": " + why +
    "; root mounts and removes trees there, so it must be a real "
    "directory (no symlink on the way) owned by uid " +
    std::to_string(::geteuid()) +
    " and writable by nobody else: fix it or set the provider's \"root\" "
    "setting to another directory");
}

void check_component(const std::string& root, const std::string& so_far,
                     const struct stat& st, bool last) {
  auto me = ::geteuid();
  if (last) {
    if (st.st_uid != me)
      refuse(root, "it is owned by uid " + std::to_string(st.st_uid));
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
      refuse(root, "it is writable by its group or others");
    return;
  }
  if (st.st_uid != 0 && st.st_uid != me)
    refuse(root, so_far + " is owned by uid " + std::to_string(st.st_uid));
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0)
    refuse(root, so_far + " is writable by others and not sticky");
}

std::string failure(const char* what, const std::string& name) {
  return std::string{what} + " " + name + ": " + std::strerror(errno);
}

/// One directory of the walk: its name in the level above and its inode.
struct level {
  std::string name;
  ino_t ino;
};

/// Unlinks every non-directory in `fd`; returns the name of a
/// subdirectory (on the same device) to descend into, or "" when none is
/// left. Sets `failed` on an error or a mount point.
std::string clear_files(int fd, dev_t dev, std::string& failed) {
  unique_fd copy{::fcntl(fd, F_DUPFD_CLOEXEC, 0)};
  DIR* dir = copy ? ::fdopendir(copy.get()) : nullptr;
  if (dir == nullptr) {
    failed = failure("cannot read", "a directory");
    return {};
  }
  copy.release(); // closedir closes it
  std::string subdir;
  while (auto* e = ::readdir(dir)) {
    std::string name = e->d_name;
    if (name == "." || name == "..")
      continue;
    struct stat st;
    if (::fstatat(fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT)
        continue;
      failed = failure("cannot stat", name);
      break;
    }
    if (S_ISDIR(st.st_mode)) {
      if (st.st_dev != dev) {
        failed = "a mount point is left at " + name;
        break;
      }
      subdir = name;
      break;
    }
    if (::unlinkat(fd, name.c_str(), 0) != 0 && errno != ENOENT) {
      failed = failure("cannot remove", name);
      break;
    }
  }
  ::closedir(dir);
  return failed.empty() ? subdir : std::string{};
}

} // namespace

unique_fd open_trusted_dir(const std::string& path) {
  if (path.empty() || path.front() != '/')
    refuse(path, "not an absolute path");
  unique_fd fd{::open("/", dir_flags)};
  std::string so_far;
  size_t pos = 1;
  struct stat st;
  while (fd) {
    auto end = path.find('/', pos);
    auto part = path.substr(pos, end == std::string::npos ? end : end - pos);
    bool last = end == std::string::npos || end + 1 >= path.size();
    if (::fstat(fd.get(), &st) != 0)
      refuse(path, failure("cannot stat", so_far.empty() ? "/" : so_far));
    check_component(path, so_far.empty() ? "/" : so_far, st, false);
    if (part.empty() || part == "." || part == "..")
      refuse(path, "not a normalized path");
    so_far += "/" + part;
    unique_fd next{::openat(fd.get(), part.c_str(), dir_flags)};
    if (!next)
      refuse(path, errno == ELOOP || errno == ENOTDIR
                     ? so_far + " is a symlink or not a directory"
                     : failure("cannot open", so_far));
    fd = std::move(next);
    if (last)
      break;
    pos = end + 1;
  }
  if (!fd || ::fstat(fd.get(), &st) != 0)
    refuse(path, "cannot open it");
  check_component(path, path, st, true);
  return fd;
}

std::string remove_tree_at(int dirfd, const std::string& name) {
  struct stat st;
  if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
    return errno == ENOENT ? "" : failure("cannot stat", name);
  if (!S_ISDIR(st.st_mode))
    return ::unlinkat(dirfd, name.c_str(), 0) == 0 || errno == ENOENT
             ? ""
             : failure("cannot remove", name);
  struct stat parent;
  if (::fstat(dirfd, &parent) != 0)
    return failure("cannot stat the parent of", name);
  if (st.st_dev != parent.st_dev)
    return name + " is still a mount point";
  auto dev = st.st_dev;
  // Depth first, without recursion (a tree may be deep) and with one
  // descriptor open: a level is found again through "..", checked by its
  // inode, never through a path. Nothing of the sandbox runs any more.
  std::vector<level> path{level{name, st.st_ino}};
  unique_fd cur{::openat(dirfd, name.c_str(), dir_flags)};
  if (!cur)
    return failure("cannot open", name);
  std::string failed;
  while (failed.empty()) {
    auto sub = clear_files(cur.get(), dev, failed);
    if (!failed.empty())
      break;
    if (!sub.empty()) {
      unique_fd fd{::openat(cur.get(), sub.c_str(), dir_flags)};
      struct stat sst;
      if (!fd || ::fstat(fd.get(), &sst) != 0 || sst.st_dev != dev) {
        failed = "cannot enter " + sub;
        break;
      }
      path.push_back(level{sub, sst.st_ino});
      cur = std::move(fd);
      continue;
    }
    // Empty now: remove it from the level above.
    auto done = std::move(path.back());
    path.pop_back();
    if (path.empty()) {
      cur.reset();
      if (::unlinkat(dirfd, done.name.c_str(), AT_REMOVEDIR) != 0 &&
          errno != ENOENT)
        failed = failure("cannot remove", done.name);
      break;
    }
    unique_fd up{::openat(cur.get(), "..", dir_flags)};
    struct stat ust;
    if (!up || ::fstat(up.get(), &ust) != 0 || ust.st_ino != path.back().ino ||
        ust.st_dev != dev) {
      failed = "the tree moved while it was removed, at " + done.name;
      break;
    }
    cur = std::move(up);
    if (::unlinkat(cur.get(), done.name.c_str(), AT_REMOVEDIR) != 0 &&
        errno != ENOENT)
      failed = failure("cannot remove", done.name);
  }
  return failed;
}

} // namespace sv::detail
