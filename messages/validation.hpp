#pragma once

// Checks a submission before any sandbox exists for it.

#include "messages/protocol.hpp"

#include <string>
#include <string_view>

namespace sv {

/// The files every call writes or reads itself in its call directory; a
/// submission may not bring files of these names.
inline constexpr std::string_view request_file_name = "request.json";
inline constexpr std::string_view result_file_name = "result.json";
inline constexpr std::string_view runner_log_name = "runner.log";
inline constexpr std::string_view runner_file_name = "sandbox_runner.py";

/// Whether setting the environment variable `name` steers the dynamic
/// loader or libc (LD_*, GCONV_PATH, GLIBC_TUNABLES, MALLOC_*, ...): no env
/// a caller sets may hold one.
bool is_loader_variable(std::string_view name);

/// Longest deadline accepted anywhere (one week), so that no conversion to a
/// clock duration can overflow.
inline constexpr double max_timeout_s = 7 * 24 * 3600.0;

/// Whether `path` stays inside the directory it is relative to: not empty,
/// not absolute, no empty, `.` or `..` component, no NUL byte.
bool is_confined_path(std::string_view path);

/// Empty when `req` can be graded; otherwise what is wrong, naming the field
/// ("files: missing sandbox_runner.py").
std::string validate(const verification_request& req);

} // namespace sv
