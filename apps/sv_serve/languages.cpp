#include "apps/sv_serve/languages.hpp"

#include "messages/bounded_json.hpp"
#include "messages/config_file.hpp"
#include "messages/json.hpp"
#include "messages/validation.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

namespace sv::serve {

namespace {

language make(std::string name, std::string source,
              std::vector<std::string> compile, std::vector<std::string> run) {
  language l;
  l.name = std::move(name);
  l.source = std::move(source);
  l.compile = std::move(compile);
  l.run = std::move(run);
  return l;
}

bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > 64)
    return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' ||
           c == '-' || c == '+' || c == '.';
  });
}

std::vector<std::string> read_command(const json& j, const std::string& path,
                                      bool may_be_empty) {
  if (!j.is_array())
    throw json_error(path, "expected an array of strings (argv)");
  if (j.empty() && !may_be_empty)
    throw json_error(path, "must name a program");
  std::vector<std::string> out;
  for (size_t i = 0; i < j.size(); ++i) {
    if (!j[i].is_string() || j[i].get_ref<const std::string&>().empty() ||
        j[i].get_ref<const std::string&>().find('\0') != std::string::npos)
      throw json_error(path + "[" + std::to_string(i) + "]",
                       "expected a non-empty string without NUL");
    out.push_back(j[i].get<std::string>());
  }
  return out;
}

bool is_reserved(std::string_view path) {
  return path == runner_file_name || path == request_file_name ||
         path == result_file_name || path == runner_log_name;
}

language read_language(const std::string& name, const json& j) {
  auto at = "languages." + name;
  if (!valid_name(name))
    throw json_error(at, "a name is 1 to 64 of [A-Za-z0-9_+.-]");
  try {
    check_object(j, "language", {"source", "compile", "run", "image", "env"});
  } catch (const json_error& e) {
    throw json_error(e.path().empty() ? at : at + "." + e.path(), e.reason());
  }
  language l;
  l.name = name;
  if (!j.contains("source") || !j["source"].is_string())
    throw json_error(at + ".source", "expected the code's file name");
  l.source = j["source"].get<std::string>();
  if (!is_confined_path(l.source) || is_reserved(l.source))
    throw json_error(at + ".source",
                     "must be a relative path in the call's directory, not "
                     "one of the runner's own files");
  if (!j.contains("run"))
    throw json_error(at + ".run", "missing (the command that runs the code)");
  l.run = read_command(j["run"], at + ".run", false);
  if (j.contains("compile") && !j["compile"].is_null())
    l.compile = read_command(j["compile"], at + ".compile", true);
  if (j.contains("image")) {
    if (!j["image"].is_string())
      throw json_error(at + ".image", "expected a string");
    l.image = j["image"].get<std::string>();
  }
  if (j.contains("env")) {
    if (!j["env"].is_object())
      throw json_error(at + ".env", "expected an object of strings");
    for (auto& [k, v] : j["env"].items()) {
      if (!v.is_string() || !is_env_name(k) || is_loader_variable(k))
        throw json_error(at + ".env." + k,
                         "expected a variable name (no loader variable) and "
                         "a string");
      l.env[k] = v.get<std::string>();
    }
  }
  return l;
}

} // namespace

language_table language_table::defaults() {
  language_table t;
  for (auto l : {
         make("python", "main.py", {}, {"{python}", "main.py"}),
         make("bash", "main.sh", {}, {"bash", "main.sh"}),
         make("cpp", "main.cpp",
              {"g++", "-std=c++17", "-O2", "-o", "main", "main.cpp"},
              {"./main"}),
         make("c", "main.c",
              {"gcc", "-std=c11", "-O2", "-o", "main", "main.c", "-lm"},
              {"./main"}),
         make("nodejs", "main.js", {}, {"node", "main.js"}),
         make("go", "main.go", {"go", "build", "-o", "main", "main.go"},
              {"./main"}),
         make("java", "Main.java", {"javac", "-encoding", "UTF-8", "Main.java"},
              {"java", "-ea", "-cp", ".", "Main"}),
         make("rust", "main.rs", {"rustc", "-O", "-o", "main", "main.rs"},
              {"./main"}),
       })
    t.entries_.emplace(l.name, std::move(l));
  return t;
}

void language_table::merge(const json& languages) {
  if (!languages.is_object())
    throw json_error("languages", "expected an object of languages by name");
  for (auto& [name, entry] : languages.items()) {
    if (entry.is_null())
      entries_.erase(name);
    else
      entries_[name] = read_language(name, entry);
  }
  std::lock_guard<std::mutex> guard{*mtx_};
  states_.clear();
}

const language* language_table::find(std::string_view name) const {
  auto i = entries_.find(std::string{name});
  return i == entries_.end() ? nullptr : &i->second;
}

std::vector<std::string> language_table::names() const {
  std::vector<std::string> out;
  for (auto& [name, l] : entries_)
    out.push_back(name);
  return out;
}

std::vector<std::string> language_table::images() const {
  std::set<std::string> out;
  for (auto& [name, l] : entries_)
    out.insert(l.image);
  return {out.begin(), out.end()};
}

namespace {

/// The programs a language needs from its sandbox.
std::vector<std::string> programs_of(const language& l) {
  std::vector<std::string> out;
  for (auto* cmd : {&l.compile, &l.run}) {
    if (cmd->empty())
      continue;
    auto& prog = cmd->front();
    if (prog == "{python}" ||
        (prog.find('/') != std::string::npos && prog.front() != '/'))
      continue;
    out.push_back(prog);
  }
  return out;
}

} // namespace

std::vector<std::string>
language_table::programs(const std::string& image) const {
  std::set<std::string> out;
  for (auto& [name, l] : entries_)
    if (l.image == image)
      for (auto& p : programs_of(l))
        out.insert(p);
  return {out.begin(), out.end()};
}

void language_table::apply_probe(const std::string& image, const json& found) {
  std::lock_guard<std::mutex> guard{*mtx_};
  for (auto& [name, l] : entries_) {
    if (l.image != image)
      continue;
    language_state st;
    st.known = true;
    for (auto& p : programs_of(l)) {
      auto i = found.find(p);
      if (i == found.end() || !i->is_string()) {
        st.available = false;
        st.reason = "its toolchain is missing here: program \"" + p +
                    "\" not found in the sandbox";
        break;
      }
    }
    states_[name] = st;
  }
}

void language_table::probe_failed(const std::string& image,
                                  const std::string& why) {
  std::lock_guard<std::mutex> guard{*mtx_};
  for (auto& [name, l] : entries_)
    if (l.image == image)
      states_[name] = language_state{false, true, "probe failed: " + why};
}

void language_table::mark_missing(const std::string& name,
                                  const std::string& program) {
  std::lock_guard<std::mutex> guard{*mtx_};
  states_[name] = language_state{true, false,
                                 "its toolchain is missing here: program \"" +
                                   program + "\" not found in the sandbox"};
}

language_state language_table::state(const std::string& name) const {
  std::lock_guard<std::mutex> guard{*mtx_};
  auto i = states_.find(name);
  if (i == states_.end())
    return language_state{false, true, "not probed yet"};
  return i->second;
}

json language_table::describe() const {
  auto list = json::array();
  for (auto& [name, l] : entries_) {
    auto st = state(name);
    json entry{{"name", name},
               {"available", st.known ? json(st.available) : json(nullptr)},
               {"compiled", !l.compile.empty()},
               {"source", l.source},
               {"image", l.image}};
    if (!st.available || !st.known)
      entry["reason"] = st.reason;
    list.push_back(std::move(entry));
  }
  return json{{"languages", std::move(list)}};
}

// -- the config file ----------------------------------------------------------

namespace {

size_t read_size(const json& j, const char* key, size_t lo, size_t hi) {
  if (!j.is_number_integer() ||
      (!j.is_number_unsigned() && j.get<int64_t>() < 0) ||
      j.get<uint64_t>() < lo || j.get<uint64_t>() > hi)
    throw json_error(key, "expected an integer in [" + std::to_string(lo) +
                            ", " + std::to_string(hi) + "]");
  return static_cast<size_t>(j.get<uint64_t>());
}

double read_seconds(const json& j, const char* key) {
  if (!j.is_number() || !std::isfinite(j.get<double>()) ||
      j.get<double>() <= 0 || j.get<double>() > max_timeout_s)
    throw json_error(key, "expected seconds in (0, 604800]");
  return j.get<double>();
}

void apply_settings(const json& j, compat_settings& out) {
  check_object(j, "compat config",
               {"languages", "max_output_bytes", "max_fetch_bytes",
                "max_result_bytes", "max_timeout_s", "ready_timeout_s",
                "runner_margin_s", "max_files"});
  for (auto& [key, v] : j.items()) {
    if (key == "languages")
      out.languages.merge(v);
    else if (key == "max_output_bytes")
      out.max_output_bytes =
        read_size(v, "max_output_bytes", 1, size_t{1} << 30);
    else if (key == "max_fetch_bytes")
      out.max_fetch_bytes = read_size(v, "max_fetch_bytes", 0, size_t{1} << 30);
    else if (key == "max_result_bytes")
      out.max_result_bytes =
        read_size(v, "max_result_bytes", 4096, size_t{1} << 31);
    else if (key == "max_files")
      out.max_files = read_size(v, "max_files", 0, 1000000);
    else if (key == "max_timeout_s")
      out.max_timeout_s = read_seconds(v, "max_timeout_s");
    else if (key == "ready_timeout_s")
      out.ready_timeout_s = read_seconds(v, "ready_timeout_s");
    else
      out.runner_margin_s = read_seconds(v, "runner_margin_s");
  }
}

} // namespace

std::shared_ptr<compat_settings> load_compat_settings(const std::string& path,
                                                      size_t max_json_depth) {
  auto fail = [&](const std::string& why) {
    return std::runtime_error("--compat-config " + path + ": " + why);
  };
  std::ifstream in{path, std::ios::binary};
  if (!in)
    throw fail("cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  auto ends_with = [&](std::string_view suffix) {
    return path.size() >= suffix.size() &&
           path.compare(path.size() - suffix.size(), suffix.size(), suffix) ==
             0;
  };
  config_document doc;
  yaml_limits limits;
  limits.json.max_depth = max_json_depth;
  limits.json.max_bytes = size_t{16} << 20;
  try {
    if (ends_with(".yaml") || ends_with(".yml"))
      doc = parse_yaml_config(text.str(), limits);
    else if (auto err = parse_bounded(text.str(), doc.value, limits.json);
             !err.empty())
      throw fail(err);
  } catch (const config_error& e) {
    throw fail(e.what());
  }
  auto out = std::make_shared<compat_settings>();
  try {
    apply_settings(doc.value, *out);
  } catch (const json_error& e) {
    auto where = doc.locate(e.path());
    throw fail((where.empty() ? "" : where + ": ") + std::string{e.what()});
  }
  return out;
}

} // namespace sv::serve
