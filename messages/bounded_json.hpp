#pragma once

// Reading untrusted JSON (input lines, result.json, provider configs) within
// limits: a nesting depth, a size, no duplicate keys, nothing after the
// value, no NUL byte. nlohmann's own parser is iterative, but its copy and
// dump recurse; a document accepted here is never deeper than the limit, so
// nothing downstream recurses past it. Errors are values (a message that
// names the place), never exceptions, and quote at most ~200 bytes of input.

#include "messages/protocol.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sv {

inline constexpr size_t default_max_json_depth = 256;
inline constexpr size_t default_max_json_values = 1000000;

struct json_limits {
  /// Deepest nesting of arrays and objects; the top value is depth 1.
  size_t max_depth = default_max_json_depth;
  /// Longest text accepted, in bytes.
  size_t max_bytes = SIZE_MAX;
  /// Most values (scalars, arrays, objects, object members) a parsed
  /// document may hold: a DOM costs per value (some 50-100 bytes), not
  /// per byte of text (`[[],[],...]` is 3 bytes a value), so this bounds
  /// what `parse_bounded` builds. The validation pass builds nothing and
  /// does not count.
  size_t max_values = default_max_json_values;
};

/// Parses `text` as exactly one JSON value into `out`. Returns an empty
/// string on success, otherwise what is wrong ("duplicate key \"id\"",
/// "nested deeper than 256 levels at request.a[0]", "more than 1000000
/// values in one document at request[999998]"). The DOM is never more
/// than `max_values` values, even while it is built.
std::string parse_bounded(std::string_view text, json& out,
                          const json_limits& limits = {});

/// What a validation-only pass learnt about a document.
struct json_text_info {
  /// The top value is an object.
  bool is_object = false;
  /// Its top-level "reward", when that is a number.
  std::optional<double> reward;
};

/// Checks `text` as `parse_bounded` does, without building a DOM (memory:
/// the keys of the open objects). Returns an empty string on success.
std::string check_bounded(std::string_view text, json_text_info& info,
                          const json_limits& limits = {});

/// `text` (already checked) without whitespace outside strings.
std::vector<uint8_t> minify_json_text(std::string_view text);

/// A document kept as its compact text instead of a DOM: an object holding
/// the text as a binary value (which parsed JSON never contains) and, when
/// known, the top-level reward, so summaries can read it.
json make_json_text_value(std::vector<uint8_t> compact,
                          std::optional<double> reward);

/// The compact text of a value made by `make_json_text_value`, else null.
const std::vector<uint8_t>* json_text_of(const json& value);

/// `s` if at most `max` bytes, else its first `max` bytes and a note of how
/// many were left out.
std::string truncate_for_message(std::string_view s, size_t max = 200);

} // namespace sv
