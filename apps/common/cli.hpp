#pragma once

// What sv-grade, sv-serve and sv-node share on their command line: the
// usage error (exit 2), --log-level, --provider-config, parsing with the exit
// statuses the README gives, a logger on stderr, and main's mapping of errors
// to exit statuses.

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

namespace CLI {
class App;
} // namespace CLI

namespace sv::cli {

/// A problem with how a program was called: "NAME: message", exit 2.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Adds --log-level (trace, debug, info, warn, error, critical or off).
void add_log_level(CLI::App& app, std::string& level,
                   const std::string& help = "trace, debug, info, warn, "
                                             "error, critical or off");

/// Adds --provider-config FILE (a JSON or YAML provider block; its host
/// paths are relative to the file).
void add_provider_config(CLI::App& app, std::string& path);

/// Parses the command line: empty to go on, else the exit status (0 after
/// --help or --version, 2 for a usage error, its message printed).
std::optional<int> parse(CLI::App& app, int argc, char** argv);

/// Makes spdlog's default logger write to stderr as `name`, at `level`.
void log_to_stderr(const std::string& name, const std::string& level);

/// Runs a program's body: its status; for an exception, "NAME: message" on
/// stderr and 2 for a `usage_error`, 1 for any other.
int guarded(const char* name, const std::function<int()>& body);

} // namespace sv::cli
