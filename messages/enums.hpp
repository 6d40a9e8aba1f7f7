#pragma once

// Enumerations of the protocol, with their wire names. Each enum has
// `to_string` and `from_string` (the JSON and log spelling), `is_valid`,
// and is inspected as its underlying integer: a value off the wire may name
// no enumerator, so the inspect functions of the messages that carry one
// range-check it (see protocol.hpp).

#include <cstdint>
#include <string>
#include <string_view>

namespace sv {

/// What `status` reports about a sandbox.
enum class sandbox_status : uint8_t {
  starting,
  running,
  stopped,
  error,
  unknown
};

/// How an exec ended. `none`: the command exited on its own (see
/// `return_code`); `timeout`: killed at its deadline; `oom`: killed for
/// memory; `killed`: killed by another signal; `runtime`: the command could
/// not run; `sandbox`: the sandbox itself failed.
enum class exec_error_type : uint8_t {
  none,
  timeout,
  oom,
  killed,
  runtime,
  sandbox
};

/// Whom a failure blames. Every failure masks the sample.
enum class failure_kind : uint8_t {
  provider_unavailable,
  verifier_error,
  invalid_request,
};

/// Where in the life of a verification a failure happened.
enum class verification_state : uint8_t {
  validate,
  queue,
  create,
  ready,
  upload,
  exec,
  download,
  parse,
  stop,
};

/// Why a failure happened.
enum class failure_cause : uint8_t {
  error,
  timeout,
  crash,
  invalid_result,
  node_down,
  overloaded,
  oom,
  killed,
  invalid_request,
};

std::string_view to_string(sandbox_status x);
std::string_view to_string(exec_error_type x);
std::string_view to_string(failure_kind x);
std::string_view to_string(verification_state x);
std::string_view to_string(failure_cause x);

/// Parse a wire name; false when `name` is not one of the enum's names.
bool from_string(std::string_view name, sandbox_status& x);
bool from_string(std::string_view name, exec_error_type& x);
bool from_string(std::string_view name, failure_kind& x);
bool from_string(std::string_view name, verification_state& x);
bool from_string(std::string_view name, failure_cause& x);

/// Whether `x` is one of the enum's enumerators (an integer read off the
/// wire may be any value of the underlying type).
bool is_valid(sandbox_status x);
bool is_valid(exec_error_type x);
bool is_valid(failure_kind x);
bool is_valid(verification_state x);
bool is_valid(failure_cause x);

/// The wire names of an enum, comma separated (for error messages).
template <class Enum>
std::string allowed_names();

} // namespace sv
