#pragma once

// Empty network namespaces, made ahead of a sandbox's first exec: the
// launcher enters one (setns) before it runs bwrap, so bwrap need not make
// one per exec (`--unshare-net`: the kernel serializes creating network
// namespaces and frees them in the background). Blocks briefly: use it on an
// I/O thread.

#include "providers/local/detail/host/unique_fd.hpp"

namespace sv::detail {

/// A new network namespace that holds only a loopback interface, up (as
/// bwrap's `--unshare-net` leaves it); it lives as long as the descriptor or
/// a process in it. Throws std::runtime_error naming what failed.
unique_fd make_empty_netns();

} // namespace sv::detail
