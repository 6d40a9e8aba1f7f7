#pragma once

// sv-serve's bearer tokens: one per line of the token file (blank lines and
// surrounding whitespace ignored), compared in constant time, re-read on
// SIGHUP. Thread-safe.

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace sv::serve {

class token_set {
public:
  /// No file: no token is asked for.
  explicit token_set(std::string path = {});

  /// Reads the file again; on failure keeps the old tokens and says why.
  std::string reload();

  /// Whether tokens are required at all.
  bool required() const noexcept { return !path_.empty(); }

  /// Whether the value of an Authorization header carries a valid token.
  bool accepts(std::string_view authorization) const;

  /// As `accepts`, and sets `token` to the token it carries (empty when no
  /// token is required): who owns what the request creates.
  bool accepts(std::string_view authorization, std::string& token) const;

  /// `a == b` in time that depends only on their lengths.
  static bool equal(std::string_view a, std::string_view b);

private:
  std::string path_;
  mutable std::mutex mtx_;
  std::shared_ptr<const std::vector<std::string>> tokens_;
};

} // namespace sv::serve
