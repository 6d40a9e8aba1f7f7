#include "providers/local/detail/sandbox/mount_points.hpp"

#include "providers/local/detail/host/unique_fd.hpp"
#include "providers/local/detail/isolation.hpp"
#include "providers/local/detail/sandbox/sandbox.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace sv::detail {

namespace {

std::vector<std::string> components(const std::string& rel) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < rel.size()) {
    auto end = rel.find('/', start);
    if (end == std::string::npos)
      end = rel.size();
    if (end > start)
      out.push_back(rel.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::string fail(const std::string& what, const std::string& shown) {
  return "cannot make the mount point " + shown + ": " + what + ": " +
         std::strerror(errno);
}

/// Root's, and writable by nobody else unless sticky.
bool safe_owner_and_mode(const struct stat& st) {
  return st.st_uid == 0 && st.st_gid == 0 &&
         ((st.st_mode & 022) == 0 || (st.st_mode & S_ISVTX) != 0);
}

/// Opens `name` in `dir` without following a symlink, as a directory or a
/// regular file (never blocking on a FIFO), or -1.
int open_entry(int dir, const std::string& name, bool file) {
  int flags = O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY |
              (file ? O_NONBLOCK : O_DIRECTORY);
  return ::openat(dir, name.c_str(), flags);
}

/// One component: made the right type, root's, not writable by others
/// unless sticky. Returns its descriptor, or -1 with `why` set.
int fix_entry(int dir, const std::string& name, bool file,
              const std::string& shown, std::string& why) {
  struct stat st;
  bool exists = ::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
  if (!exists && errno != ENOENT) {
    why = fail("cannot inspect it", shown);
    return -1;
  }
  if (exists && (file ? !S_ISREG(st.st_mode) : !S_ISDIR(st.st_mode))) {
    // A symlink (the image's or the sandbox's), a device, a FIFO, or a
    // directory where a file must be: removed (in an overlay, a whiteout).
    if (::unlinkat(dir, name.c_str(), S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0) !=
        0) {
      why = fail("cannot remove what is there", shown);
      return -1;
    }
    exists = false;
  }
  if (!exists) {
    int rc = 0;
    if (file) {
      int fd =
        ::openat(dir, name.c_str(),
                 O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0755);
      rc = fd < 0 ? -1 : ::close(fd);
    } else {
      rc = ::mkdirat(dir, name.c_str(), 0755);
    }
    if (rc != 0) {
      why = fail("cannot create it", shown);
      return -1;
    }
  }
  unique_fd fd{open_entry(dir, name, file)};
  if (!fd || ::fstat(fd.get(), &st) != 0 ||
      (file ? !S_ISREG(st.st_mode) : !S_ISDIR(st.st_mode))) {
    why = fail("cannot open it as a real " +
                 std::string{file ? "file" : "directory"},
               shown);
    return -1;
  }
  if ((st.st_uid != 0 || st.st_gid != 0) && ::fchown(fd.get(), 0, 0) != 0) {
    why = fail("cannot give it to root", shown);
    return -1;
  }
  auto mode = st.st_mode & 07777;
  if ((mode & 022) != 0 && (mode & S_ISVTX) == 0 &&
      ::fchmod(fd.get(), mode & ~mode_t{022}) != 0) {
    why = fail("cannot make it writable by root only", shown);
    return -1;
  }
  return fd.release();
}

/// Rejoins `parts[0..n)` as the sandbox sees them below `shown_root`.
std::string shown_path(const std::string& shown_root,
                       const std::vector<std::string>& parts, size_t n) {
  auto out = shown_root == "/" ? std::string{} : shown_root;
  for (size_t i = 0; i < n; ++i)
    out += "/" + parts[i];
  return out.empty() ? "/" : out;
}

} // namespace

std::string check_mount_root(int root_fd, const std::string& shown) {
  struct stat st;
  if (::fstat(root_fd, &st) != 0 || !S_ISDIR(st.st_mode))
    return "cannot inspect the root " + shown + ": " + std::strerror(errno);
  if (!safe_owner_and_mode(st))
    return "the root " + shown +
           " is not root's, or is writable by others without the sticky bit";
  return {};
}

std::string make_mount_point(int root_fd, const std::string& rel, bool file,
                             const std::string& shown) {
  auto parts = components(rel);
  if (parts.empty())
    return "cannot make the mount point " + shown + ": it is the root";
  for (auto& p : parts)
    if (p == "." || p == "..")
      return "cannot make the mount point " + shown + ": not normalized";
  if (auto why = check_mount_root(root_fd, shown); !why.empty())
    return why;
  // The root's own prefix ("/" or "/tmp") of the sandbox's path.
  auto root_shown = shown.substr(0, shown.size() - rel.size());
  while (root_shown.size() > 1 && root_shown.back() == '/')
    root_shown.pop_back();
  if (root_shown.empty())
    root_shown = "/";
  // Made.
  {
    unique_fd cur;
    int dir = root_fd;
    for (size_t i = 0; i < parts.size(); ++i) {
      std::string why;
      bool last = i + 1 == parts.size();
      unique_fd next{fix_entry(dir, parts[i], file && last,
                               shown_path(root_shown, parts, i + 1), why)};
      if (!next)
        return why;
      cur = std::move(next);
      dir = cur.get();
    }
  }
  // Checked, component by component from the root, never following a
  // symlink: what holds now, no process of the sandbox's uid can undo.
  unique_fd cur;
  int dir = root_fd;
  for (size_t i = 0; i < parts.size(); ++i) {
    bool last = i + 1 == parts.size();
    bool want_file = file && last;
    auto at = shown_path(root_shown, parts, i + 1);
    unique_fd next{open_entry(dir, parts[i], want_file)};
    struct stat st;
    if (!next || ::fstat(next.get(), &st) != 0)
      return fail("it changed while it was made", at);
    if ((want_file ? !S_ISREG(st.st_mode) : !S_ISDIR(st.st_mode)) ||
        !safe_owner_and_mode(st))
      return "cannot make the mount point " + at +
             ": it changed while it was made";
    cur = std::move(next);
    dir = cur.get();
  }
  return {};
}

std::string prepare_mount_points(const isolation_settings& iso,
                                 const local_sandbox& sb) {
  if (iso.mode != isolation_mode::bwrap)
    return {};
  auto& conf = sb.confinement;
  const auto& workdir = sb.workdir;
  bool in_tmp = path_within(workdir, "/tmp") && workdir != "/tmp";
  if (!conf.image_root.empty()) {
    auto name = sb.id + image_root_suffix;
    unique_fd top{::openat(sb.root_fd, name.c_str(),
                           O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)};
    unique_fd root{top
                     ? ::openat(top.get(), "merged",
                                O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                     : -1};
    if (!root)
      return "cannot open the sandbox's root " + conf.image_root + ": " +
             std::strerror(errno);
    std::vector<std::string> dirs{"/proc", "/dev", "/tmp"};
    if (!in_tmp && workdir.size() > 1 && workdir.front() == '/')
      dirs.push_back(workdir);
    for (auto& d : dirs)
      if (auto why = make_mount_point(root.get(), d.substr(1), false, d);
          !why.empty())
        return why;
    // The uid drop's file: bwrap binds sv-drop on it.
    std::string drop{drop_mount_point};
    if (iso.privileged && !iso.drop.empty())
      if (auto why = make_mount_point(root.get(), drop.substr(1), true, drop);
          !why.empty())
        return why;
  }
  // A workdir below /tmp: bwrap mounts it in the sandbox's own /tmp, which
  // the sandbox writes between (and during) its execs.
  if (in_tmp && conf.scratch) {
    auto name = sb.id + scratch_suffixes[0];
    unique_fd root{::openat(sb.root_fd, name.c_str(),
                            O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)};
    if (!root)
      return "cannot open the sandbox's /tmp: " +
             std::string{std::strerror(errno)};
    if (auto why =
          make_mount_point(root.get(), workdir.substr(5), false, workdir);
        !why.empty())
      return why;
  }
  return {};
}

} // namespace sv::detail
