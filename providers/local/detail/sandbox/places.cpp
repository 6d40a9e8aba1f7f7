#include "providers/local/detail/sandbox/places.hpp"

#include "providers/local/detail/sandbox/confined_fs.hpp"
#include "providers/local/detail/sandbox/sandbox.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>

namespace sv::detail {

namespace {

/// The rest of `path` below `prefix` ("" for `prefix` itself), or false.
bool below(std::string_view path, std::string_view prefix,
           std::string_view& rest) {
  if (prefix.empty() || path.substr(0, prefix.size()) != prefix)
    return false;
  if (path.size() == prefix.size()) {
    rest = {};
    return true;
  }
  if (path[prefix.size()] != '/')
    return false;
  rest = path.substr(prefix.size() + 1);
  return true;
}

/// What the sandbox can write, for messages.
std::string writable_places(const local_sandbox& sb) {
  if (sb.workdir == sb.path)
    return "no isolation: its commands see the host's paths; writable: " +
           (sb.workdir_alias.empty()
              ? sb.workdir
              : sb.workdir_alias + " (" + sb.workdir + ")");
  if (sb.confinement.scratch)
    return "read-only root; writable: " + sb.workdir + ", /tmp, /dev/shm";
  return "read-only root; writable: " + sb.workdir +
         " (/tmp is private to each command without root)";
}

} // namespace

sandbox_place locate(const local_sandbox& sb, std::string_view path) {
  sandbox_place out;
  if (path.empty() || path.front() != '/') {
    out.base = sb.dir.get();
    out.rel = std::string{path};
    return out;
  }
  std::string_view rest;
  // The workdir first: under bwrap it may lie below /tmp, bound over it.
  for (auto* dir : {&sb.workdir, &sb.workdir_alias})
    if (below(path, *dir, rest)) {
      out.base = sb.dir.get();
      out.rel = std::string{rest};
      out.shown = *dir;
      return out;
    }
  if (sb.confinement.scratch) {
    static constexpr std::string_view mounts[] = {"/tmp", "/dev/shm"};
    for (size_t i = 0; i < 2; ++i) {
      if (!below(path, mounts[i], rest))
        continue;
      auto name = sb.id + scratch_suffixes[i];
      out.held.reset(::openat(sb.root_fd, name.c_str(),
                              O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!out.held)
        throw fs_error(provider_errc::io_error, "cannot open the sandbox's " +
                                                  std::string{mounts[i]} +
                                                  " (" + sb.root + "/" + name +
                                                  "): " + std::strerror(errno));
      out.base = out.held.get();
      out.rel = std::string{rest};
      out.shown = std::string{mounts[i]};
      return out;
    }
  }
  throw fs_error(provider_errc::invalid_path,
                 "\"" + std::string{path} +
                   "\" is not writable in the sandbox (" + writable_places(sb) +
                   ")");
}

sandbox_place locate_file(const local_sandbox& sb, std::string_view path) {
  auto out = locate(sb, path);
  if (out.rel.empty())
    throw fs_error(provider_errc::invalid_path,
                   "\"" + std::string{path} + "\" is a directory");
  return out;
}

} // namespace sv::detail
