#pragma once

// RFC 4648 standard base64 (the alphabet with + and /, '=' padding), as
// SandboxFusion's `files` and `fetch_files` carry bytes. No sockets, no
// actors.

#include <string>
#include <string_view>

namespace sv::serve {

std::string base64_encode(std::string_view bytes);

/// Decodes `text` into `out`. Line breaks (CR, LF) are skipped, as MIME
/// writers add them; anything else outside the alphabet, a wrong length or
/// misplaced padding is refused: returns false and says why in `why`.
bool base64_decode(std::string_view text, std::string& out, std::string& why);

} // namespace sv::serve
