#include "providers/local/detail/sandbox/confined_fs.hpp"

#include "messages/validation.hpp"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>

namespace sv::detail {

fs_error::fs_error(provider_errc code, const std::string& what)
    : std::runtime_error(what), code_(code) {
  // nop
}

namespace {

[[noreturn]] void fail_errno(std::string_view path, const char* what, int err) {
  throw fs_error(provider_errc::io_error, std::string{what} + " " +
                                            std::string(path) + ": " +
                                            std::strerror(err));
}

/// `rel` as the caller named it: below `shown` when there is one.
std::string join_shown(std::string_view shown, std::string_view rel) {
  if (shown.empty())
    return std::string{rel};
  if (rel.empty())
    return std::string{shown};
  return std::string{shown} + "/" + std::string{rel};
}

void check_confined(std::string_view rel, std::string_view shown) {
  if (!is_confined_path(rel))
    throw fs_error(provider_errc::invalid_path,
                   "path \"" + join_shown(shown, rel) +
                     "\" escapes the sandbox (absolute, empty, '.' or "
                     "'..' component)");
}

/// Splits "a/b/c" into "a/b" and "c".
std::pair<std::string_view, std::string> split_last(std::string_view rel) {
  auto pos = rel.rfind('/');
  if (pos == std::string_view::npos)
    return {std::string_view{}, std::string{rel}};
  return {rel.substr(0, pos), std::string{rel.substr(pos + 1)}};
}

/// What kind of entry `st` describes, for messages.
const char* kind_of(const struct stat& st) {
  switch (st.st_mode & S_IFMT) {
  case S_IFREG:
    return "a regular file";
  case S_IFDIR:
    return "a directory";
  case S_IFLNK:
    return "a symlink";
  case S_IFIFO:
    return "a fifo";
  case S_IFSOCK:
    return "a socket";
  case S_IFCHR:
    return "a character device";
  case S_IFBLK:
    return "a block device";
  default:
    return "not a regular file";
  }
}

/// Turns a failed openat of a directory component into an fs_error.
[[noreturn]] void fail_dir_component(int dir, const std::string& name,
                                     std::string_view walked, int err) {
  struct stat st;
  if (err == ENOENT)
    throw fs_error(provider_errc::not_found,
                   std::string(walked) + " does not exist");
  if ((err == ELOOP || err == ENOTDIR) &&
      ::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (S_ISLNK(st.st_mode))
      throw fs_error(provider_errc::invalid_path,
                     std::string(walked) +
                       " is a symlink, refusing to follow it");
    throw fs_error(provider_errc::invalid_path, std::string(walked) + " is " +
                                                  kind_of(st) +
                                                  ", not a directory");
  }
  fail_errno(walked, "cannot open directory", err);
}

} // namespace

unique_fd open_confined_dir(int base, std::string_view rel, bool create,
                            int64_t owner, std::string_view shown) {
  unique_fd cur{::fcntl(base, F_DUPFD_CLOEXEC, 0)};
  if (!cur)
    fail_errno(join_shown(shown, rel),
               "cannot duplicate the sandbox descriptor for", errno);
  if (rel.empty())
    return cur;
  check_confined(rel, shown);
  size_t start = 0;
  while (start <= rel.size()) {
    auto end = rel.find('/', start);
    if (end == std::string_view::npos)
      end = rel.size();
    std::string name{rel.substr(start, end - start)};
    auto walked = join_shown(shown, rel.substr(0, end));
    bool made = create && ::mkdirat(cur.get(), name.c_str(), 0755) == 0;
    if (create && !made && errno != EEXIST)
      fail_errno(walked, "cannot create directory", errno);
    int fd = ::openat(cur.get(), name.c_str(),
                      O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
      fail_dir_component(cur.get(), name, walked, errno);
    cur.reset(fd);
    // Through the descriptor: the name may have been swapped meanwhile.
    if (made && owner >= 0 &&
        ::fchown(fd, static_cast<uid_t>(owner), static_cast<gid_t>(owner)) != 0)
      fail_errno(walked, "cannot hand over directory", errno);
    start = end + 1;
  }
  return cur;
}

void write_confined_file(int base, std::string_view rel,
                         std::string_view content, int64_t owner,
                         std::string_view shown) {
  check_confined(rel, shown);
  auto [dir_rel, name] = split_last(rel);
  auto dir = open_confined_dir(base, dir_rel, true, owner, shown);
  auto named = join_shown(shown, rel);
  // O_EXCL on a fresh name guarantees a new inode: whatever the runner left
  // under the final name is replaced by the rename, not written through.
  static std::atomic<uint64_t> counter{0};
  std::string tmp;
  unique_fd fd;
  for (int attempt = 0; !fd && attempt < 100; ++attempt) {
    // Short, so that a long final name cannot make it exceed NAME_MAX.
    tmp = ".sv-upload-" + std::to_string(::getpid()) + "-" +
          std::to_string(++counter);
    fd.reset(::openat(dir.get(), tmp.c_str(),
                      O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                      0644));
    if (!fd && errno != EEXIST)
      fail_errno(named, "cannot create", errno);
  }
  if (!fd)
    fail_errno(named, "cannot create", EEXIST);
  if (owner >= 0 && ::fchown(fd.get(), static_cast<uid_t>(owner),
                             static_cast<gid_t>(owner)) != 0) {
    int err = errno;
    ::unlinkat(dir.get(), tmp.c_str(), 0);
    fail_errno(named, "cannot hand over", err);
  }
  for (size_t done = 0; done < content.size();) {
    auto n = ::write(fd.get(), content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      int err = errno;
      ::unlinkat(dir.get(), tmp.c_str(), 0);
      fail_errno(named, "cannot write", err);
    }
    done += static_cast<size_t>(n);
  }
  fd.reset();
  if (::renameat(dir.get(), tmp.c_str(), dir.get(), name.c_str()) != 0) {
    int err = errno;
    ::unlinkat(dir.get(), tmp.c_str(), 0);
    if (err == EISDIR)
      throw fs_error(provider_errc::invalid_path, named + " is a directory");
    fail_errno(named, "cannot write", err);
  }
}

std::string read_confined_file(int base, std::string_view rel,
                               uint64_t max_bytes, std::string_view shown) {
  check_confined(rel, shown);
  auto [dir_rel, name] = split_last(rel);
  auto dir = open_confined_dir(base, dir_rel, false, -1, shown);
  auto named = join_shown(shown, rel);
  // O_PATH inspects the entry without opening it: a fifo would block and a
  // device could act on open.
  unique_fd probe{
    ::openat(dir.get(), name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC)};
  if (!probe && errno == ENOENT)
    throw fs_error(provider_errc::not_found, named + " does not exist");
  if (!probe)
    fail_errno(named, "cannot open", errno);
  struct stat st;
  if (::fstat(probe.get(), &st) != 0)
    fail_errno(named, "cannot stat", errno);
  if (S_ISLNK(st.st_mode))
    throw fs_error(provider_errc::not_regular_file,
                   named + " is a symlink, refusing to follow it");
  if (!S_ISREG(st.st_mode))
    throw fs_error(provider_errc::not_regular_file,
                   named + " is " + kind_of(st) + ", not a regular file");
  auto too_large = [&](uint64_t size) {
    return fs_error(provider_errc::too_large,
                    named + " is " + std::to_string(size) +
                      " bytes, over the " + std::to_string(max_bytes) +
                      " byte download cap");
  };
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    throw too_large(static_cast<uint64_t>(st.st_size));
  // Reopen for reading and make sure it is still the inode we checked.
  unique_fd fd{::openat(dir.get(), name.c_str(),
                        O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)};
  struct stat st2;
  if (!fd || ::fstat(fd.get(), &st2) != 0 || st2.st_ino != st.st_ino ||
      st2.st_dev != st.st_dev)
    throw fs_error(provider_errc::io_error,
                   named + " changed while being read");
  std::string out;
  char buf[65536];
  for (;;) {
    auto n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      fail_errno(named, "cannot read", errno);
    if (n == 0)
      return out;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > max_bytes)
      throw too_large(out.size());
  }
}

unique_fd open_confined_log(int base, std::string_view rel, int64_t owner,
                            std::string_view shown) {
  check_confined(rel, shown);
  auto [dir_rel, name] = split_last(rel);
  auto dir = open_confined_dir(base, dir_rel, true, owner, shown);
  auto named = join_shown(shown, rel);
  // O_NONBLOCK so that a fifo planted under this name cannot block us.
  unique_fd fd{::openat(
    dir.get(), name.c_str(),
    O_RDWR | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644)};
  if (!fd && errno == ELOOP)
    throw fs_error(provider_errc::invalid_path,
                   "log " + named + " is a symlink, refusing to follow it");
  if (!fd)
    fail_errno(named, "cannot open log", errno);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0)
    fail_errno(named, "cannot stat log", errno);
  if (!S_ISREG(st.st_mode))
    throw fs_error(provider_errc::invalid_path, "log " + named + " is " +
                                                  kind_of(st) +
                                                  ", not a regular file");
  ::fcntl(fd.get(), F_SETFL, O_APPEND);
  return fd;
}

std::string read_tail(int fd, size_t n) {
  struct stat st;
  if (fd < 0 || ::fstat(fd, &st) != 0 || st.st_size <= 0)
    return {};
  auto size = static_cast<size_t>(st.st_size);
  auto offset = size > n ? size - n : 0;
  std::string out(size - offset, '\0');
  size_t got = 0;
  while (got < out.size()) {
    auto k = ::pread(fd, out.data() + got, out.size() - got,
                     static_cast<off_t>(offset + got));
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      break;
    got += static_cast<size_t>(k);
  }
  out.resize(got);
  return out;
}

} // namespace sv::detail
