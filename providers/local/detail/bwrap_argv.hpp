#pragma once

// The bwrap command line of one exec, built from the provider's isolation
// settings (isolation.hpp): namespaces, the view, scratch, the uid drop.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace sv::detail {

struct isolation_settings;

/// A bwrap command line: bwrap's path and options (everything up to "--";
/// they may be passed in a file, `--args FD`), then the command it runs.
struct bwrap_argv {
  std::vector<std::string> options;
  std::vector<std::string> command;
  /// options, "--", command.
  std::vector<std::string> flat() const;
};

/// The command that runs `argv` (argv[0] an absolute program path) in a
/// bwrap sandbox whose directory `host_dir` appears at `workdir`, in its
/// subdirectory `cwd`, as `uid` (-1: the service's). bwrap writes its
/// status to fd 3 and reads the seccomp program from fd 4. The command gets
/// exactly `env`. With `scratch`, `<host_dir>.tmp` and `<host_dir>.shm`
/// become its /tmp and /dev/shm. With `own_netns`, bwrap runs in the
/// network namespace its launcher entered (the sandbox's own, empty) and
/// makes none. With `image_root`, the sandbox's / is that directory (an
/// image's overlay) instead of the host's view.
bwrap_argv bwrap_command(const isolation_settings& s,
                         const std::string& host_dir,
                         const std::string& workdir, const std::string& cwd,
                         int64_t uid, const std::vector<std::string>& argv,
                         const std::map<std::string, std::string>& env,
                         bool scratch = false, bool own_netns = false,
                         const std::string& image_root = {});

} // namespace sv::detail
