#include "providers/local/detail/host/uid_pool.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <linux/keyctl.h>
#include <sched.h>
#include <sstream>
#include <stdexcept>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <utility>
#include <vector>

namespace sv::detail {

// -- uid_lease ----------------------------------------------------------------

uid_lease::uid_lease(int64_t id, unique_fd lock, std::string path)
    : uid(id), lock_(std::move(lock)), path_(std::move(path)) {
  // nop
}

uid_lease::uid_lease(uid_lease&& other) noexcept
    : uid(std::exchange(other.uid, -1)), lock_(std::move(other.lock_)),
      path_(std::exchange(other.path_, {})) {
  // nop
}

uid_lease& uid_lease::operator=(uid_lease&& other) noexcept {
  if (this != &other) {
    release();
    uid = std::exchange(other.uid, -1);
    lock_ = std::move(other.lock_);
    path_ = std::exchange(other.path_, {});
  }
  return *this;
}

void uid_lease::release() noexcept {
  // Unlinked while still locked: whoever opens the path afterwards makes a
  // new file, and whoever opened the old one sees that its inode is no
  // longer the path's (lease() checks) and moves on.
  if (lock_ && !path_.empty())
    ::unlink(path_.c_str());
  lock_.reset();
  path_.clear();
  uid = -1;
}

// -- processes and keyrings ---------------------------------------------------

namespace {

/// The uids (real, effective, saved, fs) of `pid`, from /proc; none for a
/// zombie, which can do nothing any more.
std::vector<int64_t> uids_of(const std::string& pid) {
  std::ifstream in{"/proc/" + pid + "/status"};
  std::string line;
  while (std::getline(in, line))
    if (line.compare(0, 6, "State:") == 0 &&
        line.find_first_of("ZX", 6) == line.find_first_not_of(" \t", 6))
      return {};
    else if (line.compare(0, 4, "Uid:") == 0) {
      std::istringstream fields{line.substr(4)};
      std::vector<int64_t> out;
      int64_t x = 0;
      while (fields >> x)
        out.push_back(x);
      return out;
    }
  return {};
}

/// Uids in [lo, hi) some process runs as: one scan of /proc.
std::vector<int64_t> uids_in_use(int64_t lo, int64_t hi) {
  std::vector<int64_t> out;
  auto* dir = ::opendir("/proc");
  if (dir == nullptr)
    return out;
  while (auto* e = ::readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9')
      continue;
    for (auto u : uids_of(e->d_name))
      if (u >= lo && u < hi)
        out.push_back(u);
  }
  ::closedir(dir);
  std::sort(out.begin(), out.end());
  return out;
}

struct keyring_args {
  int64_t uid;
  int err = 0;
};

int keyring_child(void* p) {
  auto* a = static_cast<keyring_args*>(p);
  // Raw system calls only: this child shares the service's memory. It
  // returns (clone exits with the value) rather than calling _exit: a
  // noreturn call on this foreign stack trips AddressSanitizer.
  auto id = static_cast<long>(a->uid);
  if (::syscall(SYS_setgroups, 0, nullptr) != 0 ||
      ::syscall(SYS_setresgid, id, id, id) != 0 ||
      ::syscall(SYS_setresuid, id, id, id) != 0) {
    a->err = errno;
    return 1;
  }
  for (long ring :
       {long{KEY_SPEC_USER_KEYRING}, long{KEY_SPEC_USER_SESSION_KEYRING}})
    if (::syscall(SYS_keyctl, KEYCTL_CLEAR, ring) != 0) {
      a->err = errno;
      return 1;
    }
  return 0;
}

} // namespace

bool process_has_uid(int pid, int64_t uid) {
  auto ids = uids_of(std::to_string(pid));
  return std::find(ids.begin(), ids.end(), uid) != ids.end();
}

bool uid_in_use(int64_t uid) {
  return !uids_in_use(uid, uid + 1).empty();
}

std::string clear_keyrings(int64_t uid) {
  constexpr size_t stack_size = 64 * 1024;
  void* stack = ::mmap(nullptr, stack_size, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED)
    return std::string{"cannot map a stack: "} + std::strerror(errno);
  keyring_args a{uid};
  sigset_t all;
  sigset_t old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t pid = ::clone(keyring_child, static_cast<char*>(stack) + stack_size,
                      CLONE_VM | CLONE_VFORK | SIGCHLD, &a);
  int clone_err = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  std::string failed;
  if (pid < 0) {
    failed = std::string{"cannot clone: "} + std::strerror(clone_err);
  } else {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      // retry
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      failed = "clearing the keyrings of uid " + std::to_string(uid) +
               " failed: " + std::strerror(a.err != 0 ? a.err : EINVAL);
  }
  ::munmap(stack, stack_size);
  return failed;
}

// -- uid_pool -----------------------------------------------------------------

uid_pool::uid_pool(std::string lock_dir, uint32_t base, uint32_t count)
    : lock_dir_(std::move(lock_dir)), base_(base), count_(count) {
  // nop
}

uid_lease uid_pool::lease() {
  if (::mkdir(lock_dir_.c_str(), 0700) != 0 && errno != EEXIST)
    throw std::runtime_error("cannot create " + lock_dir_ + ": " +
                             std::strerror(errno));
  // A uid with a process alive (a survivor of SIGKILL, a straggler of a
  // provider that crashed) is never handed out, lock or no lock.
  auto busy = uids_in_use(base_, int64_t{base_} + count_);
  // Round robin from where the last lease ended: a uid just given back is
  // the last one reused.
  for (uint32_t tries = 0; tries < count_; ++tries) {
    auto slot = next_.fetch_add(1) % count_;
    auto uid = static_cast<int64_t>(base_) + slot;
    if (std::binary_search(busy.begin(), busy.end(), uid))
      continue;
    auto path = lock_dir_ + "/" + std::to_string(uid) + ".lock";
    unique_fd fd{
      ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600)};
    if (!fd)
      throw std::runtime_error("cannot open " + path + ": " +
                               std::strerror(errno));
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0)
      continue;
    // Locked, but maybe a file its holder unlinked at release: then the
    // path (if any) is someone else's.
    struct stat held;
    struct stat now;
    if (::fstat(fd.get(), &held) != 0 || ::stat(path.c_str(), &now) != 0 ||
        held.st_ino != now.st_ino || held.st_dev != now.st_dev)
      continue;
    uid_lease out{uid, std::move(fd), path};
    if (auto err = clear_keyrings(uid); !err.empty())
      throw std::runtime_error(err);
    return out;
  }
  return {};
}

size_t uid_pool::remove_stale_locks() {
  size_t removed = 0;
  auto* dir = ::opendir(lock_dir_.c_str());
  if (dir == nullptr)
    return 0;
  while (auto* e = ::readdir(dir)) {
    std::string name = e->d_name;
    if (name.size() < 6 || name.compare(name.size() - 5, 5, ".lock") != 0)
      continue;
    auto path = lock_dir_ + "/" + name;
    unique_fd fd{::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW)};
    struct stat held;
    struct stat now;
    // Unlinked under the lock, as a release does: a racing lease sees the
    // inode change and moves on.
    if (fd && ::flock(fd.get(), LOCK_EX | LOCK_NB) == 0 &&
        ::fstat(fd.get(), &held) == 0 && ::stat(path.c_str(), &now) == 0 &&
        held.st_ino == now.st_ino && ::unlink(path.c_str()) == 0)
      ++removed;
  }
  ::closedir(dir);
  return removed;
}

// -- choosing a range ---------------------------------------------------------

namespace {

using interval = std::pair<uint64_t, uint64_t>; // [first, last + 1)

/// Calls `f(line, a, b)` for each line of `path` with at least two ':',
/// `a` and `b` their positions (the files are `name:field:field...`).
template <class F>
void for_each_colon_line(const std::string& path, F f) {
  std::ifstream in{path};
  std::string line;
  while (std::getline(in, line)) {
    auto a = line.find(':');
    auto b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos)
      continue;
    try {
      f(line, a, b);
    } catch (const std::exception&) {
      // not a number: skip the line
    }
  }
}

void read_subids(const std::string& path, std::vector<interval>& out) {
  // name:start:count
  for_each_colon_line(path, [&](const std::string& line, size_t a, size_t b) {
    auto start = std::stoull(line.substr(a + 1, b - a - 1));
    auto count = std::stoull(line.substr(b + 1));
    out.emplace_back(start, start + count);
  });
}

void read_login_defs(const std::string& path, std::vector<interval>& out) {
  std::ifstream in{path};
  std::string key;
  std::string line;
  uint64_t v[2][3] = {{100000, 600100000, 65536}, {100000, 600100000, 65536}};
  const char* keys[2][3] = {{"SUB_UID_MIN", "SUB_UID_MAX", "SUB_UID_COUNT"},
                            {"SUB_GID_MIN", "SUB_GID_MAX", "SUB_GID_COUNT"}};
  while (std::getline(in, line)) {
    std::istringstream fields{line};
    uint64_t x = 0;
    if (!(fields >> key >> x))
      continue;
    for (auto& row : keys)
      for (auto& k : row)
        if (key == k)
          v[&row - keys][&k - row] = x;
  }
  for (auto& row : v)
    out.emplace_back(row[0], row[1] + row[2]);
}

void read_ids(const std::string& path, std::vector<interval>& out) {
  // name:x:id:...
  for_each_colon_line(path, [&](const std::string& line, size_t, size_t b) {
    auto id = std::stoull(line.substr(b + 1));
    out.emplace_back(id, id + 1);
  });
}

} // namespace

uint32_t free_uid_base(uint32_t count, const std::string& etc) {
  std::vector<interval> taken;
  read_subids(etc + "/subuid", taken);
  read_subids(etc + "/subgid", taken);
  read_login_defs(etc + "/login.defs", taken);
  read_ids(etc + "/passwd", taken);
  read_ids(etc + "/group", taken);
  std::sort(taken.begin(), taken.end());
  // Above the classic 16-bit range (regular users, nobody 65534).
  uint64_t base = 65536;
  for (auto& [first, end] : taken) {
    if (end <= base)
      continue;
    if (first >= base + count)
      break;
    base = end;
  }
  if (base + count > (uint64_t{1} << 31))
    throw std::runtime_error("local provider: no range of " +
                             std::to_string(count) +
                             " uids outside the host's subordinate id "
                             "ranges; set \"uid_base\"");
  return static_cast<uint32_t>(base);
}

} // namespace sv::detail
