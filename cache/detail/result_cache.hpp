#pragma once

// The result cache (sv-grade and sv-serve `--cache FILE`): successful
// verification results in an SQLite database, keyed by a SHA-256 of
// everything that decides the outcome, so that the duplicate completions RL
// produces are graded once. Only `ok` outcomes are stored; failures never.
//
// Every call blocks (file I/O, SQLite's locks): call it from a thread of
// your own or a detached actor (cache/detail/cache_front.hpp), never from a CAF
// scheduler thread. Several processes may share one file (WAL journal, a
// busy timeout); one result_cache object is used by one thread at a time.

#include "messages/json.hpp"
#include "messages/protocol.hpp"

#include <atomic>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

struct sqlite3;
struct sqlite3_stmt;

namespace sv {

/// A cache file that cannot be used (unreadable, not an SQLite database, a
/// database of something else, a newer format). The message names the
/// file and SQLite's reason.
struct cache_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The canonical text the key hashes: one JSON object (keys sorted, no
/// spaces) of a format version, `provider` (the backend's grade identity
/// for the request's config: provider_backend::grade_identity), and the
/// request's `files`, `request`, `exec_timeout_s`, `work_dir` and `config`
/// with every field (defaults filled in) but `metadata`. Not hashed: the
/// id, the request's and the config's metadata.
std::string cache_key_text(const verification_request& req,
                           const json& provider);

/// SHA-256 of `cache_key_text`, as 64 lowercase hex digits; "" (not
/// cached) when the request's image is neither named by its digest
/// (`NAME@sha256:<hex>`) nor resolved to one by the provider (`provider`'s
/// `image_digest`, "sha256:<hex>": the local provider's tag, layout or
/// archive, docs/cache.md): a tag can move, a directory can change.
std::string cache_key(const verification_request& req, const json& provider);

/// Whether `provider` (a grade identity) holds the digest its backend
/// resolved the request's image to (`image_digest`, "sha256:<64 hex>").
bool image_digest_resolved(const json& provider);

/// Whether `image` names its digest (`...@sha256:<64 hex>`).
bool image_pinned(const std::string& image);

/// What a cache did so far (thread-safe to read).
struct cache_counters {
  std::atomic<uint64_t> hits{0};
  std::atomic<uint64_t> misses{0};
  std::atomic<uint64_t> stored{0};
  /// Lookups or stores that failed at run time (logged; graded anyway).
  std::atomic<uint64_t> errors{0};
};

class result_cache {
public:
  /// Opens or creates the cache at `path`; throws cache_error when the file
  /// cannot be a cache (see above). `busy_timeout_ms`: how long a call
  /// waits for another process's lock.
  explicit result_cache(const std::string& path, int busy_timeout_ms = 10000);
  ~result_cache();
  result_cache(const result_cache&) = delete;
  result_cache& operator=(const result_cache&) = delete;

  /// The stored result text for `key`, counted as a hit or a miss. A
  /// failing lookup is a miss (and an error).
  std::optional<std::string> lookup(const std::string& key);

  /// Stores `result_text` (a JSON object's text) under `key`; a failure is
  /// logged and counted, never thrown.
  void store(const std::string& key, const std::string& result_text);

  const std::string& path() const noexcept { return path_; }
  cache_counters& counters() noexcept { return counters_; }

private:
  void exec(const char* sql);
  void refuse_foreign_database();
  [[noreturn]] void fail(const std::string& what) const;

  std::string path_;
  int busy_timeout_ms_;
  sqlite3* db_ = nullptr;
  sqlite3_stmt* select_ = nullptr;
  sqlite3_stmt* insert_ = nullptr;
  cache_counters counters_;
};

} // namespace sv
