#pragma once

// File access confined to a sandbox directory. Every path is walked one
// component at a time from the sandbox's directory descriptor with
// O_NOFOLLOW, so neither `..` nor a symlink planted by a runner can lead
// outside the sandbox. All functions block: call them on an I/O thread.

#include "messages/errors.hpp"
#include "providers/local/detail/host/unique_fd.hpp"

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace sv::detail {

/// A failed confined file operation: the provider error to report and a
/// message naming the path.
class fs_error : public std::runtime_error {
public:
  fs_error(provider_errc code, const std::string& what);

  /// The provider error code to report.
  provider_errc code() const noexcept { return code_; }

private:
  provider_errc code_;
};

/// Messages name a path as `shown` + "/" + `rel` (`shown` empty: `rel`
/// alone), so a path the caller gave as "/tmp/x" is named so.

/// Opens the directory `rel` below `base` ("" is `base` itself). With
/// `create`, missing directories are made on the way, owned by `owner` (a
/// uid, also used as gid; -1 keeps the caller's).
unique_fd open_confined_dir(int base, std::string_view rel, bool create,
                            int64_t owner = -1, std::string_view shown = {});

/// Writes `content` as the file `rel` below `base`, making parent
/// directories. The file is written under a fresh temporary name and renamed
/// into place, so a symlink or hard link planted under `rel` is replaced,
/// never written through. New directories and the file belong to `owner`
/// (as in `open_confined_dir`).
void write_confined_file(int base, std::string_view rel,
                         std::string_view content, int64_t owner = -1,
                         std::string_view shown = {});

/// Reads the regular file `rel` below `base`; fails with `too_large` beyond
/// `max_bytes`.
std::string read_confined_file(int base, std::string_view rel,
                               uint64_t max_bytes, std::string_view shown = {});

/// Opens (creates) the regular file `rel` below `base` for appending and
/// reading, making parent directories (owned by `owner`). The log itself
/// stays the caller's: a runner can replace it, never rewrite it.
unique_fd open_confined_log(int base, std::string_view rel, int64_t owner = -1,
                            std::string_view shown = {});

/// The last `n` bytes of the file behind `fd` (fewer when it is shorter).
std::string read_tail(int fd, size_t n);

} // namespace sv::detail
