// sv-grade's summary, percentiles, progress line and output writer.

#include "apps/sv_grade/output_writer.hpp"
#include "apps/sv_grade/summary.hpp"
#include "messages/json.hpp"

#include <catch2/catch.hpp>
#include <cstdio>
#include <fcntl.h>
#include <sstream>
#include <unistd.h>

using namespace sv;
using namespace sv::grade;

namespace {

batch_entry ok_entry(json result, double total, double exec) {
  batch_entry e;
  e.outcome.id = "ok";
  e.outcome.ok = true;
  e.outcome.result = std::move(result);
  e.outcome.timings.total = total;
  e.outcome.timings.exec = exec;
  return e;
}

batch_entry failed_entry(failure_cause cause, double total) {
  batch_entry e;
  e.outcome = make_failed_outcome("f", failure_kind::verifier_error,
                                  verification_state::exec, cause, "m");
  e.outcome.timings.total = total;
  return e;
}

batch_entry invalid_entry(uint64_t line) {
  auto parsed = parse_batch_line("nope", line);
  return parsed.rejected;
}

} // namespace

TEST_CASE("percentile is nearest-rank") {
  CHECK(percentile({}, 50) == 0);
  CHECK(percentile({7}, 99) == 7);
  std::vector<double> xs{1, 2, 3, 4};
  CHECK(percentile(xs, 0) == 1);
  CHECK(percentile(xs, 25) == 1);
  CHECK(percentile(xs, 50) == 2);
  CHECK(percentile(xs, 51) == 3);
  CHECK(percentile(xs, 100) == 4);
  std::vector<double> hundred;
  for (int i = 1; i <= 100; ++i)
    hundred.push_back(i);
  CHECK(percentile(hundred, 95) == 95);
  CHECK(percentile(hundred, 99) == 99);
}

TEST_CASE("durations read as m:ss or h:mm:ss") {
  CHECK(format_duration(0) == "0:00");
  CHECK(format_duration(65.4) == "1:05");
  CHECK(format_duration(7384) == "2:03:04");
  CHECK(format_duration(-3) == "0:00");
}

TEST_CASE("the summary counts outcomes, rewards and latencies") {
  batch_summary s;
  s.add(ok_entry({{"reward", 1.0}}, 10, 8));
  s.add(ok_entry({{"reward", 0.0}}, 20, 15));
  s.add(ok_entry({{"passed", true}}, 30, 20)); // no reward: not averaged
  s.add(failed_entry(failure_cause::timeout, 40));
  s.add(invalid_entry(5));
  CHECK(s.lines() == 5);
  CHECK(s.graded() == 4);
  CHECK(s.ok() == 3);
  CHECK(s.failed() == 2);
  REQUIRE(s.mean_reward());
  CHECK(*s.mean_reward() == Approx(0.5));
  CHECK(s.full_rewards() == 1);
  CHECK(s.by_kind() == std::map<std::string, uint64_t>{{"invalid_request", 1},
                                                       {"verifier_error", 1}});
  CHECK(s.by_cause().at("verifier_error/exec/timeout") == 1);
  CHECK(s.by_cause().at("invalid_request/validate/invalid_request") == 1);
  CHECK(s.total_ms() == std::vector<double>{10, 20, 30, 40});
  // The failure never entered exec (-1): no overhead for it.
  CHECK(s.overhead_ms() == std::vector<double>{2, 5, 10});
  auto text = s.render(2.0);
  CHECK(text.find("lines        5 (ok 3, failed 2)") != std::string::npos);
  CHECK(text.find("reward 1.0: 1/5 lines") != std::string::npos);
  CHECK(text.find("total ms     p50 20.0  p95 40.0  p99 40.0") !=
        std::string::npos);
  CHECK(text.find("2.0 verifications/s") != std::string::npos);
  CHECK(text.find("verifier_error/exec/timeout 1") != std::string::npos);
}

TEST_CASE("a summary without rewards says so") {
  batch_summary s;
  CHECK_FALSE(s.mean_reward());
  auto text = s.render(0);
  CHECK(text.find("n/a (no ok result has a numeric reward)") !=
        std::string::npos);
  CHECK(text.find("total ms     n/a") != std::string::npos);
}

TEST_CASE("the summary warns about rewards that break the runner's contract") {
  batch_summary s;
  s.add(ok_entry(json{{"reward", 1.0}}, 10, 5));
  s.add(ok_entry(json{{"reward", 7}}, 10, 5));
  s.add(ok_entry(json{{"reward", "1.0"}}, 10, 5));
  s.add(ok_entry(json{{"passed", true}}, 10, 5));
  s.add(ok_entry(json::array(), 10, 5));
  CHECK(s.reward_missing() == 2);
  CHECK(s.reward_not_a_number() == 1);
  CHECK(s.reward_out_of_range() == 1);
  auto text = s.render(1);
  CHECK(text.find("warning      of the ok results, 2 have no reward, 1 a "
                  "reward that is not a number, 1 a reward outside [0, 1]") !=
        std::string::npos);
  auto doc = s.to_json(1);
  CHECK(doc["reward_missing"] == 2);
  CHECK(doc["reward_not_a_number"] == 1);
  CHECK(doc["reward_out_of_range"] == 1);
}

TEST_CASE("a summary of contract-keeping rewards has no warning") {
  batch_summary s;
  s.add(ok_entry(json{{"reward", 0.0}}, 10, 5));
  s.add(ok_entry(json{{"reward", 1}}, 10, 5));
  CHECK(s.render(1).find("warning") == std::string::npos);
}

TEST_CASE("the summary counts lines answered from the result cache") {
  batch_summary s;
  auto hit = ok_entry({{"reward", 1.0}}, 0.2, -1);
  hit.outcome.cached = true;
  s.add(hit);
  s.add(ok_entry({{"reward", 1.0}}, 50, 40));
  CHECK(s.cached() == 1);
  CHECK(s.render(1).find("cache") == std::string::npos); // no --cache
  s.set_cache(cache_use{"c.sqlite", 1, 1, 1, 0});
  CHECK(s.render(1).find("  cache        1 lines from c.sqlite (1 hits, 1 "
                         "misses, 1 stored)\n") != std::string::npos);
  auto j = s.to_json(1)["cache"];
  CHECK(j == json{{"path", "c.sqlite"},
                  {"lines", 1},
                  {"hits", 1},
                  {"misses", 1},
                  {"stored", 1},
                  {"errors", 0}});
}

TEST_CASE("the progress line shows done, total, rate and ETA") {
  CHECK(render_progress(50, 100, 10) ==
        "[###############---------------] 50/100 50%  5.0/s  ETA 0:10");
  CHECK(render_progress(100, 100, 10).find("ETA 0:00") != std::string::npos);
  CHECK(render_progress(0, 100, 0).find("ETA ?") != std::string::npos);
  CHECK(render_progress(12, std::nullopt, 4) == "12 done  3.0/s  0:04");
}

namespace {

/// The whole content of a file descriptor's file.
std::string content_of(int fd) {
  std::string out;
  char buf[4096];
  ::lseek(fd, 0, SEEK_SET);
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;)
    out.append(buf, static_cast<size_t>(n));
  return out;
}

} // namespace

TEST_CASE("the writer writes one line per entry") {
  auto* file = std::tmpfile();
  REQUIRE(file != nullptr);
  output_writer writer{fileno(file), 2, {}};
  for (uint64_t i = 1; i <= 5; ++i) {
    REQUIRE(writer.acquire());
    writer.push(invalid_entry(i));
  }
  REQUIRE(writer.finish());
  std::istringstream lines{content_of(fileno(file))};
  std::fclose(file);
  std::string line;
  uint64_t n = 0;
  while (std::getline(lines, line))
    CHECK(json::parse(line)["line"] == ++n);
  CHECK(n == 5);
  CHECK(writer.summary().lines() == 5);
  CHECK(writer.written() == 5);
}

TEST_CASE("a write error aborts the writer with the system's reason") {
  auto fd = ::open("/dev/full", O_WRONLY);
  if (fd < 0)
    return; // no /dev/full here
  bool aborted = false;
  output_writer writer{fd, 1, {}, [&] { aborted = true; }};
  REQUIRE(writer.acquire());
  writer.push(invalid_entry(1));
  CHECK_FALSE(writer.finish());
  CHECK(writer.failure() == "No space left on device");
  CHECK(aborted);
  CHECK(writer.summary().lines() == 0);
  CHECK_FALSE(writer.acquire());
  ::close(fd);
}

TEST_CASE("close makes acquire refuse, finish waits for what was taken") {
  auto* file = std::tmpfile();
  output_writer writer{fileno(file), 4, {}};
  REQUIRE(writer.acquire());
  writer.close();
  CHECK_FALSE(writer.acquire());
  writer.push(invalid_entry(1));
  CHECK(writer.finish());
  CHECK(writer.written() == 1);
  std::fclose(file);
}
