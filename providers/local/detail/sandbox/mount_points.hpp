#pragma once

// The mount points bwrap needs in a tree the sandbox or its image controls
// (an image's overlay root, the sandbox's own /tmp), made by the provider
// before bwrap runs. bwrap runs as root and follows symlinks when it makes
// and mounts on its destinations, in a staging root where /oldroot is the
// host's / (bubblewrap issues #390, #195): a destination it must create or
// traverse in such a tree could be a symlink to a host path. The provider
// walks each destination from the tree's root descriptor, never following a
// symlink, replaces whatever is not a directory (a regular file for the
// uid drop), and leaves every component owned by root and writable by
// nobody else unless sticky, in a root that is root's and sticky: no
// process of the sandbox's uid can then rename, remove or replace any of
// them, at any time, so the check holds for every later bwrap too.

#include <string>

namespace sv::detail {

struct isolation_settings;
struct local_sandbox;

/// Makes `rel` ("a/b", no "." or "..") below the directory `root_fd` a
/// chain of real directories (its last component a regular file when
/// `file`), each owned by root:root and, when writable by group or others,
/// sticky; removes a symlink, a file or an empty directory of the wrong type
/// in the way. Then walks it once more and checks all of that. Returns ""
/// or why not (naming `shown`, the path as the sandbox sees it).
std::string make_mount_point(int root_fd, const std::string& rel, bool file,
                             const std::string& shown);

/// Why the root `root_fd` itself is unsafe to mount in (not root's, or
/// writable by others without the sticky bit), or "".
std::string check_mount_root(int root_fd, const std::string& shown);

/// Makes every destination the next bwrap of `sb` mounts on in a tree the
/// sandbox or its image controls: with an image, /proc, /dev, /tmp, the
/// workdir and /.sv-drop in the overlay; under /tmp (the sandbox's own
/// tmpfs), the workdir. Returns "" or why not.
std::string prepare_mount_points(const isolation_settings& iso,
                                 const local_sandbox& sb);

} // namespace sv::detail
