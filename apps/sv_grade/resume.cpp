#include "apps/sv_grade/resume.hpp"

#include "apps/sv_grade/line_reader.hpp"
#include "messages/protocol.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <stdexcept>
#include <unistd.h>

namespace sv::grade {

namespace {

/// The JSON string token at the start of `text`, or empty.
std::string_view string_token(std::string_view text) {
  if (text.empty() || text.front() != '"')
    return {};
  for (size_t i = 1; i < text.size(); ++i) {
    if (text[i] == '\\')
      ++i;
    else if (text[i] == '"')
      return text.substr(0, i + 1);
  }
  return {};
}

} // namespace

bool scan_output_line(std::string_view text, uint64_t& line, bool& has_line,
                      std::string& id) {
  constexpr std::string_view head = "{\"id\":";
  constexpr std::string_view key = ",\"line\":";
  if (text.substr(0, head.size()) != head || text.back() != '}')
    return false;
  auto rest = text.substr(head.size());
  id.clear();
  if (rest.substr(0, 4) != "null") {
    auto token = string_token(rest);
    if (token.empty())
      return false;
    auto j = json::parse(token, nullptr, false);
    if (!j.is_string())
      return false;
    id = j.get<std::string>();
  }
  has_line = false;
  auto k = text.rfind(key);
  if (k == std::string_view::npos)
    return true;
  auto digits = text.substr(k + key.size());
  digits.remove_suffix(1);
  if (digits.empty() || digits.size() > 19 ||
      digits.find_first_not_of("0123456789") != std::string_view::npos)
    return true; // a "line" key inside the result, not ours
  line = std::stoull(std::string{digits});
  has_line = true;
  return true;
}

answered_lines read_answered(const std::string& path) {
  answered_lines out;
  auto fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT)
      return out;
    throw std::runtime_error("output " + path + ": " + std::strerror(errno));
  }
  auto size = ::lseek(fd, 0, SEEK_END);
  ::lseek(fd, 0, SEEK_SET);
  line_reader reader{fd, -1, size_t{1} << 31};
  std::string text;
  uint64_t offset = 0;
  uint64_t n = 0;
  for (;;) {
    auto st = reader.next(text);
    if (st == line_reader::status::end)
      break;
    if (st == line_reader::status::error) {
      ::close(fd);
      throw std::runtime_error("output " + path + ": " + reader.error());
    }
    ++n;
    uint64_t len =
      st == line_reader::status::line ? text.size() : reader.skipped();
    bool complete = offset + len + 1 <= static_cast<uint64_t>(size);
    uint64_t line = 0;
    bool has_line = false;
    std::string id;
    bool ok = st == line_reader::status::line &&
              scan_output_line(text, line, has_line, id);
    if (!complete) {
      out.torn = true;
      break;
    }
    if (!ok) {
      ::close(fd);
      throw std::runtime_error("output " + path + " line " + std::to_string(n) +
                               " is not an sv-grade output line; not "
                               "resuming into it");
    }
    if (has_line)
      out.lines.insert(line);
    else if (!id.empty())
      out.ids.insert(id);
    ++out.count;
    offset += len + 1;
    out.good_bytes = offset;
  }
  ::close(fd);
  return out;
}

} // namespace sv::grade
