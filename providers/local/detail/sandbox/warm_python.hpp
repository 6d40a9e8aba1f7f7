#pragma once

// A warm interpreter: the provider's python started in a pooled sandbox
// before any submission arrives, through the same command a cold exec of it
// would run (bwrap, the sandbox's namespaces, cgroups, uid, limits and
// seccomp filter), blocked reading its instructions on its stdin. The first
// python exec of the sandbox that matches what it was started with (the
// interpreter, the whole environment, the workdir, the limits) hands it the
// runner's cwd and argv; it then runs the script as `__main__` the way
// `python script args` would. It serves that one exec or none: any other
// python exec of the sandbox discards it (killed, reaped) and runs cold.
// docs/isolation.md, "Warm interpreter".

#include "providers/local/detail/host/unique_fd.hpp"

#include <memory>
#include <string>
#include <sys/resource.h>
#include <sys/types.h>
#include <utility>
#include <vector>

namespace sv::detail {

struct local_sandbox;
struct exec_settings;
struct launch_plan;

/// What a warm interpreter was started with, compared with an exec's.
struct warm_python_key {
  /// The interpreter's path as execve'd inside the sandbox.
  std::string program;
  /// The command's whole environment ("NAME=value", sorted by name).
  std::vector<std::string> env;
  /// The sandbox's workdir (HOME, where its directory is bound).
  std::string workdir;
  std::vector<std::pair<int, rlim_t>> rlimits;
  int nice = 0;

  bool operator==(const warm_python_key& other) const {
    return program == other.program && env == other.env &&
           workdir == other.workdir && rlimits == other.rlimits &&
           nice == other.nice;
  }
};

/// A started warm interpreter and the provider's ends of its descriptors.
/// Its destructor kills its process group and reaps it (bounded wait):
/// destroy it on an I/O thread.
struct warm_python {
  pid_t pid = -1;
  unique_fd pidfd;
  /// Read ends of its stdout, stderr and bwrap's status.
  unique_fd out;
  unique_fd err;
  unique_fd status;
  /// Write end of its stdin: the instructions, then EOF.
  unique_fd control;
  warm_python_key key;

  warm_python() = default;
  warm_python(const warm_python&) = delete;
  warm_python& operator=(const warm_python&) = delete;
  ~warm_python();

  /// Whether it still waits (has not exited).
  bool waiting() const;

  /// Hands it its exec: `cwd` as the sandbox shows it, `argv` after the
  /// interpreter (the script first), whether stderr joins stdout (a log).
  /// False when the write fails (it died).
  bool hand_over(const std::string& cwd, const std::vector<std::string>& argv,
                 bool merge_stderr);
};

/// Starts a warm interpreter in the prepared sandbox `sb` as it will be
/// with a default spec (workdir `workdir`, no spec environment). Bwrap as
/// root only; null (logged) when it cannot start. Runs on a background
/// thread before the sandbox is handed out.
std::unique_ptr<warm_python> start_warm_python(local_sandbox& sb,
                                               const exec_settings& cfg,
                                               const std::string& workdir);

/// The python code of the warm interpreter (its `-c`).
const char* warm_python_stub();

} // namespace sv::detail
