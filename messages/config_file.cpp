#include "messages/config_file.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <unordered_map>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>

namespace sv {

namespace {

constexpr const char* metadata_key = "default_metadata";
constexpr const char* yaml_tag_prefix = "tag:yaml.org,2002:";

text_position to_position(const YAML::Mark& m) {
  return {static_cast<size_t>(std::max(m.line, 0)) + 1,
          static_cast<size_t>(std::max(m.column, 0)) + 1};
}

std::string format(text_position p) {
  return "line " + std::to_string(p.line) + ", column " +
         std::to_string(p.column);
}

[[noreturn]] void fail(const YAML::Mark& m, const std::string& what) {
  throw config_error(format(to_position(m)) + ": " + what);
}

bool all_digits(std::string_view s, int base) {
  if (s.empty())
    return false;
  for (char c : s) {
    bool ok = base == 16  ? std::isxdigit(static_cast<unsigned char>(c)) != 0
              : base == 8 ? (c >= '0' && c <= '7')
                          : (c >= '0' && c <= '9');
    if (!ok)
      return false;
  }
  return true;
}

bool is_float_text(std::string_view s) {
  // [-+]? ( \. [0-9]+ | [0-9]+ ( \. [0-9]* )? ) ( [eE] [-+]? [0-9]+ )?
  size_t i = 0;
  if (i < s.size() && (s[i] == '-' || s[i] == '+'))
    ++i;
  size_t digits = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])))
    ++i, ++digits;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])))
      ++i, ++digits;
  }
  if (digits == 0)
    return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '-' || s[i] == '+'))
      ++i;
    if (!all_digits(s.substr(i), 10))
      return false;
    i = s.size();
  }
  return i == s.size();
}

/// A plain scalar typed by the YAML 1.2 core schema.
json resolve_plain(const std::string& s, const YAML::Mark& m) {
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL")
    return nullptr;
  if (s == "true" || s == "True" || s == "TRUE")
    return true;
  if (s == "false" || s == "False" || s == "FALSE")
    return false;
  std::string_view body = s;
  bool negative = false;
  if (body.front() == '-' || body.front() == '+') {
    negative = body.front() == '-';
    body.remove_prefix(1);
  }
  int base = 0;
  std::string_view digits;
  if (body.size() > 2 && body[0] == '0' && body[1] == 'x' && s[0] != '-' &&
      s[0] != '+') {
    base = 16, digits = body.substr(2);
  } else if (body.size() > 2 && body[0] == '0' && body[1] == 'o' &&
             s[0] != '-' && s[0] != '+') {
    base = 8, digits = body.substr(2);
  } else {
    base = 10, digits = body;
  }
  if (all_digits(digits, base)) {
    errno = 0;
    std::string text{digits};
    auto magnitude = std::strtoull(text.c_str(), nullptr, base);
    constexpr auto max =
      static_cast<unsigned long long>(std::numeric_limits<int64_t>::max());
    if (errno == ERANGE || magnitude > max + (negative ? 1 : 0))
      fail(m, "integer out of range: " + truncate_for_message(s, 40));
    if (!negative)
      return static_cast<int64_t>(magnitude);
    return magnitude == max + 1 ? std::numeric_limits<int64_t>::min()
                                : -static_cast<int64_t>(magnitude);
  }
  if (is_float_text(s)) {
    errno = 0;
    double d = std::strtod(s.c_str(), nullptr);
    if (errno == ERANGE && std::isinf(d))
      fail(m, "number out of range: " + truncate_for_message(s, 40));
    return d;
  }
  std::string lower = s;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  if (lower == ".inf" || lower == "-.inf" || lower == "+.inf" ||
      lower == ".nan")
    fail(m, "JSON has no infinity or NaN: " + s);
  return s;
}

/// Builds JSON from yaml-cpp's parser events, enforcing the limits as it
/// goes (an exception from a handler stops the parser).
class json_builder : public YAML::EventHandler {
public:
  json_builder(const yaml_limits& limits, config_document& out)
      : limits_(limits), out_(out) {
    // nop
  }

  bool has_value() const noexcept { return done_; }

  // -- events ----------------------------------------------------------------

  void OnDocumentStart(const YAML::Mark&) override {
    // nop
  }

  void OnDocumentEnd() override {
    // nop
  }

  void OnNull(const YAML::Mark& m, YAML::anchor_t anchor) override {
    if (expecting_key())
      fail(m, "a key must be a string, got null");
    add(json(nullptr), m, anchor, 1);
  }

  void OnAlias(const YAML::Mark& m, YAML::anchor_t anchor) override {
    auto i = anchors_.find(anchor);
    if (i == anchors_.end())
      fail(m, "an alias to a node that contains it");
    if (expecting_key())
      fail(m, "an alias cannot be a key");
    auto& a = i->second;
    if (current_depth() + a.height > limits_.json.max_depth)
      fail(m, "nested deeper than " + std::to_string(limits_.json.max_depth) +
                " levels (through an alias)");
    count(m, a.nodes);
    // The alias adds its anchor's nodes without descending: a copy.
    add_built(json(a.value), m, 0, a.height, a.nodes);
  }

  void OnScalar(const YAML::Mark& m, const std::string& tag,
                YAML::anchor_t anchor, const std::string& value) override {
    if (expecting_key()) {
      auto& f = stack_.back();
      if (anchor != 0)
        fail(m, "an anchor on a key is not supported");
      if (f.value.contains(value)) {
        auto path = child_path(f, value);
        fail(m, "duplicate key \"" + truncate_for_message(value, 60) +
                  "\" (first at " + format(out_.positions[path]) + ")");
      }
      if (value == "<<" && tag == "?")
        fail(m, "merge keys (<<) are not supported");
      count(m, 1);
      f.key = value;
      f.has_key = true;
      f.key_mark = m;
      return;
    }
    add(typed_scalar(m, tag, value), m, anchor, 1);
  }

  void OnSequenceStart(const YAML::Mark& m, const std::string& tag,
                       YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    check_collection_tag(m, tag, "seq");
    open(json::array(), m, anchor);
  }

  void OnSequenceEnd() override { close(); }

  void OnMapStart(const YAML::Mark& m, const std::string& tag,
                  YAML::anchor_t anchor, YAML::EmitterStyle::value) override {
    check_collection_tag(m, tag, "map");
    open(json::object(), m, anchor);
  }

  void OnMapEnd() override { close(); }

private:
  struct frame {
    json value;
    std::string path;
    YAML::Mark mark;
    YAML::anchor_t anchor = 0;
    size_t first_node = 0; // nodes_ when it opened
    size_t height = 1;
    std::string key;
    bool has_key = false;
    YAML::Mark key_mark;
  };

  struct anchored {
    json value;
    size_t nodes = 0;
    size_t height = 0;
  };

  bool expecting_key() const {
    return !stack_.empty() && stack_.back().value.is_object() &&
           !stack_.back().has_key;
  }

  size_t current_depth() const {
    return stack_.size(); // the depth of the open collection
  }

  static std::string child_path(const frame& f, const std::string& key) {
    return f.path.empty() ? key : f.path + "." + key;
  }

  void count(const YAML::Mark& m, size_t n) {
    nodes_ += n;
    if (nodes_ > limits_.max_nodes)
      fail(m, "more than " + std::to_string(limits_.max_nodes) +
                " values (aliases count what they copy)");
  }

  void check_collection_tag(const YAML::Mark& m, const std::string& tag,
                            const char* kind) {
    if (expecting_key())
      fail(m, "a key must be a string, got a collection");
    if (tag.empty() || tag == "?" || tag == "!" ||
        tag == std::string{yaml_tag_prefix} + kind)
      return;
    fail(m, "unsupported tag " + truncate_for_message(tag, 60));
  }

  json typed_scalar(const YAML::Mark& m, const std::string& tag,
                    const std::string& value) {
    if (tag == "!" || tag == std::string{yaml_tag_prefix} + "str")
      return value; // quoted, or !!str
    if (tag == "?" || tag.empty())
      return resolve_plain(value, m);
    auto plain = resolve_plain(value, m);
    auto name = tag.rfind(yaml_tag_prefix, 0) == 0
                  ? tag.substr(std::strlen(yaml_tag_prefix))
                  : std::string{};
    if ((name == "int" && plain.is_number_integer()) ||
        (name == "float" && plain.is_number()) ||
        (name == "bool" && plain.is_boolean()) ||
        (name == "null" && plain.is_null()))
      return name == "float" ? json(plain.get<double>()) : plain;
    if (name == "int" || name == "float" || name == "bool" || name == "null")
      fail(m, "\"" + truncate_for_message(value, 40) + "\" is not a valid !!" +
                name);
    fail(m, "unsupported tag " + truncate_for_message(tag, 60));
  }

  /// The path of the value that starts now, recording where it is.
  std::string place(const YAML::Mark& m) {
    if (stack_.empty()) {
      out_.positions[""] = to_position(m);
      return "";
    }
    auto& f = stack_.back();
    std::string path;
    if (f.value.is_object()) {
      path = child_path(f, f.key);
      out_.positions[path] = to_position(f.key_mark);
    } else {
      path = f.path + "[" + std::to_string(f.value.size()) + "]";
      out_.positions[path] = to_position(m);
    }
    return path;
  }

  void open(json value, const YAML::Mark& m, YAML::anchor_t anchor) {
    if (done_)
      fail(m, "more than one value");
    if (stack_.size() + 1 > limits_.json.max_depth)
      fail(m, "nested deeper than " + std::to_string(limits_.json.max_depth) +
                " levels");
    count(m, 1);
    frame f;
    f.path = place(m);
    f.value = std::move(value);
    f.mark = m;
    f.anchor = anchor;
    f.first_node = nodes_ - 1;
    stack_.push_back(std::move(f));
  }

  void close() {
    auto f = std::move(stack_.back());
    stack_.pop_back();
    finish(std::move(f.value), f.mark, f.anchor, f.height,
           nodes_ - f.first_node);
  }

  void add(json value, const YAML::Mark& m, YAML::anchor_t anchor,
           size_t nodes) {
    if (stack_.size() + 1 > limits_.json.max_depth)
      fail(m, "nested deeper than " + std::to_string(limits_.json.max_depth) +
                " levels");
    count(m, nodes);
    add_built(std::move(value), m, anchor, 1, nodes);
  }

  /// A complete value at the current place (nodes already counted).
  void add_built(json value, const YAML::Mark& m, YAML::anchor_t anchor,
                 size_t height, size_t nodes) {
    if (done_)
      fail(m, "more than one value");
    place(m);
    finish(std::move(value), m, anchor, height, nodes);
  }

  void finish(json value, const YAML::Mark&, YAML::anchor_t anchor,
              size_t height, size_t nodes) {
    if (anchor != 0)
      anchors_[anchor] = anchored{value, nodes, height};
    if (stack_.empty()) {
      out_.value = std::move(value);
      done_ = true;
      return;
    }
    auto& parent = stack_.back();
    parent.height = std::max(parent.height, height + 1);
    if (parent.value.is_object()) {
      parent.value.emplace(std::move(parent.key), std::move(value));
      parent.key.clear();
      parent.has_key = false;
    } else {
      parent.value.push_back(std::move(value));
    }
  }

  const yaml_limits& limits_;
  config_document& out_;
  std::vector<frame> stack_;
  std::unordered_map<YAML::anchor_t, anchored> anchors_;
  size_t nodes_ = 0;
  bool done_ = false;
};

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool looks_like_json(std::string_view text) {
  auto i = text.find_first_not_of(" \t\r\n");
  return i != std::string_view::npos && text[i] == '{';
}

} // namespace

std::string config_document::locate(const std::string& path) const {
  if (positions.empty())
    return "";
  std::string p = path;
  for (;;) {
    if (auto i = positions.find(p); i != positions.end())
      return format(i->second);
    if (p.empty())
      return "";
    auto cut = p.find_last_of(".[");
    p = cut == std::string::npos ? std::string{} : p.substr(0, cut);
  }
}

config_document parse_yaml_config(std::string_view text,
                                  const yaml_limits& limits) {
  if (text.size() > limits.json.max_bytes)
    throw config_error("larger than " + std::to_string(limits.json.max_bytes) +
                       " bytes");
  if (text.find('\0') != std::string_view::npos)
    throw config_error("contains a NUL byte");
  config_document out;
  std::istringstream in{std::string{text}};
  try {
    YAML::Parser parser{in};
    json_builder builder{limits, out};
    if (!parser.HandleNextDocument(builder) || !builder.has_value())
      throw config_error("line 1, column 1: empty document");
    config_document ignored;
    json_builder second{limits, ignored};
    if (parser.HandleNextDocument(second))
      throw config_error("more than one YAML document (--- separates them)");
  } catch (const YAML::Exception& e) {
    throw config_error(format(to_position(e.mark)) + ": " + e.msg);
  }
  return out;
}

std::string provider_config_file::describe(const json_error& e) const {
  auto path = binding.empty()      ? e.path()
              : e.path().empty()   ? binding
              : e.path()[0] == '[' ? binding + e.path()
                                   : binding + "." + e.path();
  std::string out;
  if (auto where = document.locate(path); !where.empty())
    out = where + ": ";
  return out + (path.empty() ? e.reason() : path + ": " + e.reason());
}

provider_config_file
load_provider_config(const std::string& path,
                     const std::vector<std::string>& provider_names,
                     const yaml_limits& limits) {
  std::ifstream in{path, std::ios::binary};
  if (!in)
    throw config_error(std::strerror(errno));
  std::string text;
  // Read at most one byte past the limit, so a huge file is refused cheaply.
  auto max = limits.json.max_bytes;
  std::istreambuf_iterator<char> it{in}, end;
  for (; it != end && text.size() <= max; ++it)
    text.push_back(*it);
  if (text.size() > max)
    throw config_error("larger than " + std::to_string(max) + " bytes");
  provider_config_file out;
  out.is_yaml = ends_with(path, ".yaml") || ends_with(path, ".yml") ||
                (!ends_with(path, ".json") && !looks_like_json(text));
  if (out.is_yaml) {
    out.document = parse_yaml_config(text, limits);
  } else if (auto err = parse_bounded(text, out.document.value, limits.json);
             !err.empty()) {
    throw config_error("not valid JSON: " + err);
  } else {
    // JSON is YAML too: its positions, to place the settings' errors, when
    // the YAML reading agrees with the JSON one (else none).
    try {
      auto as_yaml = parse_yaml_config(text, limits);
      if (as_yaml.value == out.document.value)
        out.document.positions = std::move(as_yaml.positions);
    } catch (const config_error&) {
      // nop: no positions
    }
  }
  auto& doc = out.document.value;
  // A single named binding: `sandbox: {local: {...}, default_metadata: ...}`
  // (a value naming a provider or default metadata; else a misspelt
  // provider name, left for the block's parser to name).
  auto known = [&](const std::string& key) {
    return key == metadata_key ||
           std::find(provider_names.begin(), provider_names.end(), key) !=
             provider_names.end();
  };
  if (doc.is_object() && doc.size() == 1) {
    auto item = doc.begin();
    if (!known(item.key()) && item.value().is_object()) {
      bool names_block = false;
      for (auto& inner : item.value().items())
        names_block = names_block || known(inner.key());
      if (names_block) {
        out.binding = item.key();
        out.block = item.value();
        return out;
      }
    }
  }
  out.block = doc;
  return out;
}

} // namespace sv
