#include "apps/sv_serve/metrics.hpp"

#include "messages/enums.hpp"

#include <algorithm>
#include <sstream>

namespace sv::serve {

void metrics::histogram::observe(double seconds) {
  for (size_t i = 0; i < bounds.size(); ++i)
    if (seconds <= bounds[i])
      ++buckets[i];
  ++count;
  sum += seconds;
}

void metrics::count_http(unsigned code) {
  std::lock_guard<std::mutex> guard{mtx_};
  ++http_[code];
}

void metrics::started() {
  std::lock_guard<std::mutex> guard{mtx_};
  ++in_flight_;
}

void metrics::finished(const verification_outcome& out) {
  std::string labels;
  if (out.ok) {
    labels = R"(outcome="ok",failure_kind="",state="",cause="")";
  } else {
    auto& f = out.failure;
    labels = "outcome=\"failed\",failure_kind=\"" +
             std::string{to_string(f.kind)} + "\",state=\"" +
             std::string{to_string(f.state)} + "\",cause=\"" +
             std::string{to_string(f.cause)} + "\"";
  }
  auto& t = out.timings;
  std::lock_guard<std::mutex> guard{mtx_};
  if (in_flight_ > 0)
    --in_flight_;
  ++verifications_[labels];
  const std::pair<const char*, double> states[] = {
    {"create", t.create}, {"ready", t.ready},       {"upload", t.upload},
    {"exec", t.exec},     {"download", t.download}, {"stop", t.stop}};
  for (auto& [name, ms] : states)
    if (ms >= 0)
      states_[name].observe(ms / 1000);
  total_.observe(t.total / 1000);
}

void metrics::track_cache(std::function<cache_counts()> read) {
  std::lock_guard<std::mutex> guard{mtx_};
  cache_ = std::move(read);
}

void metrics::cancelled(uint64_t n) {
  std::lock_guard<std::mutex> guard{mtx_};
  in_flight_ -= std::min(in_flight_, n);
  cancelled_ += n;
}

namespace {

template <class Histogram>
void render_histogram(std::ostringstream& out, const std::string& name,
                      const std::string& labels, const Histogram& h) {
  auto sep = labels.empty() ? "" : ",";
  for (size_t i = 0; i < metrics::bounds.size(); ++i)
    out << name << "_bucket{" << labels << sep << "le=\"" << metrics::bounds[i]
        << "\"} " << h.buckets[i] << '\n';
  out << name << "_bucket{" << labels << sep << "le=\"+Inf\"} " << h.count
      << '\n';
  auto braces = labels.empty() ? std::string{} : "{" + labels + "}";
  out << name << "_sum" << braces << ' ' << h.sum << '\n';
  out << name << "_count" << braces << ' ' << h.count << '\n';
}

void gauge(std::ostringstream& out, const char* name, const char* type,
           const char* help, uint64_t value) {
  out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type
      << '\n'
      << name << ' ' << value << '\n';
}

} // namespace

std::string
metrics::render(const std::optional<supervisor_stats>& stats) const {
  std::ostringstream out;
  std::lock_guard<std::mutex> guard{mtx_};
  out << "# HELP sv_verifications_total Verifications answered, by outcome.\n"
         "# TYPE sv_verifications_total counter\n";
  for (auto& [labels, n] : verifications_)
    out << "sv_verifications_total{" << labels << "} " << n << '\n';
  out << "# HELP sv_state_seconds Time spent per state of a verification.\n"
         "# TYPE sv_state_seconds histogram\n";
  for (auto& [state, h] : states_)
    render_histogram(out, "sv_state_seconds", "state=\"" + state + "\"", h);
  out << "# HELP sv_verification_seconds Total time of a verification.\n"
         "# TYPE sv_verification_seconds histogram\n";
  render_histogram(out, "sv_verification_seconds", "", total_);
  gauge(out, "sv_in_flight", "gauge", "Verifications sv-serve is waiting for.",
        in_flight_);
  gauge(out, "sv_cancelled_total", "counter",
        "Verifications cancelled because their client went away.", cancelled_);
  if (cache_) {
    auto c = cache_();
    gauge(out, "sv_cache_hits_total", "counter",
          "Submissions answered from the result cache.", c.hits);
    gauge(out, "sv_cache_misses_total", "counter",
          "Submissions looked up in the result cache and graded.", c.misses);
  }
  if (stats) {
    auto& s = *stats;
    gauge(out, "sv_queue_depth", "gauge",
          "Submissions queued in the supervisor.", s.queued);
    gauge(out, "sv_supervisor_in_flight", "gauge",
          "Verifications running in the supervisor.", s.in_flight);
    auto ended = s.sandboxes_stopped + s.stop_failures;
    gauge(out, "sv_sandboxes_live", "gauge",
          "Sandboxes created and not yet stopped (verifications' and the "
          "sandbox API's).",
          (s.sandboxes_created > ended ? s.sandboxes_created - ended : 0) +
            api.live);
    gauge(out, "sv_sandboxes_created_total", "counter", "Sandboxes created.",
          s.sandboxes_created);
    gauge(out, "sv_sandboxes_stopped_total", "counter", "Sandboxes stopped.",
          s.sandboxes_stopped);
    gauge(out, "sv_stop_failures_total", "counter",
          "Stops that failed (the provider's TTL reaps those).",
          s.stop_failures);
    gauge(out, "sv_sandboxes_stopping", "gauge",
          "Sandboxes being stopped after their reply went out.", s.stopping);
    gauge(out, "sv_stops_after_reply_total", "counter",
          "Stops that ran after their reply (failures are also in "
          "sv_stop_failures_total).",
          s.stops_after_reply);
    gauge(out, "sv_provider_restarts_total", "counter",
          "Providers replaced after they died.", s.provider_restarts);
  }
  gauge(out, "sv_api_sandboxes_live", "gauge",
        "Sandboxes of the sandbox API not yet stopped.", api.live);
  gauge(out, "sv_api_sandbox_creates_total", "counter",
        "Creates the sandbox API sent to the provider.", api.created);
  gauge(out, "sv_api_sandboxes_reaped_total", "counter",
        "Sandbox API sandboxes stopped by their TTL or idle timeout.",
        api.reaped);
  gauge(out, "sv_api_sandboxes_unclaimed_total", "counter",
        "Sandbox API sandboxes stopped as soon as they were made: their "
        "client had gone away or their create's deadline had passed.",
        api.unclaimed);
  gauge(out, "sv_connections_open", "gauge", "HTTP connections open.",
        conns.open);
  gauge(out, "sv_connections_refused_total", "counter",
        "Connections closed at accept: --max-connections were open.",
        conns.refused);
  gauge(out, "sv_accept_failures_total", "counter",
        "Accepts that failed (out of file descriptors...), each followed "
        "by a 100 ms pause.",
        conns.accept_pauses);
  out << "# HELP sv_http_requests_total HTTP requests answered, by code.\n"
         "# TYPE sv_http_requests_total counter\n";
  for (auto& [code, n] : http_)
    out << "sv_http_requests_total{code=\"" << code << "\"} " << n << '\n';
  return out.str();
}

} // namespace sv::serve
