#include "providers/local/host/uid_pool.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <stdexcept>
#include <sys/file.h>
#include <sys/stat.h>

namespace sv::detail {

uid_pool::uid_pool(std::string lock_dir, uint32_t base, uint32_t count)
    : lock_dir_(std::move(lock_dir)), base_(base), count_(count) {
  // nop
}

uid_lease uid_pool::lease() {
  if (::mkdir(lock_dir_.c_str(), 0700) != 0 && errno != EEXIST)
    throw std::runtime_error("cannot create " + lock_dir_ + ": " +
                             std::strerror(errno));
  // Round robin from where the last lease ended: a uid just given back is
  // the last one reused, in case a straggler of its sandbox still runs.
  for (uint32_t tries = 0; tries < count_; ++tries) {
    auto slot = next_.fetch_add(1) % count_;
    auto uid = static_cast<int64_t>(base_) + slot;
    auto path = lock_dir_ + "/" + std::to_string(uid) + ".lock";
    unique_fd fd{
      ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600)};
    if (!fd)
      throw std::runtime_error("cannot open " + path + ": " +
                               std::strerror(errno));
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) == 0)
      return uid_lease{uid, std::move(fd)};
  }
  return {};
}

} // namespace sv::detail
