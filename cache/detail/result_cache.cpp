#include "cache/detail/result_cache.hpp"

#include "messages/json.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <openssl/evp.h>
#include <spdlog/spdlog.h>
#include <sqlite3.h>
#include <thread>

namespace sv {

namespace {

/// Bumped whenever the key text or the stored value changes meaning.
constexpr int key_format = 2;
constexpr const char* file_format = "sv-result-cache 1";

} // namespace

std::string cache_key_text(const verification_request& req,
                           const json& provider) {
  json config = req.config;
  config.erase("metadata");
  json doc{{"format", key_format},
           {"provider", provider},
           {"files", files_to_json(req.files)},
           {"request", req.request},
           {"exec_timeout_s", req.exec_timeout_s},
           {"work_dir", req.work_dir},
           {"config", std::move(config)}};
  // nlohmann's objects are ordered maps: the dump is canonical.
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

bool image_pinned(const std::string& image) {
  // NAME@sha256:<64 hex>: the image's digest is in the key.
  auto at = image.rfind("@sha256:");
  if (at == std::string::npos || image.size() != at + 8 + 64)
    return false;
  return std::all_of(
    image.begin() + static_cast<std::ptrdiff_t>(at) + 8, image.end(),
    [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool image_digest_resolved(const json& provider) {
  if (!provider.is_object())
    return false;
  auto i = provider.find("image_digest");
  if (i == provider.end() || !i->is_string())
    return false;
  return image_pinned("@" + i->get<std::string>());
}

std::string cache_key(const verification_request& req, const json& provider) {
  // A tag can move and a directory or layout can change: an image keeps
  // its results only when named by its digest, or when the provider
  // resolved its name to one (then in the key, through `provider`).
  if (!req.config.image.empty() && !image_pinned(req.config.image) &&
      !image_digest_resolved(provider))
    return {};
  auto text = cache_key_text(req, provider);
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int len = 0;
  if (EVP_Digest(text.data(), text.size(), digest.data(), &len, EVP_sha256(),
                 nullptr) != 1)
    throw std::runtime_error("SHA-256 failed");
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * len);
  for (unsigned int i = 0; i < len; ++i) {
    out += hex[digest[i] >> 4];
    out += hex[digest[i] & 0xf];
  }
  return out;
}

result_cache::result_cache(const std::string& path, int busy_timeout_ms)
    : path_(path), busy_timeout_ms_(busy_timeout_ms) {
  // A failed open still returns a handle (holding the error) to close.
  int rc = sqlite3_open_v2(
    path.c_str(), &db_,
    SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  try {
    if (rc != SQLITE_OK)
      fail("cannot open");
    sqlite3_busy_timeout(db_, busy_timeout_ms);
    // Reads the header: a file that is not a database fails here.
    exec("PRAGMA journal_mode=WAL");
    exec("PRAGMA synchronous=NORMAL");
    refuse_foreign_database();
    exec("CREATE TABLE IF NOT EXISTS sv_cache_meta"
         " (name TEXT PRIMARY KEY, value TEXT NOT NULL)");
    exec("CREATE TABLE IF NOT EXISTS sv_results"
         " (key TEXT PRIMARY KEY, result TEXT NOT NULL,"
         "  stored_at INTEGER NOT NULL)");
    exec((std::string{"INSERT OR IGNORE INTO sv_cache_meta VALUES "
                      "('format', '"} +
          file_format + "')")
           .c_str());
    sqlite3_stmt* format = nullptr;
    if (sqlite3_prepare_v2(db_,
                           "SELECT value FROM sv_cache_meta WHERE "
                           "name = 'format'",
                           -1, &format, nullptr) != SQLITE_OK)
      fail("cannot read the format");
    std::string found;
    if (sqlite3_step(format) == SQLITE_ROW)
      found = reinterpret_cast<const char*>(sqlite3_column_text(format, 0));
    sqlite3_finalize(format);
    if (found != file_format)
      throw cache_error("cache " + path_ + ": format \"" + found +
                        "\", expected \"" + file_format + "\"");
    if (sqlite3_prepare_v2(db_, "SELECT result FROM sv_results WHERE key = ?",
                           -1, &select_, nullptr) != SQLITE_OK ||
        sqlite3_prepare_v2(db_,
                           "INSERT OR REPLACE INTO sv_results VALUES "
                           "(?, ?, strftime('%s', 'now'))",
                           -1, &insert_, nullptr) != SQLITE_OK)
      fail("not a result cache");
  } catch (...) {
    sqlite3_finalize(select_);
    sqlite3_finalize(insert_);
    sqlite3_close(db_);
    throw;
  }
}

result_cache::~result_cache() {
  sqlite3_finalize(select_);
  sqlite3_finalize(insert_);
  sqlite3_close(db_);
}

void result_cache::refuse_foreign_database() {
  // A database with tables but not ours belongs to something else: never
  // write into it.
  sqlite3_stmt* q = nullptr;
  if (sqlite3_prepare_v2(db_,
                         "SELECT count(*), sum(name = 'sv_cache_meta') FROM "
                         "sqlite_master WHERE type = 'table'",
                         -1, &q, nullptr) != SQLITE_OK)
    fail("cannot read it");
  int64_t tables = 0, ours = 0;
  if (sqlite3_step(q) == SQLITE_ROW) {
    tables = sqlite3_column_int64(q, 0);
    ours = sqlite3_column_int64(q, 1);
  }
  sqlite3_finalize(q);
  if (tables > 0 && ours == 0)
    throw cache_error("cache " + path_ +
                      ": an SQLite database of something else (no "
                      "sv_cache_meta table); refusing to write into it");
}

void result_cache::exec(const char* sql) {
  // SQLite answers SQLITE_BUSY at once, without its busy handler, where
  // waiting could deadlock (a read upgrading to a write while another
  // connection writes, a journal-mode change while another opens the
  // file): two processes opening one new cache at the same moment meet
  // exactly that. Such a statement is tried again within the busy timeout
  // (only the set-up in the constructor runs here, on the opening thread).
  using clock = std::chrono::steady_clock;
  auto deadline = clock::now() + std::chrono::milliseconds(busy_timeout_ms_);
  for (auto pause = std::chrono::milliseconds(1);;
       pause = std::min(pause * 2, std::chrono::milliseconds(50))) {
    char* err = nullptr;
    int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &err);
    sqlite3_free(err);
    if (rc == SQLITE_OK)
      return;
    auto primary = rc & 0xff;
    if ((primary != SQLITE_BUSY && primary != SQLITE_LOCKED) ||
        clock::now() + pause > deadline)
      fail("cannot use it");
    std::this_thread::sleep_for(pause);
  }
}

void result_cache::fail(const std::string& what) const {
  std::string reason = db_ ? sqlite3_errmsg(db_) : "out of memory";
  throw cache_error("cache " + path_ + ": " + what + ": " + reason);
}

std::optional<std::string> result_cache::lookup(const std::string& key) {
  sqlite3_reset(select_);
  sqlite3_bind_text(select_, 1, key.data(), static_cast<int>(key.size()),
                    SQLITE_TRANSIENT);
  int rc = sqlite3_step(select_);
  std::optional<std::string> out;
  if (rc == SQLITE_ROW) {
    auto* text = reinterpret_cast<const char*>(sqlite3_column_text(select_, 0));
    out.emplace(text, static_cast<size_t>(sqlite3_column_bytes(select_, 0)));
  } else if (rc != SQLITE_DONE) {
    ++counters_.errors;
    spdlog::warn("cache {}: lookup failed: {}", path_, sqlite3_errmsg(db_));
  }
  sqlite3_reset(select_);
  ++(out ? counters_.hits : counters_.misses);
  return out;
}

void result_cache::store(const std::string& key,
                         const std::string& result_text) {
  sqlite3_reset(insert_);
  sqlite3_bind_text(insert_, 1, key.data(), static_cast<int>(key.size()),
                    SQLITE_TRANSIENT);
  sqlite3_bind_text(insert_, 2, result_text.data(),
                    static_cast<int>(result_text.size()), SQLITE_TRANSIENT);
  if (sqlite3_step(insert_) == SQLITE_DONE) {
    ++counters_.stored;
  } else {
    ++counters_.errors;
    spdlog::warn("cache {}: storing a result failed: {}", path_,
                 sqlite3_errmsg(db_));
  }
  sqlite3_reset(insert_);
}

} // namespace sv
