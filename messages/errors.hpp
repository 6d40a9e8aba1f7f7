#pragma once

// Typed errors a provider returns. They travel as `caf::error` in the
// "sv_prov" category with a human message as context, so the
// verification actor can tell a missing `result.json` (the runner's fault)
// from a broken sandbox (the provider's).

#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <cstdint>
#include <string>
#include <string_view>

namespace sv {

enum class provider_errc : uint8_t {
  /// The provider cannot serve at all (transport down, shutting down).
  unavailable = 1,
  /// No sandbox with this id (never created, already stopped or reaped).
  no_such_sandbox,
  /// The spec or a request was malformed.
  invalid_argument,
  /// A path escapes the sandbox (absolute, `..`, or through a symlink).
  invalid_path,
  /// The file to download does not exist.
  not_found,
  /// The file to download is not a regular file (symlink, directory, ...).
  not_regular_file,
  /// The file to download is larger than the provider's cap.
  too_large,
  /// Reading or writing inside the sandbox failed.
  io_error,
  /// The sandbox backend failed (could not create, start or run).
  sandbox_error,
};

/// The category atom of `provider_errc` errors.
constexpr caf::atom_value provider_error_category = caf::atom("sv_prov");

std::string_view to_string(provider_errc x);

/// A provider error with a message a person can act on.
caf::error make_error(provider_errc code, std::string message);

/// The code of a provider error, or 0 when `err` is of another category.
uint8_t provider_error_code(const caf::error& err);

/// The human message of any error: the context text of a provider error,
/// else CAF's rendering (e.g. "request_timeout").
std::string describe(const caf::error& err);

} // namespace sv
