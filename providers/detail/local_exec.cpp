#include "providers/detail/local_exec.hpp"

#include "providers/detail/confined_fs.hpp"
#include "providers/detail/local_sandbox.hpp"
#include "providers/detail/pidfd.hpp"
#include "providers/detail/process.hpp"

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <sstream>
#include <sys/wait.h>

namespace sv::detail {

namespace asio = boost::asio;
using boost::system::error_code;

namespace {

/// How much of stdout and of stderr a command without a log may return.
constexpr size_t capture_cap = 1024 * 1024;

/// How much one pipe read round takes before giving other handlers a turn.
constexpr size_t read_budget = 256 * 1024;

/// How long to wait for the rest of a killed process group to die.
constexpr std::chrono::seconds group_kill_wait{5};

exec_result sandbox_failure(std::string message) {
  exec_result r;
  r.return_code = -1;
  r.error_type = exec_error_type::sandbox;
  r.message = std::move(message);
  return r;
}

std::string seconds_text(double s) {
  std::ostringstream out;
  out << s << " s";
  return out.str();
}

std::vector<std::string> build_env(const local_sandbox& sb,
                                   const env_map& extra) {
  // Never the service's own environment: secrets must not reach a runner.
  env_map env{{"PATH", sandbox_path},
              {"HOME", sb.path},
              {"LANG", "C.UTF-8"},
              {"PYTHONDONTWRITEBYTECODE", "1"}};
  for (auto& [k, v] : sb.env)
    env[k] = v;
  for (auto& [k, v] : extra)
    env[k] = v;
  // Last, so no request can remove the marker stop relies on.
  env["SV_SANDBOX_ID"] = sb.id;
  std::vector<std::string> out;
  out.reserve(env.size());
  for (auto& [k, v] : env)
    out.push_back(k + "=" + v);
  return out;
}

bool make_pipe(unique_fd& rd, unique_fd& wr) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0)
    return false;
  rd.reset(p[0]);
  wr.reset(p[1]);
  // The child's end blocks as a normal stdout would.
  ::fcntl(wr.get(), F_SETFL, 0);
  return true;
}

} // namespace

std::string sandbox_marker(const std::string& sandbox_id) {
  return "SV_SANDBOX_ID=" + sandbox_id;
}

launch_plan make_launch_plan(const local_sandbox& sb, const exec_request& req,
                             const exec_settings& cfg) {
  launch_plan p;
  p.cwd = open_confined_dir(sb.dir.get(), req.cwd, false);
  if (!req.log_path.empty())
    p.log = open_confined_log(sb.dir.get(), req.log_path);
  p.timeout_s = req.timeout_s;
  p.env = build_env(sb, req.env);
  p.argv = req.argv;
  const auto& name = req.argv.front();
  if (name == cfg.python_name || name == "python3" || name == "python") {
    p.program = cfg.python_path;
    p.argv.front() = cfg.python_path;
  } else if (name.find('/') != std::string::npos) {
    p.program = name;
  } else {
    p.program = find_program(name, sandbox_path);
    if (p.program.empty())
      p.error = "program \"" + name + "\" not found on PATH " + sandbox_path;
  }
  return p;
}

class running_exec : public std::enable_shared_from_this<running_exec> {
public:
  running_exec(std::shared_ptr<local_sandbox> sb, uint64_t id, pid_t pid,
               int pidfd, launch_plan& plan, exec_callback done)
      : sb_(std::move(sb)), id_(id), pid_(pid), pidfd_(sb_->strand, pidfd),
        deadline_(sb_->strand),
        out_{asio::posix::stream_descriptor{sb_->strand}, {}, false, "stdout"},
        err_{asio::posix::stream_descriptor{sb_->strand}, {}, false, "stderr"},
        log_(std::move(plan.log)), timeout_s_(plan.timeout_s),
        done_(std::move(done)) {
    // nop
  }

  /// Starts waiting for the leader, the deadline and the pipes.
  void arm(unique_fd out, unique_fd err) {
    auto self = shared_from_this();
    wait_exit();
    deadline_.expires_after(
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::duration<double>(timeout_s_)));
    deadline_.async_wait(asio::bind_executor(
        sb_->strand, [self](error_code ec) { self->on_deadline(ec); }));
    if (out) {
      out_.pipe.assign(out.release());
      wait_pipe(out_);
    }
    if (err) {
      err_.pipe.assign(err.release());
      wait_pipe(err_);
    }
  }

  void kill_for_stop() {
    if (finished_)
      return;
    if (killed_by_ == kill_cause::none)
      killed_by_ = kill_cause::stop;
    ::kill(-pid_, SIGKILL);
  }

private:
  enum class kill_cause { none, deadline, stop };

  struct capture {
    asio::posix::stream_descriptor pipe;
    std::string text;
    bool truncated;
    const char* name;
  };

  void on_deadline(error_code ec) {
    if (ec || finished_)
      return;
    killed_by_ = kill_cause::deadline;
    ::kill(-pid_, SIGKILL);
  }

  void wait_exit() {
    auto self = shared_from_this();
    pidfd_.async_wait(asio::posix::stream_descriptor::wait_read,
                      asio::bind_executor(sb_->strand, [self](error_code ec) {
                        self->on_exit(ec);
                      }));
  }

  void on_exit(error_code ec) {
    if (ec == asio::error::operation_aborted || finished_)
      return;
    // WNOWAIT leaves the leader a zombie: its pgid stays reserved while the
    // rest of the group is cleaned up below.
    siginfo_t info{};
    int fd = pidfd_.native_handle();
    auto idtype = static_cast<idtype_t>(P_PIDFD);
    if (::waitid(idtype, fd, &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        info.si_pid == 0)
      return wait_exit(); // woken, but the leader still runs
    if (killed_by_ == kill_cause::deadline) {
      // SIGKILL to a group reaches each member on its own: wait until the
      // whole group is gone, so that nothing outlives the report.
      auto pred = [pg = pid_](pid_t p) { return in_process_group(p, pg); };
      kill_and_wait(find_processes(pred), pred, group_kill_wait);
    }
    int rc = 0;
    do {
      rc = ::waitid(idtype, fd, &info, WEXITED | WNOHANG);
    } while (rc < 0 && errno == EINTR);
    if (rc == 0 && info.si_pid != 0)
      return finish(make_result(info));
    finish(sandbox_failure("cannot reap process " + std::to_string(pid_) +
                           ": " + std::strerror(rc < 0 ? errno : ECHILD)));
  }

  void finish(exec_result result) {
    finished_ = true;
    deadline_.cancel();
    // Whatever the leader wrote is in the pipes by now; children that
    // still hold them open do not delay the result.
    for (auto* c : {&out_, &err_}) {
      if (c->pipe.is_open())
        read_pipe(*c, capture_cap + read_budget);
      error_code ignored;
      c->pipe.close(ignored);
    }
    error_code ignored;
    pidfd_.close(ignored);
    result.stdout_text = std::move(out_.text);
    result.stderr_text = std::move(err_.text);
    for (auto* c : {&out_, &err_})
      if (c->truncated)
        result.message += std::string{"; "} + c->name + " truncated to " +
                          std::to_string(capture_cap) + " bytes";
    if (log_)
      result.log_tail = read_tail(log_.get(), log_tail_bytes);
    auto keep_alive = shared_from_this();
    sb_->execs.erase(id_);
    auto done = std::move(done_);
    done(std::move(result));
  }

  exec_result make_result(const siginfo_t& info) {
    exec_result r;
    if (info.si_code == CLD_EXITED) {
      r.return_code = info.si_status;
      r.message = "exited with status " + std::to_string(info.si_status);
      return r;
    }
    r.return_code = 128 + info.si_status;
    if (killed_by_ == kill_cause::deadline) {
      r.error_type = exec_error_type::timeout;
      r.message = "killed at its " + seconds_text(timeout_s_) + " deadline";
      return r;
    }
    r.error_type = exec_error_type::killed;
    r.message = "killed by signal " + describe_signal(info.si_status);
    if (info.si_code == CLD_DUMPED)
      r.message += ", core dumped";
    if (killed_by_ == kill_cause::stop)
      r.message += " when its sandbox was stopped";
    return r;
  }

  void wait_pipe(capture& c) {
    auto self = shared_from_this();
    c.pipe.async_wait(
        asio::posix::stream_descriptor::wait_read,
        asio::bind_executor(sb_->strand, [self, &c](error_code ec) {
          if (ec || self->finished_)
            return;
          if (self->read_pipe(c, read_budget))
            self->wait_pipe(c);
        }));
  }

  /// Reads what the pipe holds, at most `budget` bytes. All reads happen
  /// here, on the strand, so the drain at exit never races an async read.
  /// Returns false at EOF or on an error.
  bool read_pipe(capture& c, size_t budget) {
    char buf[65536];
    for (size_t total = 0; total < budget;) {
      auto n = ::read(c.pipe.native_handle(), buf, sizeof buf);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK;
      if (n == 0)
        return false;
      auto take = std::min(static_cast<size_t>(n),
                           capture_cap - std::min(capture_cap, c.text.size()));
      c.text.append(buf, take);
      c.truncated = c.truncated || take < static_cast<size_t>(n);
      total += static_cast<size_t>(n);
    }
    return true;
  }

  std::shared_ptr<local_sandbox> sb_;
  uint64_t id_;
  pid_t pid_;
  asio::posix::stream_descriptor pidfd_;
  asio::steady_timer deadline_;
  capture out_;
  capture err_;
  unique_fd log_;
  double timeout_s_;
  exec_callback done_;
  kill_cause killed_by_ = kill_cause::none;
  bool finished_ = false;
};

void kill_for_stop(running_exec& x) {
  x.kill_for_stop();
}

void start_exec(const std::shared_ptr<local_sandbox>& sb, uint64_t id,
                launch_plan plan, exec_callback done) {
  if (!plan.error.empty())
    return done(sandbox_failure(plan.error));
  unique_fd out_rd, out_wr, err_rd, err_wr;
  if (!plan.log && (!make_pipe(out_rd, out_wr) || !make_pipe(err_rd, err_wr)))
    return done(sandbox_failure(std::string{"cannot create pipes: "} +
                                std::strerror(errno)));
  spawn_spec spec;
  spec.program = plan.program;
  spec.argv = plan.argv;
  spec.env = plan.env;
  spec.cwd_fd = plan.cwd.get();
  spec.stdout_fd = plan.log ? plan.log.get() : out_wr.get();
  spec.stderr_fd = plan.log ? plan.log.get() : err_wr.get();
  int err = 0;
  auto pid = spawn_process(spec, err);
  // Only the child holds the write ends now.
  out_wr.reset();
  err_wr.reset();
  if (pid < 0)
    return done(sandbox_failure("cannot run " + plan.program + ": " +
                                std::strerror(err)));
  int pidfd = ::pidfd_open(pid, 0);
  if (pidfd < 0) {
    int e = errno;
    ::kill(-pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return done(sandbox_failure("cannot watch " + plan.program + ": " +
                                std::strerror(e)));
  }
  auto x =
      std::make_shared<running_exec>(sb, id, pid, pidfd, plan, std::move(done));
  sb->execs.emplace(id, x);
  x->arm(std::move(out_rd), std::move(err_rd));
}

} // namespace sv::detail
