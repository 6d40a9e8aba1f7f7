#include "providers/local/detail/sandbox/exec.hpp"

#include "providers/local/detail/host/pidfd.hpp"
#include "providers/local/detail/host/process.hpp"
#include "providers/local/detail/sandbox/confined_fs.hpp"
#include "providers/local/detail/sandbox/exec_outcome.hpp"
#include "providers/local/detail/sandbox/output_sink.hpp"
#include "providers/local/detail/sandbox/sandbox.hpp"

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <optional>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

namespace sv::detail {

namespace asio = boost::asio;
using boost::system::error_code;

namespace {

/// How much one pipe read round takes before giving other handlers a turn.
constexpr size_t read_budget = 1024 * 1024;

/// How much more output is drained once the leader is gone: a daemon that
/// keeps writing must not hold the result back.
constexpr size_t final_drain = 4 * 1024 * 1024;

/// How long to wait for the rest of a killed process group to die.
constexpr std::chrono::seconds group_kill_wait{5};

/// How long a result waits for bwrap's init to finish its exit.
constexpr std::chrono::seconds init_linger{5};

bool make_pipe(unique_fd& rd, unique_fd& wr) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0)
    return false;
  rd.reset(p[0]);
  wr.reset(p[1]);
  // Fewer wake-ups under a flood; the default size is fine when refused.
  ::fcntl(rd.get(), F_SETPIPE_SZ, 1024 * 1024);
  // The child's end blocks as a normal stdout would.
  ::fcntl(wr.get(), F_SETFL, 0);
  return true;
}

/// One read buffer per I/O thread: reads never outlive a handler.
char* read_buffer(size_t& size) {
  thread_local std::vector<char> buf(256 * 1024);
  size = buf.size();
  return buf.data();
}

std::string last_line(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r'))
    text.pop_back();
  auto pos = text.rfind('\n');
  return pos == std::string::npos ? text : text.substr(pos + 1);
}

} // namespace

class running_exec : public std::enable_shared_from_this<running_exec> {
public:
  running_exec(std::shared_ptr<local_sandbox> sb, uint64_t id, pid_t pid,
               int pidfd, launch_plan& plan, exec_callback done)
      : sb_(std::move(sb)), id_(id), pid_(pid), pidfd_(sb_->strand, pidfd),
        deadline_(sb_->strand),
        out_{asio::posix::stream_descriptor{sb_->strand},
             plan.log ? output_sink::log(plan.log.get(), plan.max_output)
                      : output_sink::capture(plan.max_output),
             plan.log ? "output" : "stdout"},
        err_{asio::posix::stream_descriptor{sb_->strand},
             output_sink::capture(plan.max_output), "stderr"},
        log_(std::move(plan.log)), status_(sb_->strand), init_(sb_->strand),
        linger_(sb_->strand), bwrap_(plan.bwrap), timeout_s_(plan.timeout_s),
        done_(std::move(done)),
        oom_before_(sb_->confinement.cgroups.oom_kills()) {
    // nop
  }

  /// Starts waiting for the leader, the deadline and the pipes.
  void arm(unique_fd out, unique_fd err, unique_fd status) {
    auto self = shared_from_this();
    if (status) {
      status_.assign(status.release());
      wait_status();
    }
    wait_exit();
    deadline_.expires_after(
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(timeout_s_)));
    deadline_.async_wait(asio::bind_executor(
      sb_->strand, [self](error_code ec) { self->on_deadline(ec); }));
    for (auto [c, fd] : {std::pair{&out_, &out}, std::pair{&err_, &err}})
      if (*fd) {
        c->pipe.assign(fd->release());
        wait_pipe(*c);
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
  struct stream {
    asio::posix::stream_descriptor pipe;
    output_sink sink;
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

  /// After a deadline: nothing of the command may outlive its report.
  void kill_rest() {
    // WNOWAIT left the leader a zombie, so its pgid is still reserved.
    auto pred = [pg = pid_](pid_t p) { return in_process_group(p, pg); };
    kill_and_wait(find_processes(pred), pred, group_kill_wait);
    // The sandbox's only command: whatever escaped the group goes too.
    if (sb_->execs.size() == 1)
      sb_->confinement.cgroups.kill_all(true);
  }

  void on_exit(error_code ec) {
    if (ec == asio::error::operation_aborted || finished_)
      return;
    siginfo_t info{};
    int fd = pidfd_.native_handle();
    auto idtype = static_cast<idtype_t>(P_PIDFD);
    if (::waitid(idtype, fd, &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        info.si_pid == 0)
      return wait_exit(); // woken, but the leader still runs
    if (killed_by_ == kill_cause::deadline)
      kill_rest();
    int rc = 0;
    do {
      rc = ::waitid(idtype, fd, &info, WEXITED | WNOHANG);
    } while (rc < 0 && errno == EINTR);
    if (rc != 0 || info.si_pid == 0)
      return finish(nullptr, "cannot reap process " + std::to_string(pid_) +
                               ": " + std::strerror(rc < 0 ? errno : ECHILD));
    info_ = info;
    if (status_.is_open())
      read_status();
    await_init();
  }

  // -- bwrap's status and its init -------------------------------------------

  void wait_status() {
    auto self = shared_from_this();
    status_.async_wait(asio::posix::stream_descriptor::wait_read,
                       asio::bind_executor(sb_->strand, [self](error_code ec) {
                         if (!ec && !self->finished_ && self->read_status())
                           self->wait_status();
                       }));
  }

  /// Reads bwrap's status; false at EOF. On "child-pid" (written right
  /// after bwrap cloned its init, which then lives until the command's end)
  /// the init is pinned by a pidfd.
  bool read_status() {
    size_t size = 0;
    auto* buf = read_buffer(size);
    ssize_t n = 0;
    while ((n = ::read(status_.native_handle(), buf, size)) > 0)
      if (status_text_.size() < 65536)
        status_text_.append(buf, static_cast<size_t>(n));
    auto pos = status_text_.find("\"child-pid\":");
    if (!init_.is_open() && pos != std::string::npos) {
      auto pid = std::atoi(status_text_.c_str() + pos + 12);
      int fd = pid > 0 ? ::pidfd_open(pid, 0) : -1;
      if (fd >= 0)
        init_.assign(fd);
    }
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }

  /// bwrap reports its command's end while its init is still tearing the
  /// namespaces down: the result waits for that (bounded), so nothing of
  /// the command outlives its report.
  void await_init() {
    pollfd p{init_.is_open() ? init_.native_handle() : -1, POLLIN, 0};
    if (!init_.is_open() || ::poll(&p, 1, 0) != 0)
      return finish(&*info_);
    auto self = shared_from_this();
    auto done = [self](error_code ec) {
      if (ec != asio::error::operation_aborted && !self->finished_)
        self->finish(&*self->info_);
    };
    linger_.expires_after(init_linger);
    linger_.async_wait(asio::bind_executor(sb_->strand, done));
    init_.async_wait(asio::posix::stream_descriptor::wait_read,
                     asio::bind_executor(sb_->strand, done));
  }

  exec_ending ending(const siginfo_t& info) {
    exec_ending e;
    e.code = info.si_code;
    e.status = info.si_status;
    e.killed_by = killed_by_;
    e.timeout_s = timeout_s_;
    e.bwrap = bwrap_;
    read_bwrap_status(status_text_, e);
    auto& cg = sb_->confinement.cgroups;
    e.oom_kills = cg.oom_kills() - std::min(cg.oom_kills(), oom_before_);
    e.memory_bytes = cg.memory_bytes();
    e.disk_bytes = sb_->confinement.disk_bytes;
    e.last_line =
      last_line(log_ ? read_tail(log_.get(), 512) : err_.sink.text());
    return e;
  }

  void finish(const siginfo_t* info, std::string failure = {}) {
    finished_ = true;
    deadline_.cancel();
    // Whatever the leader wrote is in the pipes by now; children that
    // still hold them open do not delay the result.
    for (auto* c : {&out_, &err_}) {
      if (c->pipe.is_open())
        read_pipe(*c, final_drain);
      error_code ignored;
      c->pipe.close(ignored);
      c->sink.finish();
    }
    error_code ignored;
    for (auto* fd : {&pidfd_, &status_, &init_})
      fd->close(ignored);
    linger_.cancel();
    auto result =
      info ? describe_ending(ending(*info)) : sandbox_failure(failure);
    add_output(result);
    auto keep_alive = shared_from_this();
    sb_->execs.erase(id_);
    auto done = std::move(done_);
    done(std::move(result));
  }

  void add_output(exec_result& result) {
    for (auto* c : {&out_, &err_}) {
      auto& sink = c->sink;
      if (sink.dropped() > 0)
        result.message += std::string{"; "} + c->name +
                          " truncated: " + std::to_string(sink.dropped()) +
                          " of " + std::to_string(sink.total()) +
                          " bytes dropped";
      if (!sink.write_error().empty())
        result.message += "; cannot write the log: " + sink.write_error();
    }
    result.stdout_text = std::move(out_.sink.text());
    result.stderr_text = std::move(err_.sink.text());
    if (log_)
      result.log_tail = read_tail(log_.get(), log_tail_bytes);
  }

  void wait_pipe(stream& c) {
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
  bool read_pipe(stream& c, size_t budget) {
    size_t size = 0;
    auto* buf = read_buffer(size);
    for (size_t total = 0; total < budget;) {
      auto n = ::read(c.pipe.native_handle(), buf, size);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK;
      if (n == 0)
        return false;
      c.sink.write(buf, static_cast<size_t>(n));
      total += static_cast<size_t>(n);
    }
    return true;
  }

  std::shared_ptr<local_sandbox> sb_;
  uint64_t id_;
  pid_t pid_;
  asio::posix::stream_descriptor pidfd_;
  asio::steady_timer deadline_;
  stream out_;
  stream err_;
  unique_fd log_;
  asio::posix::stream_descriptor status_;
  std::string status_text_;
  /// A pidfd of bwrap's init, the last process of the command to go.
  asio::posix::stream_descriptor init_;
  asio::steady_timer linger_;
  std::optional<siginfo_t> info_;
  bool bwrap_;
  double timeout_s_;
  exec_callback done_;
  uint64_t oom_before_;
  kill_cause killed_by_ = kill_cause::none;
  bool finished_ = false;
};

void kill_for_stop(running_exec& x) {
  x.kill_for_stop();
}

namespace {

/// Hands `plan` to the sandbox's warm interpreter when it was started with
/// what the plan would start (sandbox/warm_python.hpp). Any python exec
/// takes the interpreter out of the sandbox, so it serves one exec or none;
/// one that does not serve is killed and reaped here. False: run it cold.
bool start_warm(const std::shared_ptr<local_sandbox>& sb, uint64_t id,
                launch_plan& plan, exec_callback& done) {
  if (!plan.warm_key_set || !sb->confinement.warm)
    return false;
  auto w = std::move(sb->confinement.warm);
  if (!plan.warm_candidate || !(w->key == plan.warm_key) || !w->waiting() ||
      !w->hand_over(plan.warm_cwd, plan.warm_argv, static_cast<bool>(plan.log)))
    return false;
  // With a log, its stderr joined its stdout: one pipe, as a cold start's.
  unique_fd err = plan.log ? unique_fd{} : std::move(w->err);
  auto pid = w->pid;
  w->pid = -1; // the exec's now: its deadline, kill and reaping
  plan.seccomp.reset();
  plan.args.reset();
  auto x = std::make_shared<running_exec>(sb, id, pid, w->pidfd.release(), plan,
                                          std::move(done));
  sb->execs.emplace(id, x);
  x->arm(std::move(w->out), std::move(err), std::move(w->status));
  return true;
}

} // namespace

void start_exec(const std::shared_ptr<local_sandbox>& sb, uint64_t id,
                launch_plan plan, exec_callback done) {
  if (!plan.error.empty())
    return done(sandbox_failure(plan.error));
  if (start_warm(sb, id, plan, done))
    return;
  // With a log, stdout and stderr share one pipe, interleaved as written.
  unique_fd out_rd, out_wr, err_rd, err_wr, status_rd, status_wr;
  if (!make_pipe(out_rd, out_wr) || (!plan.log && !make_pipe(err_rd, err_wr)) ||
      (plan.bwrap && !make_pipe(status_rd, status_wr)))
    return done(sandbox_failure(std::string{"cannot create pipes: "} +
                                std::strerror(errno)));
  spawn_spec spec;
  spec.program = plan.program;
  spec.argv = plan.argv;
  spec.env = plan.env;
  spec.cwd_fd = plan.cwd.get();
  spec.stdout_fd = out_wr.get();
  spec.stderr_fd = plan.log ? out_wr.get() : err_wr.get();
  spec.extra_fd = status_wr.get();
  spec.seccomp_fd = plan.seccomp.get();
  spec.args_fd = plan.args.get();
  spec.cgroup_procs_fds = sb->confinement.cgroups.join_fds();
  spec.rlimits = plan.rlimits;
  spec.nice = plan.nice;
  if (plan.bwrap)
    spec.netns_fd = sb->confinement.netns.get();
  int err = 0;
  int pidfd = -1;
  auto pid = spawn_process(spec, err, &pidfd);
  // Only the child holds the write ends (and the filter) now.
  plan.seccomp.reset();
  plan.args.reset();
  out_wr.reset();
  err_wr.reset();
  status_wr.reset();
  if (pid < 0)
    return done(sandbox_failure("cannot run " + plan.program + ": " +
                                std::strerror(err)));
  auto x =
    std::make_shared<running_exec>(sb, id, pid, pidfd, plan, std::move(done));
  sb->execs.emplace(id, x);
  x->arm(std::move(out_rd), std::move(err_rd), std::move(status_rd));
}

} // namespace sv::detail
