#pragma once

// The local provider's image store: a sandbox spec's `image` resolved to a
// digest, pulled with skopeo (a child process) and unpacked once per
// digest into a read-only tree every sandbox of that image shares (through
// its own overlay). Concurrent acquires of one image pull and unpack it
// once; a size bound evicts images no sandbox holds, least recently used
// first. Everything here blocks: call it on an I/O thread, never on a CAF
// scheduler thread. docs/providers.md, "Images", describes the forms.

#include "providers/local/detail/image/layer.hpp"

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace sv::detail {

/// Why an image cannot be had (missing, unreachable, a bad layer): the
/// create fails `provider_unavailable` with what() in its message.
class image_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

struct image_store_settings {
  /// The store's directory (created 0700 when missing).
  std::string dir;
  /// Most bytes of unpacked files; past it, unused images are evicted.
  uint64_t max_bytes = 20ull << 30;
  /// Registries ("HOST[:PORT]") reached over plain HTTP.
  std::vector<std::string> insecure_registries;
  /// Host directories a root file system directory must lie in (empty:
  /// none may be used).
  std::vector<std::string> image_dirs;
  /// skopeo's path ("" when not installed: only rootfs directories work).
  std::string skopeo;
  /// Bounds of one image's unpacked tree.
  layer_limits limits;
  /// Host paths a root file system directory, layout or archive may not
  /// be, hold or lie in (the hidden paths, the sandbox root, the store).
  std::vector<std::string> forbidden;
  /// How long a tag's digest is trusted before it is asked again.
  std::chrono::seconds tag_ttl{60};
};

/// One image, unpacked; held by every sandbox that runs it.
struct image_tree {
  /// "sha256:<hex>" of its manifest (or "dir:<path>" for a root file
  /// system directory).
  std::string digest;
  /// The read-only root file system.
  std::string rootfs;
  /// The image's `Env` ("NAME=value" split), under the spec's.
  std::vector<std::pair<std::string, std::string>> env;
  /// Bytes of its files.
  uint64_t bytes = 0;
};

/// What a reference is, syntactically: the skopeo source, or a directory.
struct image_source {
  /// A skopeo transport string ("docker://...", "oci:...", ...), or "".
  std::string transport;
  /// An absolute root file system directory, or "".
  std::string rootfs;
  /// The registry host of a docker:// reference ("" for others).
  std::string registry;
};

/// Parses `ref`; throws image_error naming what is wrong.
image_source parse_image_ref(const std::string& ref);

class image_store {
public:
  /// A store in `cfg.dir`, which the first acquire makes (or opens,
  /// dropping half-made images and loading those a previous run left).
  /// Throws std::runtime_error for a relative directory.
  explicit image_store(image_store_settings cfg);
  ~image_store();

  image_store(const image_store&) = delete;
  image_store& operator=(const image_store&) = delete;

  /// The image `ref`, pulled and unpacked when needed, before `deadline`.
  /// Throws image_error.
  std::shared_ptr<const image_tree>
  acquire(const std::string& ref,
          std::chrono::steady_clock::time_point deadline);

  /// The digest ("sha256:<hex>") `ref` names now: asked of its source
  /// (skopeo inspect) unless resolved within the tag TTL; "" for a root
  /// file system directory, which has none. What the result cache's key
  /// holds (docs/cache.md). Throws image_error.
  std::string resolve(const std::string& ref,
                      std::chrono::steady_clock::time_point deadline);

  /// Whether `ref` has named `digest` without a change since `since`, as
  /// far as this store has seen (every resolve and acquire): a create that
  /// found the tag moved in between, or a failed pull that forgot it, says
  /// no. Never asks the source; never blocks on a pull.
  bool unchanged_since(const std::string& ref, const std::string& digest,
                       std::chrono::steady_clock::time_point since) const;

  /// Ends every pull and wait under way (each throws image_error) and any
  /// later one: shutdown does not wait for a slow registry.
  void abort();

  /// Pulls run so far (skopeo copy), for the tests and the logs.
  uint64_t pulls() const;

  const image_store_settings& settings() const;

  struct impl;

private:
  std::unique_ptr<impl> impl_;
};

} // namespace sv::detail
