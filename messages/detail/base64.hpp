#pragma once

// RFC 4648 standard base64 (the alphabet with + and /, '=' padding): the
// bytes of a file in JSON (`{"base64": "..."}` in `files`), and
// SandboxFusion's `files` and `fetch_files`.

#include <string>
#include <string_view>

namespace sv {

std::string base64_encode(std::string_view bytes);

/// Decodes `text` into `out`. Line breaks (CR, LF) are skipped, as MIME
/// writers add them; anything else outside the alphabet, a wrong length or
/// misplaced padding is refused: returns false and says why in `why`.
bool base64_decode(std::string_view text, std::string& out, std::string& why);

} // namespace sv
