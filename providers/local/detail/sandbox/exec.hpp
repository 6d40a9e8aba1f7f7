#pragma once

// One command running in a local sandbox: spawned in its own process group
// (through bubblewrap when isolated) inside the sandbox's cgroups, its
// output drained from pipes into capped sinks, its leader awaited through a
// pidfd on the sandbox's strand, killed at its deadline. Everything here
// runs on the sandbox's strand.

#include "messages/protocol.hpp"
#include "providers/local/detail/sandbox/launch_plan.hpp"

#include <cstdint>
#include <functional>
#include <memory>

namespace sv::detail {

struct local_sandbox;
class running_exec;

/// Receives the result of a command, exactly once, on the sandbox's strand.
using exec_callback = std::function<void(exec_result)>;

/// Spawns `plan` and registers it in `sb.execs` under `id` until its leader
/// is reaped. A command that cannot be spawned reports an `exec_result`
/// with `error_type` sandbox at once.
void start_exec(const std::shared_ptr<local_sandbox>& sb, uint64_t id,
                launch_plan plan, exec_callback done);

/// Kills the process group of `x` because its sandbox stops; its result
/// then says so.
void kill_for_stop(running_exec& x);

} // namespace sv::detail
