#pragma once

// The batch format of sv-grade and sv-serve (DESIGN.md): one input line
// becomes either a request to grade or, when it cannot be graded, an
// `invalid_request` outcome; every outcome becomes exactly one output line.
// Pure functions, so the contract is unit-testable without actors.

#include "messages/bounded_json.hpp"
#include "messages/protocol.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace sv {

/// One output line before rendering.
struct batch_entry {
  verification_outcome outcome;
  /// The input line number (1-based).
  uint64_t line = 0;
  /// An invalid line (its output's id may be null).
  bool invalid = false;
  /// False when an invalid line's id could not be read: `"id": null`.
  bool id_known = true;
};

/// An input line, read: `request` when `ok`, else `rejected`.
struct parsed_line {
  bool ok = false;
  verification_request request;
  batch_entry rejected;
};

/// nlohmann's message without its "[json.exception.parse_error.101] ".
std::string parse_reason(const json::exception& e);

/// Reads input line `line_no` (without its newline). `default_work_dir`,
/// when not empty, is the `work_dir` of a line that sets none. The line is
/// read within `limits` (depth, size, no duplicate keys, nothing after it).
parsed_line parse_batch_line(std::string_view text, uint64_t line_no,
                             const std::string& default_work_dir = {},
                             const json_limits& limits = {});

/// The output line (one JSON object, no newline) of an entry; it carries
/// `"line": N`, the input line number.
std::string render_output_line(const batch_entry& entry);

/// The same line in pieces: `head`, then the result's compact text when it
/// was kept as text (`result_text`, owned by the entry), then `tail`; so a
/// large result is written without a copy.
struct output_line_parts {
  std::string head;
  const std::vector<uint8_t>* result_text = nullptr;
  std::string tail;
};
output_line_parts render_output_parts(const batch_entry& entry);

/// sv-grade's parser of `result.json`: one JSON object within `limits`. A
/// text up to `dom_max_bytes` becomes a DOM; a larger one is checked
/// without a DOM and kept as its compact text (`make_json_text_value`), so
/// that the grader holds about its size, not ten times it.
bool parse_result_text(const std::string& text, json& result,
                       std::string& error, const json_limits& limits = {},
                       size_t dom_max_bytes = size_t{1} << 20);

/// A failed outcome that masks the sample.
verification_outcome make_failed_outcome(std::string id, failure_kind kind,
                                         verification_state state,
                                         failure_cause cause,
                                         std::string message);

/// How long to wait for the supervisor's reply to `req`: the sum of its
/// state deadlines plus `margin`, so that a lost reply still ends the line.
std::chrono::milliseconds
reply_timeout(const verification_request& req,
              std::chrono::seconds margin = std::chrono::seconds{60});

} // namespace sv
