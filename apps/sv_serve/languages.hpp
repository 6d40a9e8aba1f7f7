#pragma once

// The languages of sv-serve's compatible front doors (/run_code, /execute;
// docs/compat.md): a table from a name to how its code is built and run by
// the built-in runner (source file name, compile and run commands, the image
// or the host's view, environment), the shipped defaults, a configuration
// file that adds to them, and what the start-up probe found in the sandbox.
// No sockets, no actors.

#include "messages/protocol.hpp"

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sv::serve {

/// How the built-in runner builds and runs one language. In a command,
/// "{python}" is the runner's own interpreter; a bare program name is looked
/// up on the sandbox's PATH.
struct language {
  std::string name;
  /// The file the code is written to, in the call's directory.
  std::string source;
  /// Empty: nothing to compile.
  std::vector<std::string> compile;
  std::vector<std::string> run;
  /// The sandbox's image; empty: the provider's view of the host.
  std::string image;
  env_map env;
};

/// What is known of a language's toolchain in the sandbox.
struct language_state {
  /// Not probed yet, or the probe failed: calls go ahead and the runner
  /// checks the toolchain itself.
  bool known = false;
  bool available = true;
  /// Why it is not available (or why it is not known).
  std::string reason;
};

/// The table. Entries are fixed once the server runs; their states change
/// (the probe, a runner that found a program missing) under a lock.
class language_table {
public:
  /// python, bash, cpp, c, nodejs, go, java, rust.
  static language_table defaults();

  /// `languages` of a config file over this table: an entry replaces the
  /// one of its name, null removes it. Throws `json_error` naming the field.
  void merge(const json& languages);

  const language* find(std::string_view name) const;
  std::vector<std::string> names() const;

  /// The images the entries use ("" for the host view), each once.
  std::vector<std::string> images() const;
  /// The programs to look for in the sandbox of `image`: each command's
  /// program, unless it is "{python}" or a path made by the compile.
  std::vector<std::string> programs(const std::string& image) const;

  /// The probe of `image` found these programs (name -> path or null).
  void apply_probe(const std::string& image, const json& found);
  /// The probe of `image` failed.
  void probe_failed(const std::string& image, const std::string& why);
  /// A runner found `program` of `name` missing.
  void mark_missing(const std::string& name, const std::string& program);

  language_state state(const std::string& name) const;
  /// {"languages": [{"name", "available", "compiled", "source", "image",
  /// "reason"}...]} for GET /v1/languages.
  json describe() const;

private:
  std::map<std::string, language> entries_;
  /// (A pointer, so the table can move.)
  std::unique_ptr<std::mutex> mtx_ = std::make_unique<std::mutex>();
  std::map<std::string, language_state> states_;
};

/// The settings of the compatible routes (`--compat-config`).
struct compat_settings {
  language_table languages = language_table::defaults();
  /// Per captured stream of a command: the rest is read and dropped.
  size_t max_output_bytes = size_t{1} << 20;
  /// All fetched files of one call together.
  size_t max_fetch_bytes = size_t{8} << 20;
  /// result.json: within what a provider downloads (the local default is
  /// 16 MiB); the runner cuts the streams to fit.
  size_t max_result_bytes = size_t{12} << 20;
  /// The longest compile_timeout, run_timeout or timeout a call may ask.
  double max_timeout_s = 3600;
  /// Create and ready of the call's sandbox.
  double ready_timeout_s = 60;
  /// The runner's own slack past the command timeouts (start, reaping,
  /// fetching); it only matters when the runner itself hangs.
  double runner_margin_s = 15;
  /// Largest `files` and `fetch_files` lists.
  size_t max_files = 1000;
};

/// Reads a compat config file (JSON, or YAML by its extension):
/// {"languages": {...}, "max_output_bytes", "max_fetch_bytes",
/// "max_result_bytes", "max_timeout_s", "ready_timeout_s",
/// "runner_margin_s", "max_files"}. Throws std::runtime_error naming the
/// file, the place and the field.
std::shared_ptr<compat_settings> load_compat_settings(const std::string& path,
                                                      size_t max_json_depth);

} // namespace sv::serve
