#pragma once

// Provider config files, JSON or YAML, as NeMo Gym users write them: the
// block itself (`local: {...}` plus optional `default_metadata`) or a file
// with one named binding of it (`sandbox: {default_metadata: ..., local:
// {...}}`). YAML is read as strictly as JSON (bounded_json.hpp): one
// document, no duplicate keys, a bounded depth, aliases bounded by a budget
// of nodes (no "billion laughs"), scalars typed by the YAML 1.2 core schema
// (`yes` is a string). Every YAML error names its line and column; a later
// error in the settings (a `json_error` with a path) is placed with
// `config_file::locate`.

#include "messages/bounded_json.hpp"
#include "messages/json.hpp"

#include <cstddef>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace sv {

/// A config file that cannot be read or is malformed; the message names the
/// place ("line 3, column 5: duplicate key \"local\" ...").
class config_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// A line and a column, both from 1.
struct text_position {
  size_t line = 0;
  size_t column = 0;
};

/// Limits on a YAML document beyond `json_limits`.
struct yaml_limits {
  json_limits json;
  /// Values built in all, every alias counting the size of what it copies.
  size_t max_nodes = 100000;
};

/// A parsed config document and where each of its values came from.
struct config_document {
  json value;
  /// Keyed by the path `json_error` uses ("local.isolation", "a[2]"); a
  /// member's position is its key's. Empty for JSON documents.
  std::map<std::string, text_position> positions;

  /// "line L, column C" of the longest known prefix of `path`, or "".
  std::string locate(const std::string& path) const;
};

/// Parses YAML text into JSON. Throws `config_error`.
config_document parse_yaml_config(std::string_view text,
                                  const yaml_limits& limits = {});

/// A provider block loaded from a file.
struct provider_config_file {
  /// The block (`{"local": {...}, "default_metadata": {...}}`).
  json block;
  /// The binding's name when the file held one (`sandbox`), else "".
  std::string binding;
  bool is_yaml = false;
  config_document document;

  /// `e`'s message with the full path in the file and, for YAML, its line
  /// and column: "line 4, column 5: sandbox.local.isolaton: unknown key ...".
  std::string describe(const json_error& e) const;
};

/// Reads `path` as YAML when it ends in .yaml or .yml, as JSON when it ends
/// in .json, else by its first non-blank character (`{`: JSON). Unwraps a
/// single named binding whose name is not one of `provider_names` (nor
/// `default_metadata`) and whose value is a mapping. Throws `config_error`
/// (without the path: the caller names the file).
provider_config_file
load_provider_config(const std::string& path,
                     const std::vector<std::string>& provider_names,
                     const yaml_limits& limits = {});

} // namespace sv
