// sv-grade: grades a JSONL batch of submissions, each in a fresh single-use
// sandbox, and writes one JSONL outcome per input line (DESIGN.md, "The
// batch format of sv-grade"). Threads: the main thread reads and parses
// lines, the writer thread writes outcomes, CAF's threads run the actors;
// nothing blocks a scheduler thread.

#include "actors/supervisor.hpp"
#include "apps/common/cli.hpp"
#include "apps/sv_grade/batch_driver.hpp"
#include "apps/sv_grade/batch_io.hpp"
#include "apps/sv_grade/batch_line.hpp"
#include "apps/sv_grade/line_reader.hpp"
#include "apps/sv_grade/output_writer.hpp"
#include "apps/sv_grade/resume.hpp"
#include "apps/sv_grade/signals.hpp"
#include "cache/detail/cache_front.hpp"
#include "cache/detail/result_cache.hpp"
#include "messages/bounded_json.hpp"
#include "messages/config_file.hpp"
#include "messages/json.hpp"
#include "messages/registry.hpp"
#include "messages/validation.hpp"
#include "providers/factory.hpp"
#include "service/service.hpp"

#include <CLI/CLI.hpp>
#include <atomic>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>
#include <stdexcept>
#include <string>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

using namespace sv;
using namespace sv::grade;

struct cli_options {
  std::string input;
  std::string output;
  size_t concurrency = 0;
  std::string provider_config;
  std::string work_dir;
  std::string log_level = "warn";
  std::string summary_json;
  size_t max_creating = 16;
  size_t max_json_depth = default_max_json_depth;
  size_t max_line_bytes = size_t{64} << 20;
  bool resume = false;
  std::string cache;
};

constexpr const char* help_footer = R"(
Input: JSONL, one submission a line:
  {"id": "HumanEval/0#1", "files": {"sandbox_runner.py": "..."},
   "request": {...}, "exec_timeout_s": 30, "metadata": {...},
   "config": {"python": "python3", "ready_timeout_s": 60}, "work_dir": "calls"}
  id, files (with sandbox_runner.py) and request are required.
Output: JSONL, exactly one line per input line, in completion order:
  {"id", "ok", "mask_sample", "result", "failure", "timings_ms", "line"}
  A line that cannot be graded gets failure_kind "invalid_request".
Provider config: JSON or YAML (.yaml/.yml), {"local": {...settings},
  "default_metadata": {...}} or one named binding of it
  ({"sandbox": {"local": {...}}}); default {"local": {}}.
Signals: the first SIGINT/SIGTERM/SIGHUP stops reading, lets what is in
  flight finish, writes the summary and exits 130/143/129; a second one
  cancels what is in flight (its sandboxes stopped) and exits at once.
--resume: skip the input lines the output file already answers, append.
Exit status: 0 when every input line got an output line, whatever the
verdicts; 2 on a usage error; 1 when reading or writing failed
(--summary-json too); 128 + the signal when interrupted.
Example:
  examples/humaneval/make_jobs.py | sv-grade --input - --output results.jsonl
)";

std::optional<int> parse_cli(int argc, char** argv, cli_options& opts) {
  CLI::App app{"sv-grade: grades a JSONL batch of submissions, each in a "
               "fresh single-use sandbox",
               "sv-grade"};
  app.footer(help_footer);
  app.add_option("--input", opts.input, "JSONL submissions: a file, or -")
    ->required();
  app.add_option("--output", opts.output, "JSONL outcomes: a file, or -")
    ->required();
  app
    .add_option("--concurrency", opts.concurrency,
                "verifications at once (default: 2 x hardware threads; on a "
                "nodes block, the sum of the nodes' capacities)")
    ->check(CLI::Range(size_t{1}, size_t{1000000}));
  cli::add_provider_config(app, opts.provider_config);
  app.add_option("--work-dir", opts.work_dir,
                 "work_dir of lines that set none (relative to the sandbox's "
                 "workdir, or an absolute directory in the sandbox)");
  cli::add_log_level(app, opts.log_level,
                     "trace, debug, info (one line per verification), warn, "
                     "error, critical or off");
  app
    .add_option("--max-creating", opts.max_creating,
                "sandboxes in create or ready at once (protects providers "
                "from bursts of creates)")
    ->capture_default_str()
    ->check(CLI::Range(size_t{1}, size_t{1000000}));
  app
    .add_option("--max-json-depth", opts.max_json_depth,
                "deepest nesting accepted in input lines, results and "
                "provider configs")
    ->capture_default_str()
    ->check(CLI::Range(size_t{1}, size_t{100000}));
  app
    .add_option("--max-line-bytes", opts.max_line_bytes,
                "longest input line; a longer one is invalid_request, "
                "never buffered whole")
    ->capture_default_str()
    ->check(CLI::Range(size_t{1}, size_t{1} << 40));
  app.add_option("--summary-json", opts.summary_json,
                 "also write the summary as JSON to this file");
  app.add_option("--cache", opts.cache,
                 "an SQLite result cache: a line whose outcome-deciding "
                 "inputs were graded ok before is answered from it "
                 "(\"cached\": true); ok results are stored");
  app.add_flag("--resume", opts.resume,
               "keep the output file's complete lines, repair a torn last "
               "line, grade only the input lines it does not answer, append");
  app.set_version_flag("--version", std::string{"sv-grade "} + SV_VERSION);
  return cli::parse(app, argc, argv);
}

/// The provider block of `path` (providers/factory.hpp's one loader).
provider_block read_provider_block(const std::string& path, size_t max_depth,
                                   provider_config_file& file) {
  try {
    return load_provider_block(path, max_depth, file);
  } catch (const std::runtime_error& e) {
    throw usage_error(e.what());
  }
}

/// The service of the block: its backend's set-up done once (the local
/// provider: the root, the interpreter, the isolation probe, the start-up
/// reaper), the actor system it needs and the first provider. Every
/// replacement is spawned from the same backend, so a replacement stops the
/// sandboxes its predecessor created.
std::unique_ptr<service> start_service(const provider_block& block,
                                       const std::string& path,
                                       const provider_config_file& file) {
  auto where = "provider config " +
               (path.empty() ? std::string{"(default)"} : path) + ": ";
  try {
    return std::make_unique<service>(block);
  } catch (const json_error& e) {
    throw usage_error(where + file.describe(e)); // the path starts at the block
  } catch (const std::exception& e) {
    throw usage_error(where + block.name + ": " + e.what());
  }
}

supervisor_config make_supervisor_config(const cli_options& opts) {
  supervisor_config cfg;
  cfg.max_in_flight = opts.concurrency;
  cfg.max_creating = opts.max_creating;
  json_limits limits;
  limits.max_depth = opts.max_json_depth;
  cfg.parser = [limits](const std::string& text, json& result,
                        std::string& error) {
    return parse_result_text(text, result, error, limits);
  };
  return cfg;
}

/// spdlog's lines go above the progress bar, which is redrawn after them.
class bar_sink : public spdlog::sinks::base_sink<std::mutex> {
public:
  explicit bar_sink(terminal_bar& bar) : bar_(bar) {}

protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t buf;
    formatter_->format(msg, buf);
    bar_.print(fmt::to_string(buf));
  }
  void flush_() override {}

private:
  terminal_bar& bar_;
};

void setup_logging(const std::string& level, terminal_bar& bar) {
  if (!bar.enabled()) {
    cli::log_to_stderr("sv-grade", level);
    return;
  }
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
    "sv-grade", std::make_shared<bar_sink>(bar)));
  spdlog::set_level(spdlog::level::from_str(level));
}

size_t default_concurrency() {
  auto n = std::thread::hardware_concurrency();
  return 2 * static_cast<size_t>(n > 0 ? n : 1);
}

/// What `feed` did.
struct feed_result {
  bool read_ok = true;
  std::string read_error;
  uint64_t lines_read = 0;
  uint64_t resumed = 0;
  bool stopped = false;
};

bool already_answered(const answered_lines& answered, uint64_t line_no,
                      const parsed_line& parsed) {
  if (answered.lines.count(line_no) != 0)
    return true;
  if (answered.ids.empty())
    return false;
  auto& id = parsed.ok ? parsed.request.id : parsed.rejected.outcome.id;
  return answered.ids.count(id) != 0;
}

/// Reads every input line and hands it on, until the input ends, a read
/// fails, or the batch is told to stop.
feed_result feed(line_reader& reader, const batch_io& io, output_writer& writer,
                 caf::actor driver, const cli_options& opts) {
  feed_result out;
  json_limits limits;
  limits.max_depth = opts.max_json_depth;
  limits.max_bytes = opts.max_line_bytes;
  std::string text;
  uint64_t line_no = 0;
  for (;;) {
    auto st = reader.next(text);
    if (st == line_reader::status::end)
      break;
    if (st == line_reader::status::stopped) {
      out.stopped = true;
      break;
    }
    if (st == line_reader::status::error) {
      out.read_ok = false;
      out.read_error = reader.error();
      break;
    }
    ++line_no;
    parsed_line parsed;
    if (st == line_reader::status::too_long) {
      parsed.rejected.line = line_no;
      parsed.rejected.invalid = true;
      parsed.rejected.id_known = false;
      parsed.rejected.outcome = make_failed_outcome(
        {}, failure_kind::invalid_request, verification_state::validate,
        failure_cause::invalid_request,
        "line " + std::to_string(line_no) + ": " +
          std::to_string(reader.skipped()) +
          " bytes, longer than --max-line-bytes " +
          std::to_string(opts.max_line_bytes));
    } else {
      parsed = parse_batch_line(text, line_no, opts.work_dir, limits);
    }
    if (already_answered(io.answered, line_no, parsed)) {
      ++out.resumed;
      continue;
    }
    if (!writer.acquire()) {
      out.stopped = true;
      --line_no;
      break;
    }
    out.lines_read = line_no;
    if (!parsed.ok)
      writer.push(std::move(parsed.rejected));
    else
      caf::anon_send(driver, line_no, std::move(parsed.request));
  }
  out.lines_read = line_no;
  return out;
}

/// Writes `text` to a descriptor; the system's message on failure.
std::string write_text(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    auto n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return std::strerror(errno);
    done += static_cast<size_t>(n);
  }
  return {};
}

void wake(int fd) {
  uint64_t one = 1;
  while (::write(fd, &one, sizeof(one)) < 0 && errno == EINTR) {
  }
}

/// How the batch ended, when that is worth a summary line.
std::optional<batch_end> how_it_ended(int sig, const feed_result& fed,
                                      const output_writer& writer,
                                      std::optional<uint64_t> total) {
  batch_end end;
  end.signal = sig != 0 ? signal_watch::name(sig) : "";
  end.write_error = writer.failure();
  end.lines_read = fed.lines_read;
  end.resumed = fed.resumed;
  end.unanswered = writer.unwritten();
  if (total && (fed.stopped || !end.write_error.empty()))
    end.not_started = *total - std::min(*total, fed.lines_read);
  if (end.signal.empty() && end.write_error.empty() && end.resumed == 0)
    return std::nullopt;
  return end;
}

/// Writes the summary file (opened at the start); false, logged, on error.
bool write_summary_json(int fd, const std::string& path, const json& doc) {
  auto err = write_text(fd, doc.dump(2) + "\n");
  if (err.empty() && ::fsync(fd) != 0 && errno != EINVAL)
    err = std::strerror(errno);
  if (err.empty())
    return true;
  spdlog::error("writing the summary to {} failed: {}", path, err);
  return false;
}

int run(cli_options opts, terminal_bar& bar) {
  if (!opts.work_dir.empty() && !is_path_in_sandbox(opts.work_dir))
    throw usage_error("--work-dir " + opts.work_dir +
                      ": must be a directory in the sandbox (relative to its "
                      "workdir, or absolute), without '.', '..' or empty "
                      "components");
  provider_config_file config_file;
  auto block =
    read_provider_block(opts.provider_config, opts.max_json_depth, config_file);
  // Opened here, on the main thread (SQLite blocks): a file that cannot be
  // a cache is a usage error before anything starts.
  std::shared_ptr<result_cache> cache;
  if (!opts.cache.empty()) {
    try {
      cache = std::make_shared<result_cache>(opts.cache);
    } catch (const cache_error& e) {
      throw usage_error(e.what());
    }
  }
  batch_io io;
  open_io({opts.input, opts.output, opts.summary_json, opts.resume}, io);
  io.wake.fd = ::eventfd(0, EFD_CLOEXEC);
  if (io.wake.fd < 0)
    throw std::runtime_error(std::string{"eventfd: "} + std::strerror(errno));
  if (opts.resume)
    spdlog::info("resuming: {} lines of {} already answered", io.answered.count,
                 opts.output);
  // First signal: stop reading, let what is in flight finish. Again: stop
  // at once; the shutdown below stops every sandbox. Installed before the
  // actor system and removed after it is gone, so a signal during its
  // shutdown cannot kill sv-grade before the sandboxes are stopped.
  auto wake_fd = io.wake.fd;
  std::shared_ptr<output_writer> writer_slot; // set once the writer exists
  auto current_writer = [&writer_slot] {
    return std::atomic_load(&writer_slot);
  };
  signal_watch signals{
    [&, wake_fd](int sig) {
      spdlog::warn("{}: not reading more input; waiting for the lines in "
                   "flight (again to cancel them)",
                   signal_watch::name(sig));
      if (auto w = current_writer())
        w->close();
      wake(wake_fd);
    },
    [&, wake_fd](int sig) {
      spdlog::warn("{} again: cancelling the lines in flight",
                   signal_watch::name(sig));
      if (auto w = current_writer())
        w->abort();
      wake(wake_fd);
    }};
  memory_use memory;
  memory.start_kib = proc_status_kib("VmRSS:");
  auto svc = start_service(block, opts.provider_config, config_file);
  auto& sys = svc->system();
  auto& backend = svc->backend();
  auto provider = svc->first_provider();
  // A backend that cannot serve at all (nodes: none reachable) is a
  // configuration error (issue 19 item 25), not a batch of masked lines.
  if (auto why = backend.check_started(sys, provider); !why.empty())
    throw usage_error(why);
  // As many at once as the backend suits (nodes: their capacity; the
  // nodes provider queues creates beyond it), else 2 x hardware threads.
  if (opts.concurrency == 0)
    opts.concurrency = backend.suited_concurrency(sys, provider);
  if (opts.concurrency == 0)
    opts.concurrency = default_concurrency();
  // With --cache, the driver talks to the cache's front of the supervisor
  // (cache/detail/cache_front.hpp: a detached actor; it dies with the
  // supervisor).
  json_limits limits;
  limits.max_depth = opts.max_json_depth;
  auto front = svc->supervise(make_supervisor_config(opts),
                              cache ? cache_front_factory(cache, limits)
                                    : front_factory{});
  progress_options progress{bar.enabled() ? &bar : nullptr, io.total};
  if (io.total && io.answered.count > 0)
    progress.total = *io.total - std::min(*io.total, io.answered.count);
  auto writer = std::make_shared<output_writer>(
    io.out, opts.concurrency, progress, [wake_fd] { wake(wake_fd); });
  std::atomic_store(&writer_slot, writer);
  if (signals.first() != 0)
    writer->close(); // a signal came before the writer existed
  auto driver = spawn_batch_driver(sys, front, writer);
  spdlog::info("grading on provider {} with concurrency {}", block.name,
               opts.concurrency);
  line_reader reader{io.in, io.wake.fd, opts.max_line_bytes};
  auto fed = feed(reader, io, *writer, driver, opts);
  auto write_ok = writer->finish();
  auto wall_s = writer->elapsed_s();
  auto aborted = !write_ok || writer->unwritten() > 0;
  std::optional<supervisor_stats> stats;
  if (!aborted) {
    // The stops behind the last replies: counted in the summary, and none
    // is cut short by the shutdown.
    svc->drain(std::chrono::seconds{120});
    stats = svc->stats();
  }
  auto node_table = backend.usage_table(sys, provider);
  memory.end_kib = proc_status_kib("VmRSS:");
  std::tie(memory.cpu_user_s, memory.cpu_system_s) = own_cpu_seconds();
  memory.peak_kib = proc_status_kib("VmHWM:");
  // The driver first, then the service's one order (supervisor, providers,
  // backend): nothing restarts, and what the providers left is stopped and
  // their I/O threads are joined before the summary says the batch is over.
  caf::anon_send_exit(driver, caf::exit_reason::user_shutdown);
  svc->shut_down(std::chrono::nanoseconds{0});
  auto& summary = writer->summary_for_update();
  if (stats)
    summary.set_supervisor_stats(*stats);
  if (cache) {
    auto& c = cache->counters();
    summary.set_cache(
      cache_use{cache->path(), c.hits, c.misses, c.stored, c.errors});
  }
  summary.set_memory(memory);
  summary.set_nodes(node_table);
  auto sig = signals.first();
  if (auto end = how_it_ended(sig, fed, *writer, io.total))
    summary.set_batch_end(*end);
  std::cerr << summary.render(wall_s) << std::flush;
  bool summary_ok = true;
  if (io.summary_file.fd >= 0)
    summary_ok = write_summary_json(io.summary_file.fd, opts.summary_json,
                                    summary.to_json(wall_s));
  if (!fed.read_ok)
    spdlog::error("reading input {} failed: {}", opts.input, fed.read_error);
  if (!write_ok)
    spdlog::error("writing output {} failed: {}", opts.output,
                  writer->failure());
  if (!fed.read_ok || !write_ok || !summary_ok)
    return 1;
  return sig != 0 ? 128 + sig : 0;
}

} // namespace

int main(int argc, char** argv) {
  cli_options opts;
  if (auto status = parse_cli(argc, argv, opts))
    return *status;
  std::ios::sync_with_stdio(false);
  // Log lines would tear the bar apart: at info and below, the log is the
  // progress; above it, a log line is printed over the bar, then the bar.
  // Output piped on (`--output - | jq`) usually ends on the same terminal:
  // a bar there would interleave with it, so it is not drawn when the
  // output goes to a pipe (a file or the terminal keep it).
  struct stat out_st {};
  bool output_piped = opts.output == "-" &&
                      fstat(STDOUT_FILENO, &out_st) == 0 &&
                      S_ISFIFO(out_st.st_mode);
  terminal_bar bar{isatty(STDERR_FILENO) == 1 && !output_piped &&
                   spdlog::level::from_str(opts.log_level) >
                     spdlog::level::info};
  setup_logging(opts.log_level, bar);
  return cli::guarded("sv-grade", [&] { return run(opts, bar); });
}
