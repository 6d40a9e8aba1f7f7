#pragma once

// The start-up reaper: what an earlier provider left behind when it died
// without stopping its sandboxes (a crash, a kill -9) is killed and removed
// before the new one serves: processes, mounts, directories and cgroups.
// Sandbox ids hold the pid and start time of the provider that made them,
// so a live provider's sandboxes (even one sharing the root) stay untouched.

#include <cstddef>
#include <string>

namespace sv::detail {

struct cgroup_layout;

/// Kills and removes the sandboxes under `root` and in `cgroups` whose
/// provider no longer runs. Blocks; returns how many it reaped.
size_t reap_orphans(int root_fd, const std::string& root,
                    const cgroup_layout& cgroups);

} // namespace sv::detail
