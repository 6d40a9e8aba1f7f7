#pragma once

// NeMo-Skills' `POST /execute` (nemo_skills/code_execution/local_sandbox/
// local_sandbox_server.py of NVIDIA/NeMo-Skills; docs/compat.md) for
// python and shell, on the built-in runner: `generated_code`, `std_input`,
// `language`, `timeout`, `max_output_characters` in; `process_status`
// (completed | error | timeout), `stdout`, `stderr` out. Each call runs in a
// fresh sandbox: no state is kept between calls, so IPython sessions
// (`language: ipython`, `X-Session-ID`) are refused. No sockets, no actors.

#include "apps/sv_serve/languages.hpp"
#include "apps/sv_serve/runner_job.hpp"
#include "apps/sv_serve/sandbox_wire.hpp"

#include <cstddef>
#include <optional>
#include <string>

namespace sv::serve {

/// What the response needs beyond the outcome.
struct execute_call {
  runner_call call;
  /// The caller's `timeout` as sent (NeMo-Skills prints it back).
  json timeout_text;
  size_t max_output_characters = 1000;
  /// python: any exit is `completed`; shell and others: non-zero is `error`.
  bool any_exit_completes = false;
};

/// Reads an /execute body (`has_session` when an X-Session-ID came) into
/// `out`; a refusal (400, {"error": ...}) naming the field.
std::optional<sandbox_reply> read_execute(const json& body, bool has_session,
                                          const compat_settings& settings,
                                          execute_call& out);

/// The response to an /execute call whose verification ended with `out`.
sandbox_reply execute_reply(const verification_outcome& out,
                            const execute_call& call,
                            language_table& languages);

/// `text` cut to `max` characters (UTF-8 code points) plus "<output cut>"
/// when longer, as NeMo-Skills cuts.
std::string cut_output(const std::string& text, size_t max);

} // namespace sv::serve
