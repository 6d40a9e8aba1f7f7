#include "apps/sv_grade/summary.hpp"

#include "messages/json.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sys/resource.h>

namespace sv::grade {

namespace {

std::string fixed(double x, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, x);
  return buf;
}

std::string percentiles_line(const char* label, std::vector<double> xs) {
  std::string out = std::string{"  "} + label;
  if (xs.empty())
    return out + "n/a\n";
  for (double p : {50.0, 95.0, 99.0})
    out += "p" + fixed(p, 0) + " " + fixed(percentile(xs, p), 1) + "  ";
  out.resize(out.size() - 2);
  return out + "\n";
}

std::string counts_line(const std::map<std::string, uint64_t>& counts) {
  std::string out;
  for (auto& [name, n] : counts)
    out += (out.empty() ? "" : ", ") + name + " " + std::to_string(n);
  return out;
}

} // namespace

double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty())
    return 0;
  auto rank = static_cast<size_t>(std::ceil(p / 100.0 * sorted.size()));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

std::string format_duration(double seconds) {
  auto s = static_cast<int64_t>(std::llround(std::max(seconds, 0.0)));
  char buf[64];
  if (s >= 3600)
    std::snprintf(
      buf, sizeof(buf), "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
      static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  else
    std::snprintf(buf, sizeof(buf), "%lld:%02lld",
                  static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  return buf;
}

void batch_summary::add(const batch_entry& entry) {
  auto& out = entry.outcome;
  ++lines_;
  if (!entry.invalid && !out.node.empty()) {
    auto& n = per_node_[out.node];
    ++n.verifications;
    n.ok += out.ok ? 1 : 0;
    n.retried += out.attempts > 1 ? 1 : 0;
    if (!out.ok)
      ++n.failures[std::string{to_string(out.failure.kind)}];
    n.total_ms.push_back(out.timings.total);
  }
  if (!entry.invalid) {
    ++graded_;
    total_ms_.push_back(out.timings.total);
    if (out.timings.exec >= 0)
      overhead_ms_.push_back(out.timings.total - out.timings.exec);
  }
  if (out.cached)
    ++cached_;
  if (out.ok) {
    ++ok_;
    auto i =
      out.result.is_object() ? out.result.find("reward") : out.result.end();
    if (i == out.result.end()) {
      ++reward_missing_;
    } else if (!i->is_number()) {
      ++reward_nan_;
    } else {
      auto reward = i->get<double>();
      ++rewarded_;
      reward_sum_ += reward;
      full_rewards_ += reward == 1.0 ? 1 : 0;
      reward_range_ += reward < 0.0 || reward > 1.0 ? 1 : 0;
    }
    return;
  }
  auto& f = out.failure;
  auto kind = std::string{to_string(f.kind)};
  ++by_kind_[kind];
  ++by_cause_[kind + "/" + std::string{to_string(f.state)} + "/" +
              std::string{to_string(f.cause)}];
}

std::optional<double> batch_summary::mean_reward() const {
  if (rewarded_ == 0)
    return std::nullopt;
  return reward_sum_ / static_cast<double>(rewarded_);
}

std::vector<double> batch_summary::total_ms() const {
  auto xs = total_ms_;
  std::sort(xs.begin(), xs.end());
  return xs;
}

std::vector<double> batch_summary::overhead_ms() const {
  auto xs = overhead_ms_;
  std::sort(xs.begin(), xs.end());
  return xs;
}

json batch_summary::node_rows() const {
  json rows = json::array();
  std::map<std::string, size_t> row_of;
  for (auto& n : nodes_) {
    if (!n.is_object())
      continue;
    row_of[n.value("endpoint", std::string{})] = rows.size();
    rows.push_back(n);
  }
  for (auto& [endpoint, t] : per_node_) {
    auto i = row_of.find(endpoint);
    if (i == row_of.end()) {
      row_of[endpoint] = rows.size();
      rows.push_back(json{{"endpoint", endpoint}});
      i = row_of.find(endpoint);
    }
    auto totals = t.total_ms;
    std::sort(totals.begin(), totals.end());
    auto& row = rows[i->second];
    row["verifications"] = t.verifications;
    row["ok"] = t.ok;
    row["retried_here"] = t.retried;
    row["failures_by_kind"] = t.failures;
    row["total_ms_p50"] = percentile(totals, 50);
    row["total_ms_p99"] = percentile(totals, 99);
  }
  return rows;
}

std::string batch_summary::render(double wall_s) const {
  std::string out = "sv-grade summary\n";
  out += "  lines        " + std::to_string(lines_) + " (ok " +
         std::to_string(ok_) + ", failed " + std::to_string(failed()) + ")\n";
  out += "  reward       ";
  if (auto mean = mean_reward())
    out += "mean " + fixed(*mean, 4) + " over " + std::to_string(rewarded_) +
           " results; reward 1.0: " + std::to_string(full_rewards_) + "/" +
           std::to_string(lines_) + " lines\n";
  else
    out += "n/a (no ok result has a numeric reward)\n";
  if (reward_missing_ + reward_nan_ + reward_range_ > 0)
    out += "  warning      of the ok results, " +
           std::to_string(reward_missing_) + " have no reward, " +
           std::to_string(reward_nan_) + " a reward that is not a number, " +
           std::to_string(reward_range_) +
           " a reward outside [0, 1] (the runner's contract: "
           "docs/runner.md)\n";
  out += percentiles_line("total ms     ", total_ms());
  out += percentiles_line("overhead ms  ", overhead_ms());
  auto rate = wall_s > 0 ? static_cast<double>(graded_) / wall_s : 0.0;
  out += "  throughput   " + fixed(rate, 1) + " verifications/s, wall " +
         fixed(wall_s, 2) + " s\n";
  if (!by_kind_.empty()) {
    out += "  failures     " + counts_line(by_kind_) + "\n";
    for (auto& [name, n] : by_cause_)
      out += "               " + name + " " + std::to_string(n) + "\n";
  }
  if (stats_) {
    auto& s = *stats_;
    out +=
      "  sandboxes    created " + std::to_string(s.sandboxes_created) +
      ", stopped " + std::to_string(s.sandboxes_stopped) + ", stop failures " +
      std::to_string(s.stop_failures) + ", never stopped " +
      std::to_string(s.sandboxes_created - s.sandboxes_stopped -
                     s.stop_failures - s.sandboxes_left_to_node) +
      (s.sandboxes_left_to_node > 0 ? ", left to a lost node's reaper " +
                                        std::to_string(s.sandboxes_left_to_node)
                                    : std::string{}) +
      "\n";
    if (s.retries > 0 || s.retries_denied > 0)
      out += "  retries      " + std::to_string(s.retries) +
             " (infrastructure failures graded again in a fresh sandbox), " +
             std::to_string(s.retries_denied) + " refused by the budget\n";
    if (s.stops_after_reply > 0 || s.stopping > 0)
      out += "  stops        after the reply " +
             std::to_string(s.stops_after_reply) + " (at most " +
             std::to_string(s.peak_stopping) + " at once, " +
             std::to_string(s.stopping) + " still stopping)\n";
    if (s.crashed > 0 || s.provider_restarts > 0)
      out += "  incidents    crashed verifications " +
             std::to_string(s.crashed) + ", provider restarts " +
             std::to_string(s.provider_restarts) + "\n";
  }
  for (auto& n : node_rows()) {
    auto num = [&](const char* key) {
      return n.contains(key) ? n[key].dump() : std::string{"?"};
    };
    auto ms = [&](const char* key) {
      auto v = n.value(key, -1.0);
      return v < 0 ? std::string{"n/a"} : fixed(v, 1);
    };
    std::string graded;
    if (n.contains("verifications")) {
      graded = num("verifications") + " verifications (ok " + num("ok");
      for (auto& [kind, count] : n["failures_by_kind"].items())
        graded += ", " + kind + " " + count.dump();
      graded += ", retried here " + num("retried_here") + "), total ms p50 " +
                ms("total_ms_p50") + " p99 " + ms("total_ms_p99") + "; ";
    }
    out += "  node         " + n.value("endpoint", std::string{"?"}) + ": " +
           graded + num("sandboxes") + " sandboxes, sandbox ms p50 " +
           ms("sandbox_ms_p50") + " p99 " + ms("sandbox_ms_p99") +
           ", create failures " + num("create_failures") + ", call failures " +
           num("call_failures") + ", failed by loss " +
           num("failed_by_node_loss") + ", losses " + num("losses") +
           (n.value("up", false) ? "" : " (down)") + "\n";
  }
  if (cache_) {
    auto& c = *cache_;
    out +=
      "  cache        " + std::to_string(cached_) + " lines from " + c.path +
      " (" + std::to_string(c.hits) + " hits, " + std::to_string(c.misses) +
      " misses, " + std::to_string(c.stored) + " stored" +
      (c.errors > 0 ? ", " + std::to_string(c.errors) + " errors" : "") + ")\n";
  }
  if (memory_) {
    out += "  memory       rss start " + fixed(memory_->start_kib / 1024.0, 1) +
           " MiB, peak " + fixed(memory_->peak_kib / 1024.0, 1) + " MiB, end " +
           fixed(memory_->end_kib / 1024.0, 1) + " MiB\n";
    out += "  own cpu      " + fixed(memory_->cpu_user_s, 2) + " s user, " +
           fixed(memory_->cpu_system_s, 2) +
           " s system (sv-grade's threads, not the sandboxes)\n";
  }
  if (end_) {
    auto& e = *end_;
    if (e.resumed > 0)
      out += "  resumed      " + std::to_string(e.resumed) +
             " lines already answered, skipped\n";
    if (!e.signal.empty() || !e.write_error.empty()) {
      out += "  stopped      " +
             (e.write_error.empty() ? "by " + e.signal
                                    : "writing failed: " + e.write_error) +
             " after reading " + std::to_string(e.lines_read) + " lines";
      if (e.not_started)
        out += ", " + std::to_string(*e.not_started) + " not started";
      if (e.unanswered > 0)
        out += ", " + std::to_string(e.unanswered) + " cancelled unanswered";
      out += "\n";
    }
  }
  return out;
}

json batch_summary::to_json(double wall_s) const {
  auto totals = total_ms();
  auto overheads = overhead_ms();
  auto pcts = [](const std::vector<double>& xs) {
    return json{{"p50", percentile(xs, 50)},
                {"p95", percentile(xs, 95)},
                {"p99", percentile(xs, 99)}};
  };
  json out{{"lines", lines_},
           {"graded", graded_},
           {"ok", ok_},
           {"failed", failed()},
           {"mean_reward", mean_reward() ? json(*mean_reward()) : json()},
           {"full_rewards", full_rewards_},
           {"reward_missing", reward_missing_},
           {"reward_not_a_number", reward_nan_},
           {"reward_out_of_range", reward_range_},
           {"failures_by_kind", by_kind_},
           {"failures_by_kind_state_cause", by_cause_},
           {"total_ms", pcts(totals)},
           {"overhead_ms", pcts(overheads)},
           {"wall_s", wall_s},
           {"per_s", wall_s > 0 ? static_cast<double>(graded_) / wall_s : 0}};
  if (stats_)
    out["supervisor"] = *stats_;
  if (!nodes_.empty() || !per_node_.empty())
    out["nodes"] = node_rows();
  if (cache_)
    out["cache"] = json{{"path", cache_->path},     {"lines", cached_},
                        {"hits", cache_->hits},     {"misses", cache_->misses},
                        {"stored", cache_->stored}, {"errors", cache_->errors}};
  if (memory_) {
    out["memory_kib"] = json{{"rss_start", memory_->start_kib},
                             {"rss_peak", memory_->peak_kib},
                             {"rss_end", memory_->end_kib}};
    out["own_cpu_s"] =
      json{{"user", memory_->cpu_user_s}, {"system", memory_->cpu_system_s}};
  }
  if (end_) {
    auto& e = *end_;
    out["end"] = json{
      {"signal", e.signal.empty() ? json() : json(e.signal)},
      {"write_error", e.write_error.empty() ? json() : json(e.write_error)},
      {"lines_read", e.lines_read},
      {"not_started", e.not_started ? json(*e.not_started) : json()},
      {"resumed", e.resumed},
      {"unanswered", e.unanswered}};
  }
  return out;
}

std::pair<double, double> own_cpu_seconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& tv) {
    return static_cast<double>(tv.tv_sec) + tv.tv_usec / 1e6;
  };
  return {seconds(usage.ru_utime), seconds(usage.ru_stime)};
}

uint64_t proc_status_kib(const char* field) {
  std::ifstream in{"/proc/self/status"};
  std::string line;
  auto len = std::strlen(field);
  while (std::getline(in, line))
    if (line.compare(0, len, field) == 0)
      return std::strtoull(line.c_str() + len, nullptr, 10);
  return 0;
}

std::string render_progress(uint64_t done, std::optional<uint64_t> total,
                            double elapsed_s) {
  auto rate = elapsed_s > 0 ? static_cast<double>(done) / elapsed_s : 0.0;
  auto speed = fixed(rate, 1) + "/s";
  if (!total)
    return std::to_string(done) + " done  " + speed + "  " +
           format_duration(elapsed_s);
  constexpr size_t width = 30;
  auto n = *total;
  auto frac = n > 0 ? std::min(1.0, static_cast<double>(done) / n) : 1.0;
  auto filled = static_cast<size_t>(frac * width);
  auto eta = rate > 0 && done < n
               ? format_duration(static_cast<double>(n - done) / rate)
               : std::string{done >= n ? "0:00" : "?"};
  return "[" + std::string(filled, '#') + std::string(width - filled, '-') +
         "] " + std::to_string(done) + "/" + std::to_string(n) + " " +
         fixed(frac * 100, 0) + "%  " + speed + "  ETA " + eta;
}

} // namespace sv::grade
