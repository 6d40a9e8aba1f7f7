#pragma once

// --resume: what an existing output file already answers. Every complete
// output line names its input line ("line": N, at its end) and its id (at
// its start); only those two are read, so a huge result costs nothing. A
// torn last line (no newline: the previous run died writing it) is not
// counted, and the caller cuts the file back to `good_bytes`.

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_set>

namespace sv::grade {

struct answered_lines {
  /// Input line numbers with a complete output line.
  std::unordered_set<uint64_t> lines;
  /// Ids of complete output lines that carry no line number (older runs).
  std::unordered_set<std::string> ids;
  /// Bytes of the file up to the end of its last complete line.
  uint64_t good_bytes = 0;
  /// Whether a torn last line follows `good_bytes`.
  bool torn = false;
  /// Complete lines read.
  uint64_t count = 0;
};

/// Reads the output file `path`; a missing file answers nothing. Throws
/// std::runtime_error when it cannot be read or has a line that is not an
/// sv-grade output line (before its last).
answered_lines read_answered(const std::string& path);

/// The line number and id of one output line (without its newline); false
/// when it is not an output line. `id` stays empty for `"id": null`.
bool scan_output_line(std::string_view text, uint64_t& line, bool& has_line,
                      std::string& id);

} // namespace sv::grade
