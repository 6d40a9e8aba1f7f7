#include "providers/local/detail/sandbox/exec_outcome.hpp"

#include "providers/local/detail/host/process.hpp"

#include <csignal>
#include <cstdlib>
#include <sstream>
#include <sys/wait.h>

namespace sv::detail {

namespace {

std::string seconds_text(double s) {
  std::ostringstream out;
  out << s << " s";
  return out.str();
}

std::string mib_text(uint64_t bytes) {
  return std::to_string(bytes / (1024 * 1024)) + " MiB";
}

std::string oom_note(const exec_ending& e) {
  return "; the kernel OOM killer killed " + std::to_string(e.oom_kills) +
         (e.oom_kills == 1 ? " process" : " processes") +
         " of the sandbox at its " + mib_text(e.memory_bytes) + " memory limit";
}

exec_result killed_by_signal(const exec_ending& e, int sig, bool dumped) {
  exec_result r;
  r.return_code = 128 + sig;
  if (sig == SIGKILL && e.oom_kills > 0 && e.killed_by != kill_cause::stop) {
    r.error_type = exec_error_type::oom;
    r.message = "killed by the kernel OOM killer at its " +
                mib_text(e.memory_bytes) + " memory limit";
    return r;
  }
  r.error_type = exec_error_type::killed;
  r.message = "killed by signal " + describe_signal(sig);
  if (dumped)
    r.message += ", core dumped";
  if (sig == SIGXFSZ && e.disk_bytes > 0)
    r.message += ": a file reached the sandbox's " + mib_text(e.disk_bytes) +
                 " disk limit";
  if (e.killed_by == kill_cause::stop)
    r.message += " when its sandbox was stopped";
  return r;
}

} // namespace

exec_result sandbox_failure(std::string message) {
  exec_result r;
  r.return_code = -1;
  r.error_type = exec_error_type::sandbox;
  r.message = std::move(message);
  return r;
}

void read_bwrap_status(const std::string& text, exec_ending& e) {
  // bwrap writes one JSON object per line; "exit-code" only once its
  // command ran and ended (not when it failed to set the sandbox up).
  auto pos = text.find("\"exit-code\"");
  if (pos == std::string::npos)
    return;
  pos = text.find(':', pos);
  if (pos == std::string::npos)
    return;
  e.bwrap_ran_command = true;
  e.bwrap_exit_code = std::atoi(text.c_str() + pos + 1);
}

exec_result describe_ending(const exec_ending& e) {
  if (e.killed_by == kill_cause::deadline) {
    exec_result r;
    r.return_code = 128 + SIGKILL;
    r.error_type = exec_error_type::timeout;
    r.message = "killed at its " + seconds_text(e.timeout_s) + " deadline";
    return r;
  }
  if (e.code != CLD_EXITED)
    return killed_by_signal(e, e.status, e.code == CLD_DUMPED);
  int status = e.status;
  if (e.bwrap) {
    if (!e.bwrap_ran_command)
      return sandbox_failure("bubblewrap could not start the command (exit "
                             "status " +
                             std::to_string(e.status) + ")" +
                             (e.last_line.empty() ? "" : ": " + e.last_line));
    // bwrap reports a command killed by signal N as status 128 + N, as a
    // shell does.
    status = e.bwrap_exit_code;
    if (status > 128 && status < 128 + NSIG)
      return killed_by_signal(e, status - 128, false);
  }
  exec_result r;
  r.return_code = status;
  r.message = "exited with status " + std::to_string(status);
  if (e.oom_kills > 0)
    r.message += oom_note(e);
  return r;
}

} // namespace sv::detail
