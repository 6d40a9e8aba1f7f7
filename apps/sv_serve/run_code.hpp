#pragma once

// SandboxFusion's `POST /run_code` (sandbox/server/sandbox_api.py of
// bytedance/SandboxFusion; docs/compat.md): its request read into a call of
// the built-in runner, and the verification's outcome written back as its
// response. No sockets, no actors.
//
// Status rules: a command that could not be run (`Error`) or a fault of
// the runner or sandbox is `SandboxError`; a timeout (`TimeLimitExceeded`)
// or a non-zero exit is `Failed`; else `Success`. Every infrastructure
// failure (and overload, and a drain) answers HTTP 504, which verl retries;
// a bad request answers 400 naming the field.

#include "apps/sv_serve/languages.hpp"
#include "apps/sv_serve/runner_job.hpp"
#include "apps/sv_serve/sandbox_wire.hpp"

#include <optional>
#include <string>

namespace sv::serve {

/// Reads a /run_code body into `out`; a refusal (400) when it breaks the
/// contract, naming the field.
std::optional<sandbox_reply> read_run_code(const json& body,
                                           const compat_settings& settings,
                                           runner_call& out);

/// The response to a /run_code call whose verification ended with `out`.
/// A runner that found the toolchain missing marks the language so in
/// `languages`.
sandbox_reply run_code_reply(const verification_outcome& out,
                             const runner_call& call,
                             language_table& languages);

/// A SandboxFusion-shaped `SandboxError` body with `message`, at `status`
/// (400 for a bad request, 504 for an infrastructure failure).
sandbox_reply run_code_error(unsigned status, const std::string& message);

} // namespace sv::serve
