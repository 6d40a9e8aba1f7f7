#include "messages/detail/base64.hpp"

#include <array>
#include <cstdint>

namespace sv {

namespace {

constexpr char alphabet[] =
  "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// The value of each byte in the alphabet, -1 outside it.
constexpr std::array<int8_t, 256> decoding_table() {
  std::array<int8_t, 256> table{};
  for (auto& x : table)
    x = -1;
  for (int i = 0; i < 64; ++i)
    table[static_cast<unsigned char>(alphabet[i])] = static_cast<int8_t>(i);
  return table;
}

constexpr auto values = decoding_table();

} // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  auto at = [&](size_t k) {
    return static_cast<uint32_t>(static_cast<unsigned char>(bytes[k]));
  };
  for (; i + 3 <= bytes.size(); i += 3) {
    auto n = at(i) << 16 | at(i + 1) << 8 | at(i + 2);
    out += alphabet[n >> 18 & 63];
    out += alphabet[n >> 12 & 63];
    out += alphabet[n >> 6 & 63];
    out += alphabet[n & 63];
  }
  if (auto rest = bytes.size() - i; rest > 0) {
    auto n = at(i) << 16 | (rest == 2 ? at(i + 1) << 8 : 0);
    out += alphabet[n >> 18 & 63];
    out += alphabet[n >> 12 & 63];
    out += rest == 2 ? alphabet[n >> 6 & 63] : '=';
    out += '=';
  }
  return out;
}

bool base64_decode(std::string_view text, std::string& out, std::string& why) {
  out.clear();
  out.reserve(text.size() / 4 * 3);
  uint32_t group = 0;
  size_t in_group = 0; // symbols of the current group of 4
  size_t padding = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    auto c = static_cast<unsigned char>(text[i]);
    if (c == '\n' || c == '\r')
      continue;
    if (c == '=') {
      if (in_group < 2) {
        why = "misplaced '=' at offset " + std::to_string(i);
        return false;
      }
      ++padding;
      ++in_group;
    } else if (values[c] < 0 || padding > 0) {
      why = padding > 0
              ? "data after the padding at offset " + std::to_string(i)
              : "a character outside the base64 alphabet at "
                "offset " +
                  std::to_string(i);
      return false;
    } else {
      group = group << 6 | static_cast<uint32_t>(values[c]);
      ++in_group;
    }
    if (in_group == 4) {
      group <<= 6 * padding;
      out += static_cast<char>(group >> 16 & 0xff);
      if (padding < 2)
        out += static_cast<char>(group >> 8 & 0xff);
      if (padding < 1)
        out += static_cast<char>(group & 0xff);
      group = 0;
      in_group = 0;
      if (padding > 0)
        padding = 3; // nothing may follow a padded group
    }
  }
  if (in_group != 0) {
    why = "its length is not a multiple of 4";
    return false;
  }
  return true;
}

} // namespace sv
