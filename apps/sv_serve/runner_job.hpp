#pragma once

// One call of a compatible front door as a verification of the built-in
// runner (apps/sv_serve/sandbox_runner.py, embedded in the binary): the
// request that writes the code, the caller's files and request.json into a
// fresh sandbox, and the reading of the runner's result.json. Shared by
// /run_code and /execute. No sockets, no actors.

#include "apps/sv_serve/languages.hpp"
#include "messages/protocol.hpp"

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sv::serve {

using ordered_json = nlohmann::ordered_json;

/// The text of sandbox_runner.py.
std::string_view runner_source();

/// What one call asks of the runner.
struct runner_call {
  const language* lang = nullptr;
  /// "run_code" or "execute" (the verification's id and metadata).
  std::string front;
  std::string code;
  std::optional<std::string> stdin_text;
  double compile_timeout_s = 10;
  double run_timeout_s = 10;
  /// 0: the provider's default.
  int64_t memory_mib = 0;
  /// The caller's files (bytes) by relative path.
  file_map files;
  std::vector<std::string> fetch_files;
};

/// Why `path` cannot be one of the caller's files or fetched files of
/// `lang` (escapes the call's directory, is a runner file or the source),
/// or empty.
std::string user_path_problem(const std::string& path, const language& lang);

/// The entry of `name`, or null with why it cannot be used (not served
/// here, or its toolchain is missing), naming `field`.
const language* usable_language(const compat_settings& settings,
                                const std::string& field,
                                const std::string& name, std::string& why);

/// Reads `body[key]` when present as seconds in (0, settings' max]; false
/// with why, naming the key.
bool read_seconds_field(const json& body, const char* key,
                        const compat_settings& settings, double& out,
                        std::string& why);

verification_request make_runner_request(const runner_call& call,
                                         const compat_settings& settings);

/// A verification that asks the runner which of `programs` exist in a
/// sandbox of `image`.
verification_request
make_probe_request(const std::string& image,
                   const std::vector<std::string>& programs,
                   const compat_settings& settings);

/// What the runner answered in result.json.
struct runner_answer {
  enum class kind {
    ran,             // compile_result / run_result / files
    missing_program, // detail: the program
    refused,         // detail: why (a limit of the request)
    malformed,       // detail: what is wrong (a fault of the runner)
  };
  kind what = kind::malformed;
  /// SandboxFusion's CommandRunResult, keys in its order; null when the
  /// command did not run.
  ordered_json compile_result;
  ordered_json run_result;
  /// path -> base64
  std::map<std::string, std::string> files;
  std::string detail;
};

/// Reads an `ok` outcome's result (a DOM, or text kept as text when large).
runner_answer read_runner_answer(const verification_outcome& out);

/// A probe's answer: {name: path | null}, or null when malformed.
json read_probe_answer(const verification_outcome& out);

/// The status of a command result ("Finished", "TimeLimitExceeded",
/// "Error"), or "" for null.
std::string command_status(const ordered_json& r);

/// "provider_unavailable in create (timeout): ..." for a failed outcome.
std::string describe_failure(const verification_outcome& out);

} // namespace sv::serve
