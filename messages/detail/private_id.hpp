#pragma once

// A submission's private id: the caller's id plus a tag and a number the
// matcher chose (sv-grade's "#L<line>", the cache front's "#C<n>"), so two
// submissions that share the caller's id never get each other's replies.

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sv {

/// `id` + `tag` + `n`.
inline std::string tag_private_id(const std::string& id, std::string_view tag,
                                  uint64_t n) {
  std::string out;
  out.reserve(id.size() + tag.size() + 20);
  out += id;
  out += tag;
  out += std::to_string(n);
  return out;
}

/// The number a private id tagged `tag` names; nullopt for one that is not
/// such an id.
inline std::optional<uint64_t> private_id_number(const std::string& id,
                                                 std::string_view tag) {
  auto pos = id.rfind(tag);
  if (pos == std::string::npos)
    return std::nullopt;
  auto digits = std::string_view{id}.substr(pos + tag.size());
  uint64_t n = 0;
  auto [end, ec] =
    std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc{} || end != digits.data() + digits.size())
    return std::nullopt;
  return n;
}

} // namespace sv
