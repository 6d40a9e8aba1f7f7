#pragma once

// JSON conversion of the protocol types (files, the CLI, HTTP). Reading is
// strict: a wrong type or an unknown key throws `json_error`, whose message
// names the field path and, for unknown keys, the keys allowed.

#include "messages/protocol.hpp"

#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>

namespace sv {

/// A JSON document that does not match the protocol.
class json_error : public std::runtime_error {
public:
  /// `path` is the dotted field path ("config.ready_timeout_s"), may be empty.
  json_error(std::string path, std::string what);

  const std::string& path() const noexcept { return path_; }

  /// The message without the path.
  const std::string& reason() const noexcept { return reason_; }

private:
  std::string path_;
  std::string reason_;
};

/// Throws `json_error` unless `j` is an object whose keys all appear in
/// `allowed`; the message names `type`, the unknown key and the keys allowed.
void check_object(const json& j, const char* type,
                  std::initializer_list<std::string_view> allowed);

/// Whether `text` is valid UTF-8 (no overlong forms, no surrogates, at
/// most U+10FFFF).
bool is_utf8(std::string_view text);

/// A `files` object: each file's content a JSON string when it is valid
/// UTF-8, else `{"base64": "..."}` (its bytes, RFC 4648).
json files_to_json(const file_map& files);

/// Reads a `files` object whose values are each a string (the file's text)
/// or `{"base64": "..."}` (its bytes). Throws `json_error` naming the file
/// ("a.bin.base64: not base64: ...").
void files_from_json(const json& j, file_map& out);

void to_json(json& j, const sandbox_resources& x);
void from_json(const json& j, sandbox_resources& x);
void to_json(json& j, const sandbox_spec& x);
void from_json(const json& j, sandbox_spec& x);
void to_json(json& j, const sandbox_handle& x);
void from_json(const json& j, sandbox_handle& x);
void to_json(json& j, const exec_request& x);
void from_json(const json& j, exec_request& x);
void to_json(json& j, const exec_result& x);
void from_json(const json& j, exec_result& x);
void to_json(json& j, const verification_config& x);
void from_json(const json& j, verification_config& x);
void to_json(json& j, const verification_request& x);
void from_json(const json& j, verification_request& x);
void to_json(json& j, const verification_failure& x);
void from_json(const json& j, verification_failure& x);
void to_json(json& j, const state_timings& x);
void from_json(const json& j, state_timings& x);
/// The output line of sv-grade: id, ok, mask_sample, result, failure,
/// timings_ms.
void to_json(json& j, const verification_outcome& x);
void from_json(const json& j, verification_outcome& x);
void to_json(json& j, const supervisor_stats& x);

void to_json(json& j, sandbox_status x);
void from_json(const json& j, sandbox_status& x);
void to_json(json& j, exec_error_type x);
void from_json(const json& j, exec_error_type& x);
void to_json(json& j, failure_kind x);
void from_json(const json& j, failure_kind& x);
void to_json(json& j, verification_state x);
void from_json(const json& j, verification_state& x);
void to_json(json& j, failure_cause x);
void from_json(const json& j, failure_cause& x);

} // namespace sv
