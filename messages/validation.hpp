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

/// Shortest deadline accepted (1 ms): below it nothing can run, and tiny
/// values (1e-320) only hide mistakes.
inline constexpr double min_timeout_s = 0.001;

/// What the verification actor adds to ready + exec for the sandbox TTL
/// (actors/verification.hpp, ttl_margin_s); the TTL must stay within
/// `max_timeout_s`, so a request is refused before create if it cannot.
inline constexpr double sandbox_ttl_margin_s = 300;

/// Longest path component a file system takes (NAME_MAX).
inline constexpr size_t max_path_component = 255;

/// Whether `path` stays inside the directory it is relative to: not empty,
/// not absolute, no empty, `.` or `..` component, no NUL byte, no component
/// longer than `max_path_component`.
bool is_confined_path(std::string_view path);

/// Whether `path` names a place in a sandbox: a confined path (relative to
/// the sandbox's workdir) or an absolute one whose rest is confined ("/a/b";
/// not "/" itself). Which absolute paths a sandbox can write is its
/// provider's to say (the local provider: its workdir, /tmp, /dev/shm).
bool is_path_in_sandbox(std::string_view path);

/// Whether `name` can be an environment variable's name: not empty, no `=`,
/// no NUL byte.
bool is_env_name(std::string_view name);

/// Empty when `req` can be graded; otherwise what is wrong, naming the field
/// ("files: missing sandbox_runner.py"), quoting at most ~200 bytes of a
/// value.
std::string validate(const verification_request& req);

} // namespace sv
