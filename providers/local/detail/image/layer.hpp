#pragma once

// Unpacking one image layer (a tar stream, gzip-compressed or plain) onto a
// root file system tree, as hostile input: every entry lands below the tree
// (no `..`, no absolute name, no link out, never through a symlink), no
// device node, no working setuid or setgid bit, bounded size and entry
// count. Whiteouts (`.wh.NAME`) remove what lower layers made; an opaque
// directory (`.wh..wh..opq`) hides their children. Blocks: call it on an I/O
// thread.

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace sv::detail {

/// A layer that may not be applied; what() names the entry and why.
class layer_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

struct layer_limits {
  /// Most bytes of file content, summed over the layers of one tree.
  uint64_t max_bytes = 8ull << 30;
  /// Most entries, summed over the layers of one tree (directories made
  /// for an entry's missing parents count too).
  uint64_t max_entries = 1'000'000;
  /// Most bytes of tar stream read (decompressed: headers, long names,
  /// padding and content), summed over the layers of one tree: a gzip bomb
  /// of headers or skipped content is bounded too.
  uint64_t max_stream_bytes = 16ull << 30;
};

/// What the layers applied so far hold (the limits' counters).
struct layer_totals {
  uint64_t bytes = 0;
  uint64_t entries = 0;
  uint64_t stream_bytes = 0;
};

/// Applies the layer in the file `blob` onto the directory `tree` (opened
/// here with O_NOFOLLOW). Ownership is kept when the caller is root. Throws
/// layer_error, also once `deadline` has passed (checked as it reads); the
/// tree is then half-applied and must be discarded.
void apply_layer(const std::string& blob, const std::string& tree,
                 const layer_limits& limits, layer_totals& totals,
                 std::chrono::steady_clock::time_point deadline =
                   std::chrono::steady_clock::time_point::max());

/// Removes `path` and everything below it without following a symlink.
/// Returns false (errno set) when something could not be removed.
bool remove_tree(const std::string& path);

} // namespace sv::detail
