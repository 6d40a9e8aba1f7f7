#include "messages/bounded_json.hpp"

#include <unordered_set>
#include <utility>

namespace sv {

namespace {

/// The key under which `make_json_text_value` keeps the compact text.
constexpr const char* text_key = "sv.json_text";

/// nlohmann's message without its "[json.exception.parse_error.101] ".
std::string strip_prefix(std::string_view what) {
  if (auto i = what.find("] ");
      !what.empty() && what.front() == '[' && i != std::string_view::npos)
    what.remove_prefix(i + 2);
  return std::string{what};
}

/// One SAX pass that checks the limits and, when `Build`, builds the DOM
/// (with an explicit stack, like nlohmann's own builder).
template <bool Build>
class bounded_handler {
public:
  using string_t = json::string_t;

  bounded_handler(json* root, json_text_info* info, const json_limits& limits)
      : root_(root), info_(info), limits_(limits) {}

  const std::string& error() const noexcept { return error_; }

  // -- scalars ---------------------------------------------------------------

  bool null() { return value(nullptr); }
  bool boolean(bool x) { return value(x); }
  bool number_integer(json::number_integer_t x) {
    note_reward(static_cast<double>(x));
    return value(x);
  }
  bool number_unsigned(json::number_unsigned_t x) {
    note_reward(static_cast<double>(x));
    return value(x);
  }
  bool number_float(json::number_float_t x, const string_t&) {
    note_reward(x);
    return value(x);
  }
  bool string(string_t& x) { return value(std::move(x)); }
  bool binary(json::binary_t&) { return fail("binary values are not JSON"); }

  // -- containers ------------------------------------------------------------

  bool start_object(size_t) { return open(true); }
  bool start_array(size_t) { return open(false); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(string_t& k) {
    auto& top = levels_.back();
    bool fresh;
    if constexpr (Build) {
      fresh = !top.node->contains(k);
    } else {
      fresh = top.keys.insert(k).second;
    }
    if (!fresh)
      return fail("duplicate key \"" + truncate_for_message(k) + "\"" +
                  where(false));
    if (!count()) // a member costs a node of its own
      return false;
    top.key = std::move(k);
    return true;
  }

  bool parse_error(size_t, const std::string&,
                   const nlohmann::detail::exception& ex) {
    return fail(truncate_for_message(strip_prefix(ex.what()), 300));
  }

private:
  struct level {
    bool object = false;
    std::string key;
    size_t index = 0;
    json* node = nullptr;
    std::unordered_set<std::string> keys; // validation only
  };

  bool fail(std::string what) {
    if (error_.empty())
      error_ = std::move(what);
    return false;
  }

  /// " at a.b[3]": the place of the next value (`inner`) or of the open
  /// container; "" at the top.
  std::string where(bool inner = true) const {
    auto n = levels_.size() - (inner || levels_.empty() ? 0 : 1);
    if (n == 0)
      return {};
    std::string path;
    for (size_t i = 0; i < n && path.size() <= 200; ++i) {
      auto& l = levels_[i];
      if (l.object)
        path += (path.empty() ? "" : ".") + l.key;
      else
        path += "[" + std::to_string(l.index) + "]";
    }
    return " at " + truncate_for_message(path);
  }

  void note_reward(double x) {
    if constexpr (!Build) {
      if (levels_.size() == 1 && levels_.back().object &&
          levels_.back().key == "reward")
        info_->reward = x;
    }
  }

  /// Where the next value goes (Build only).
  json* slot() {
    if (levels_.empty())
      return root_;
    auto& top = levels_.back();
    if (top.object)
      return &(*top.node)[top.key];
    top.node->push_back(nullptr);
    return &top.node->back();
  }

  /// Counts one more value (Build only): false past the limit.
  bool count() {
    if constexpr (Build) {
      if (++values_ > limits_.max_values)
        return fail("more than " + std::to_string(limits_.max_values) +
                    " values in one document" + where());
    }
    return true;
  }

  template <class T>
  bool value(T&& x) {
    if (!count())
      return false;
    if constexpr (Build)
      *slot() = std::forward<T>(x);
    advance();
    return true;
  }

  void advance() {
    if (!levels_.empty() && !levels_.back().object)
      ++levels_.back().index;
  }

  bool open(bool object) {
    if (levels_.size() >= limits_.max_depth)
      return fail("nested deeper than " + std::to_string(limits_.max_depth) +
                  " levels" + where());
    if (!count())
      return false;
    level l;
    l.object = object;
    if constexpr (Build) {
      l.node = slot();
      *l.node = object ? json::object() : json::array();
    }
    if (levels_.empty() && info_ != nullptr)
      info_->is_object = object;
    levels_.push_back(std::move(l));
    return true;
  }

  bool close() {
    levels_.pop_back();
    advance();
    return true;
  }

  json* root_;
  json_text_info* info_;
  const json_limits& limits_;
  std::vector<level> levels_;
  std::string error_;
  size_t values_ = 0;
};

/// Checks what the SAX parser does not: size and NUL bytes (nlohmann stops
/// at a NUL as at the end of input, so `{...}\0junk` would pass).
std::string precheck(std::string_view text, const json_limits& limits) {
  if (text.size() > limits.max_bytes)
    return "the JSON text is " + std::to_string(text.size()) +
           " bytes, more than the limit of " + std::to_string(limits.max_bytes);
  if (auto i = text.find('\0'); i != std::string_view::npos)
    return "a NUL byte at offset " + std::to_string(i) +
           " (JSON text must not contain one)";
  return {};
}

template <bool Build>
std::string run(std::string_view text, json* out, json_text_info* info,
                const json_limits& limits) {
  if (auto err = precheck(text, limits); !err.empty())
    return err;
  bounded_handler<Build> handler{out, info, limits};
  bool ok = false;
  try {
    ok = json::sax_parse(text.begin(), text.end(), &handler,
                         json::input_format_t::json, true);
  } catch (const std::exception& e) {
    return truncate_for_message(strip_prefix(e.what()), 300);
  }
  if (!ok)
    return handler.error().empty() ? std::string{"not valid JSON"}
                                   : handler.error();
  return {};
}

} // namespace

std::string parse_bounded(std::string_view text, json& out,
                          const json_limits& limits) {
  json doc;
  auto err = run<true>(text, &doc, nullptr, limits);
  if (err.empty())
    out = std::move(doc);
  return err;
}

std::string check_bounded(std::string_view text, json_text_info& info,
                          const json_limits& limits) {
  info = json_text_info{};
  return run<false>(text, nullptr, &info, limits);
}

std::vector<uint8_t> minify_json_text(std::string_view text) {
  std::vector<uint8_t> out;
  out.reserve(text.size());
  bool in_string = false;
  bool escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      continue;
    } else if (c == '"') {
      in_string = true;
    }
    out.push_back(static_cast<uint8_t>(c));
  }
  return out; // no shrink_to_fit: it would hold two copies at once
}

json make_json_text_value(std::vector<uint8_t> compact,
                          std::optional<double> reward) {
  json out = json::object();
  out[text_key] = json::binary(std::move(compact));
  if (reward)
    out["reward"] = *reward;
  return out;
}

const std::vector<uint8_t>* json_text_of(const json& value) {
  if (!value.is_object())
    return nullptr;
  auto i = value.find(text_key);
  if (i == value.end() || !i->is_binary())
    return nullptr;
  return &i->get_binary();
}

std::string truncate_for_message(std::string_view s, size_t max) {
  if (s.size() <= max)
    return std::string{s};
  return std::string{s.substr(0, max)} + "... (" +
         std::to_string(s.size() - max) + " more bytes)";
}

bool parse_wire_json(std::string_view text, json& out) {
  return parse_bounded(text, out).empty();
}

} // namespace sv
