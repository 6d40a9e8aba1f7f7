#include "providers/local/detail/host/mounts.hpp"

#include "providers/local/detail/host/trusted_dir.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <linux/magic.h>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

namespace sv::detail {

namespace {

/// Undoes mountinfo's octal escapes ("\040" for a space).
std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      auto digits = s.substr(i + 1, 3);
      if (digits.find_first_not_of("01234567") == std::string::npos) {
        out += static_cast<char>(std::stoi(digits, nullptr, 8));
        i += 3;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

} // namespace

uint64_t tmpfs_inodes(uint64_t bytes) {
  return std::max<uint64_t>(4096, bytes / 8192);
}

void mount_sandbox_tmpfs(const std::string& path, uint64_t bytes, int64_t uid,
                         const char* mode) {
  std::string options = "size=" + std::to_string(bytes) + ",mode=" + mode;
  options += ",nr_inodes=" + std::to_string(tmpfs_inodes(bytes));
  if (uid >= 0)
    options += ",uid=" + std::to_string(uid) + ",gid=" + std::to_string(uid);
  if (::mount("sv-sandbox", path.c_str(), "tmpfs", MS_NOSUID | MS_NODEV,
              options.c_str()) != 0)
    throw std::runtime_error("cannot mount a tmpfs on " + path + ": " +
                             std::strerror(errno));
}

std::vector<std::string> mounts_below(const std::string& path) {
  std::vector<std::string> out;
  std::ifstream in{"/proc/self/mountinfo"};
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields{line};
    std::string id, parent, dev, root, point;
    fields >> id >> parent >> dev >> root >> point;
    point = unescape(point);
    if (point == path ||
        (point.size() > path.size() &&
         point.compare(0, path.size(), path) == 0 && point[path.size()] == '/'))
      out.push_back(point);
  }
  return out;
}

std::string unmount_tree(const std::string& path) {
  auto points = mounts_below(path);
  // Deepest first; a path mounted twice appears twice and is unmounted
  // twice.
  std::stable_sort(points.begin(), points.end(),
                   [](const std::string& a, const std::string& b) {
                     return a.size() > b.size();
                   });
  std::string failed;
  for (auto& point : points) {
    if (::umount2(point.c_str(), UMOUNT_NOFOLLOW) == 0)
      continue;
    if (errno == EBUSY &&
        ::umount2(point.c_str(), UMOUNT_NOFOLLOW | MNT_DETACH) == 0)
      continue;
    if (errno == EINVAL || errno == ENOENT)
      continue; // gone already, with its parent
    failed += (failed.empty() ? "cannot unmount " : ", ") + point + ": " +
              std::strerror(errno);
  }
  return failed;
}

std::string remove_sandbox_dir(int root_fd, const std::string& root,
                               const std::string& name) {
  auto failed = unmount_tree(root + "/" + name);
  auto removed = remove_tree_at(root_fd, name);
  if (!removed.empty())
    failed += (failed.empty() ? "cannot remove " : "; cannot remove ") + root +
              "/" + name + ": " + removed;
  return failed;
}

bool dir_is_empty(int fd) {
  int copy = ::openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (copy < 0)
    return false;
  auto* dir = ::fdopendir(copy);
  if (dir == nullptr) {
    ::close(copy);
    return false;
  }
  bool empty = true;
  while (auto* e = ::readdir(dir)) {
    std::string_view name{e->d_name};
    if (name != "." && name != "..") {
      empty = false;
      break;
    }
  }
  ::closedir(dir);
  return empty;
}

bool is_mount_at(int fd, int parent_fd, const std::string& name) {
  struct statfs fs;
  struct stat own, at, parent;
  return ::fstatfs(fd, &fs) == 0 && fs.f_type == TMPFS_MAGIC &&
         ::fstat(fd, &own) == 0 && ::fstat(parent_fd, &parent) == 0 &&
         ::fstatat(parent_fd, name.c_str(), &at, AT_SYMLINK_NOFOLLOW) == 0 &&
         own.st_dev == at.st_dev && own.st_ino == at.st_ino &&
         own.st_dev != parent.st_dev;
}

} // namespace sv::detail
