// sv-grade: grades a JSONL batch of submissions, each in a fresh single-use
// sandbox, and writes one JSONL outcome per input line (DESIGN.md, "The
// batch format of sv-grade"). Threads: the main thread reads and parses
// lines, the writer thread writes outcomes, CAF's threads run the actors;
// nothing blocks a scheduler thread.

#include "actors/scheduler.hpp"
#include "actors/supervisor.hpp"
#include "apps/sv_grade/batch_driver.hpp"
#include "apps/sv_grade/batch_line.hpp"
#include "apps/sv_grade/output_writer.hpp"
#include "messages/bounded_json.hpp"
#include "messages/json.hpp"
#include "messages/registry.hpp"
#include "messages/validation.hpp"
#include "providers/factory.hpp"

#include <CLI/CLI.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <stdexcept>
#include <string>
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
};

/// A problem with how sv-grade was called: message, exit status 2.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

constexpr const char* help_footer = R"(
Input: JSONL, one submission a line:
  {"id": "HumanEval/0#1", "files": {"sandbox_runner.py": "..."},
   "request": {...}, "exec_timeout_s": 30, "metadata": {...},
   "config": {"python": "python3", "ready_timeout_s": 60}, "work_dir": "calls"}
  id, files (with sandbox_runner.py) and request are required.
Output: JSONL, exactly one line per input line, in completion order:
  {"id", "ok", "mask_sample", "result", "failure", "timings_ms"}
  A line that cannot be graded gets failure_kind "invalid_request" and "line".
Provider config: JSON {"local": {...settings}, "default_metadata": {...}};
  default {"local": {}}.
Exit status: 0 when every input line got an output line, whatever the
verdicts; 2 on a usage error; 1 when reading or writing failed.
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
                "verifications at once (default: 2 x hardware threads)")
    ->check(CLI::Range(size_t{1}, size_t{1000000}));
  app.add_option("--provider-config", opts.provider_config,
                 "JSON provider block file (default: {\"local\": {}})");
  app.add_option("--work-dir", opts.work_dir,
                 "work_dir of lines that set none (sandbox-relative)");
  app
    .add_option("--log-level", opts.log_level,
                "trace, debug, info (one line per verification), warn, "
                "error, critical or off")
    ->capture_default_str()
    ->check(CLI::IsMember(
      {"trace", "debug", "info", "warn", "error", "critical", "off"}));
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
  app.add_option("--summary-json", opts.summary_json,
                 "also write the summary as JSON to this file");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return std::nullopt;
}

/// Opens a file to read, or says why not (naming it).
void open_for_reading(std::ifstream& in, const std::string& path,
                      const char* what) {
  if (std::filesystem::is_directory(path))
    throw usage_error(std::string{what} + " " + path + ": is a directory");
  in.open(path, std::ios::binary);
  if (!in)
    throw usage_error(std::string{what} + " " + path + ": " +
                      std::strerror(errno));
}

provider_block load_provider_block(const std::string& path) {
  if (path.empty())
    return parse_provider_block(json{{"local", json::object()}});
  std::ifstream in;
  open_for_reading(in, path, "provider config");
  std::string text{std::istreambuf_iterator<char>{in},
                   std::istreambuf_iterator<char>{}};
  auto where = "provider config " + path + ": ";
  json doc;
  if (auto err = parse_bounded(text, doc); !err.empty())
    throw usage_error(where + "not valid JSON: " + err);
  try {
    return parse_provider_block(doc);
  } catch (const json_error& e) {
    throw usage_error(where + e.what());
  }
}

provider_actor start_provider(caf::actor_system& sys,
                              const provider_block& block,
                              const std::string& path) {
  auto where = "provider config " +
               (path.empty() ? std::string{"(default)"} : path) + ": ";
  try {
    return spawn_provider(sys, block);
  } catch (const json_error& e) {
    throw usage_error(where + e.what()); // the path starts at the block
  } catch (const std::exception& e) {
    throw usage_error(where + block.name + ": " + e.what());
  }
}

/// Every provider sv-grade started: the first and any replacement the
/// supervisor built after one died, so that shutdown reaches them all.
class provider_set {
public:
  /// Any thread (the supervisor's restart runs on a scheduler thread).
  void add(const provider_actor& provider) {
    std::lock_guard<std::mutex> guard{mtx_};
    all_.push_back(caf::actor_cast<caf::actor>(provider));
  }

  void shut_down() {
    std::lock_guard<std::mutex> guard{mtx_};
    for (auto& hdl : all_)
      caf::anon_send_exit(hdl, caf::exit_reason::user_shutdown);
  }

private:
  std::mutex mtx_;
  std::vector<caf::actor> all_;
};

supervisor_config make_supervisor_config(const cli_options& opts,
                                         const provider_block& block,
                                         std::shared_ptr<provider_set> set) {
  supervisor_config cfg;
  cfg.max_in_flight = opts.concurrency;
  cfg.max_creating = opts.max_creating;
  cfg.default_metadata = block.default_metadata;
  json_limits limits;
  limits.max_depth = opts.max_json_depth;
  cfg.parser = [limits](const std::string& text, json& result,
                        std::string& error) {
    return parse_result_text(text, result, error, limits);
  };
  // A provider that dies mid-batch fails what it had in flight; the rest of
  // the batch goes on with a fresh one.
  cfg.restart_provider = [block, set](caf::actor_system& sys) {
    auto provider = spawn_provider(sys, block);
    set->add(provider);
    return provider;
  };
  return cfg;
}

/// The supervisor's counters; empty if it does not answer within 10 s.
std::optional<supervisor_stats> fetch_stats(caf::actor_system& sys,
                                            const supervisor_actor& sup) {
  std::optional<supervisor_stats> out;
  caf::scoped_actor self{sys};
  self->request(sup, std::chrono::seconds{10}, stats_atom::value)
    .receive([&](supervisor_stats& stats) { out = stats; },
             [](caf::error& err) {
               spdlog::warn("no statistics from the supervisor: {}",
                            to_string(err));
             });
  return out;
}

/// Stops the actors in an order that lets nothing restart: the driver, the
/// supervisor (awaited, so it cannot build another provider), the providers.
void shut_down(caf::actor_system& sys, const caf::actor& driver,
               const supervisor_actor& supervisor, provider_set& providers) {
  caf::scoped_actor self{sys};
  self->monitor(supervisor);
  caf::anon_send_exit(driver, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(supervisor, caf::exit_reason::user_shutdown);
  self->receive(
    [](const caf::down_msg&) {},
    caf::after(std::chrono::seconds{10}) >>
      [] { spdlog::warn("the supervisor did not stop within 10 s"); });
  providers.shut_down();
}

/// Lines in a file (a last line without newline counts), for the bar.
uint64_t count_lines(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  uint64_t n = 0;
  char last = '\n';
  char buf[1 << 16];
  while (in.read(buf, sizeof(buf)) || in.gcount() > 0) {
    auto got = static_cast<size_t>(in.gcount());
    for (size_t i = 0; i < got; ++i)
      n += buf[i] == '\n' ? 1 : 0;
    last = buf[got - 1];
  }
  return n + (last != '\n' ? 1 : 0);
}

void setup_logging(const std::string& level) {
  auto logger = spdlog::stderr_color_mt("sv-grade");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(level));
}

size_t default_concurrency() {
  auto n = std::thread::hardware_concurrency();
  return 2 * static_cast<size_t>(n > 0 ? n : 1);
}

/// Reads every input line and hands it on; returns false on a read error.
bool feed(std::istream& in, output_writer& writer, caf::actor driver,
          const std::string& work_dir) {
  std::string text;
  uint64_t line_no = 0;
  while (std::getline(in, text)) {
    ++line_no;
    writer.acquire();
    auto parsed = parse_batch_line(text, line_no, work_dir);
    if (!parsed.ok)
      writer.push(std::move(parsed.rejected));
    else
      caf::anon_send(driver, line_no, std::move(parsed.request));
  }
  return !in.bad();
}

struct batch_io {
  std::istream* in = &std::cin;
  std::ostream* out = &std::cout;
  std::ifstream in_file;
  std::ofstream out_file;
  std::optional<uint64_t> total;
};

void open_io(const cli_options& opts, batch_io& io) {
  if (opts.input != "-") {
    open_for_reading(io.in_file, opts.input, "input");
    io.in = &io.in_file;
    if (isatty(STDERR_FILENO) == 1) // the total only feeds the bar
      io.total = count_lines(opts.input);
  }
  if (opts.output != "-") {
    io.out_file.open(opts.output, std::ios::binary | std::ios::trunc);
    if (!io.out_file)
      throw usage_error("output " + opts.output + ": " + std::strerror(errno));
    io.out = &io.out_file;
  }
}

int run(const cli_options& opts) {
  if (!opts.work_dir.empty() && !is_confined_path(opts.work_dir))
    throw usage_error("--work-dir " + opts.work_dir +
                      ": must be a relative path inside the sandbox");
  auto block = load_provider_block(opts.provider_config);
  batch_io io;
  open_io(opts, io);
  caf::actor_system_config cfg;
  register_protocol(cfg);
  install_scheduler(cfg);
  caf::actor_system sys{cfg};
  memory_use memory;
  memory.start_kib = proc_status_kib("VmRSS:");
  auto provider = start_provider(sys, block, opts.provider_config);
  auto providers = std::make_shared<provider_set>();
  providers->add(provider);
  auto supervisor = spawn_supervisor(
    sys, provider, make_supervisor_config(opts, block, providers));
  // Log lines would tear the bar apart: at info and below, the log is the
  // progress.
  bool bar = isatty(STDERR_FILENO) == 1 &&
             spdlog::default_logger()->level() > spdlog::level::info;
  progress_options progress{bar, io.total};
  auto writer =
    std::make_shared<output_writer>(*io.out, opts.concurrency, progress);
  auto driver = spawn_batch_driver(sys, supervisor, writer);
  spdlog::info("grading on provider {} with concurrency {}", block.name,
               opts.concurrency);
  auto read_ok = feed(*io.in, *writer, driver, opts.work_dir);
  auto write_ok = writer->finish();
  auto wall_s = writer->elapsed_s();
  auto stats = fetch_stats(sys, supervisor);
  memory.end_kib = proc_status_kib("VmRSS:");
  std::tie(memory.cpu_user_s, memory.cpu_system_s) = own_cpu_seconds();
  memory.peak_kib = proc_status_kib("VmHWM:");
  shut_down(sys, driver, supervisor, *providers);
  auto& summary = writer->summary_for_update();
  if (stats)
    summary.set_supervisor_stats(*stats);
  summary.set_memory(memory);
  std::cerr << summary.render(wall_s) << std::flush;
  if (!opts.summary_json.empty()) {
    std::ofstream out{opts.summary_json, std::ios::trunc};
    out << summary.to_json(wall_s).dump(2) << '\n';
    if (!out)
      spdlog::error("writing the summary to {} failed", opts.summary_json);
  }
  if (!read_ok)
    spdlog::error("reading input {} failed", opts.input);
  if (!write_ok)
    spdlog::error("writing output {} failed", opts.output);
  return read_ok && write_ok ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
  cli_options opts;
  if (auto status = parse_cli(argc, argv, opts))
    return *status;
  if (opts.concurrency == 0)
    opts.concurrency = default_concurrency();
  std::ios::sync_with_stdio(false);
  setup_logging(opts.log_level);
  try {
    return run(opts);
  } catch (const usage_error& e) {
    std::cerr << "sv-grade: " << e.what() << '\n';
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "sv-grade: " << e.what() << '\n';
    return 1;
  }
}
