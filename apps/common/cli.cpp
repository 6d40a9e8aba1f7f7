#include "apps/common/cli.hpp"

#include <CLI/CLI.hpp>
#include <iostream>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace sv::cli {

void add_log_level(CLI::App& app, std::string& level, const std::string& help) {
  app.add_option("--log-level", level, help)
    ->capture_default_str()
    ->check(CLI::IsMember(
      {"trace", "debug", "info", "warn", "error", "critical", "off"}));
}

void add_provider_config(CLI::App& app, std::string& path) {
  app.add_option("--provider-config", path,
                 "JSON or YAML provider block file (default: {\"local\": {}})");
}

std::optional<int> parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every usage error exits 2 (README).
    return app.exit(e) == 0 ? 0 : 2;
  }
  return std::nullopt;
}

void log_to_stderr(const std::string& name, const std::string& level) {
  spdlog::set_default_logger(spdlog::stderr_color_mt(name));
  spdlog::set_level(spdlog::level::from_str(level));
}

int guarded(const char* name, const std::function<int()>& body) {
  try {
    return body();
  } catch (const usage_error& e) {
    std::cerr << name << ": " << e.what() << '\n';
    return 2;
  } catch (const std::exception& e) {
    std::cerr << name << ": " << e.what() << '\n';
    return 1;
  }
}

} // namespace sv::cli
