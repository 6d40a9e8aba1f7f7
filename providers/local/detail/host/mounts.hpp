#pragma once

// Mounts of the local provider: a sandbox directory as a size-limited
// tmpfs, and unmounting and removing what is below a path (read from
// /proc/self/mountinfo). All calls block briefly: use them on an I/O thread
// or before the actor system runs.

#include <cstdint>
#include <string>
#include <vector>

namespace sv::detail {

/// Inodes a tmpfs of `bytes` may hold: one per 8 KiB, at least 4096. Each
/// costs kernel memory outside the memory cgroup, and a bound on them
/// bounds what a stop has to free.
uint64_t tmpfs_inodes(uint64_t bytes);

/// Mounts a tmpfs of `bytes` and tmpfs_inodes(bytes) inodes on `path`,
/// owned by `uid`/`gid` (-1: root), of `mode` ("0700", "1777"), nosuid and
/// nodev. Throws std::runtime_error on failure.
void mount_sandbox_tmpfs(const std::string& path, uint64_t bytes, int64_t uid,
                         const char* mode = "0700");

/// Unmounts every mount at or below `path`, deepest first (detaching what
/// is busy). Returns what failed, or "".
std::string unmount_tree(const std::string& path);

/// Mount points at or below `path`, from /proc/self/mountinfo.
std::vector<std::string> mounts_below(const std::string& path);

/// Removes the directory `name` of a sandbox in the root `root` (open as
/// `root_fd`): its mounts, then the tree, relative to descriptors
/// (remove_tree_at). Returns what failed, or "".
std::string remove_sandbox_dir(int root_fd, const std::string& root,
                               const std::string& name);

/// Whether the directory open as `fd` holds no entry.
bool dir_is_empty(int fd);

/// Whether the directory open as `fd` is the root of a tmpfs that is still
/// mounted at `name` below the directory open as `parent_fd`.
bool is_mount_at(int fd, int parent_fd, const std::string& name);

} // namespace sv::detail
