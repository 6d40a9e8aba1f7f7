#include "apps/sv_grade/batch_driver.hpp"

#include "actors/quiet.hpp"
#include "apps/sv_grade/batch_line.hpp"
#include "apps/sv_grade/output_writer.hpp"
#include "messages/errors.hpp"

#include <algorithm>
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/sec.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>
#include <deque>
#include <map>
#include <unordered_map>

namespace sv::grade {

namespace {

/// The line of a request the supervisor never answered. A lost reply is
/// the grader's own infrastructure failing, never the submission's: it is
/// provider_unavailable (masked, and not blamed on the runner as a
/// verifier_error would be), with state queue and a message saying so.
batch_entry lost_reply(std::string id, uint64_t line, const caf::error& err,
                       std::chrono::milliseconds timeout) {
  batch_entry entry;
  entry.line = line;
  if (err == caf::sec::request_timeout) {
    auto s = std::to_string(timeout.count() / 1000);
    entry.outcome = make_failed_outcome(
      std::move(id), failure_kind::provider_unavailable,
      verification_state::queue, failure_cause::timeout,
      "sv-grade lost the supervisor's reply: none within " + s +
        " s (the sum of the line's deadlines and a margin)");
  } else {
    entry.outcome = make_failed_outcome(
      std::move(id), failure_kind::provider_unavailable,
      verification_state::queue, failure_cause::crash,
      "sv-grade lost the supervisor's reply: the supervisor failed: " +
        describe(err));
  }
  return entry;
}

using sweep_atom = caf::atom_constant<caf::atom("sweep")>;

/// How often the driver looks for replies past their deadline.
constexpr auto sweep_interval = std::chrono::seconds{1};

// The driver talks to the supervisor with plain sends and matches replies
// itself. With CAF 0.17's `request`, an actor keeps its pending responses in
// a flat map searched linearly, so one actor with N lines outstanding pays
// O(N) per reply. Replies match lines by id, oldest line first: lines that
// share an id are indistinguishable in the output anyway.
struct driver_state {
  static inline const char* name = "sv.batch_driver";

  using time_point = caf::actor_clock::time_point;

  struct pending_line {
    std::string id;
    std::chrono::milliseconds timeout;
    std::multimap<time_point, uint64_t>::iterator deadline;
  };

  /// Lines waiting for the supervisor, by line number.
  std::unordered_map<uint64_t, pending_line> pending;
  /// Their line numbers by id, oldest first.
  std::unordered_map<std::string, std::deque<uint64_t>> by_id;
  /// Their deadlines, earliest first.
  std::multimap<time_point, uint64_t> deadlines;
  bool sweeping = false;
};

using driver_ptr = caf::stateful_actor<driver_state>*;

/// Forgets a pending line; returns its id.
std::string forget(driver_ptr self, uint64_t line, bool keep_deadline) {
  auto& st = self->state;
  auto i = st.pending.find(line);
  auto id = std::move(i->second.id);
  if (!keep_deadline)
    st.deadlines.erase(i->second.deadline);
  st.pending.erase(i);
  auto j = st.by_id.find(id);
  auto& lines = j->second;
  lines.erase(std::find(lines.begin(), lines.end(), line));
  if (lines.empty())
    st.by_id.erase(j);
  return id;
}

/// Fails every line whose reply is overdue. One periodic sweep instead of a
/// timeout per line: CAF 0.17 cancels a timeout only when its actor ends,
/// and this actor lives for the whole batch.
void sweep(driver_ptr self, output_writer& writer) {
  auto& st = self->state;
  auto now = self->clock().now();
  while (!st.deadlines.empty() && st.deadlines.begin()->first <= now) {
    auto line = st.deadlines.begin()->second;
    auto timeout = st.pending.at(line).timeout;
    auto id = forget(self, line, true);
    st.deadlines.erase(st.deadlines.begin());
    writer.push(lost_reply(std::move(id), line,
                           caf::make_error(caf::sec::request_timeout),
                           timeout));
  }
  st.sweeping = !st.pending.empty();
  if (st.sweeping)
    self->delayed_send(self, sweep_interval, sweep_atom::value);
}

/// The supervisor is gone: no line still waiting will ever be answered.
void fail_all(driver_ptr self, output_writer& writer, const caf::error& why) {
  auto& st = self->state;
  while (!st.pending.empty()) {
    auto line = st.pending.begin()->first;
    auto timeout = st.pending.begin()->second.timeout;
    writer.push(lost_reply(forget(self, line, false), line, why, timeout));
  }
}

caf::behavior batch_driver(driver_ptr self, supervisor_actor supervisor,
                           std::shared_ptr<output_writer> writer) {
  self->set_default_handler(sv::log_and_drop_unexpected);
  self->monitor(supervisor);
  self->set_down_handler([self, writer](caf::down_msg& dm) {
    fail_all(self, *writer,
             dm.reason ? dm.reason
                       : caf::make_error(caf::sec::request_receiver_down));
  });
  return {
    [=](uint64_t line, verification_request& req) {
      auto& st = self->state;
      auto timeout = reply_timeout(req);
      auto deadline = st.deadlines.emplace(self->clock().now() + timeout, line);
      st.by_id[req.id].push_back(line);
      st.pending.emplace(line,
                         driver_state::pending_line{req.id, timeout, deadline});
      if (!st.sweeping) {
        st.sweeping = true;
        self->delayed_send(self, sweep_interval, sweep_atom::value);
      }
      self->send(supervisor, verify_atom::value, std::move(req));
    },
    [=](verification_outcome& outcome) {
      auto& st = self->state;
      auto i = st.by_id.find(outcome.id);
      if (i == st.by_id.end())
        return; // its line was already failed by the sweep
      auto line = i->second.front();
      forget(self, line, false);
      batch_entry entry;
      entry.line = line;
      entry.outcome = std::move(outcome);
      writer->push(std::move(entry));
    },
    [=](sweep_atom) { sweep(self, *writer); },
  };
}

} // namespace

caf::actor spawn_batch_driver(caf::actor_system& sys,
                              supervisor_actor supervisor,
                              std::shared_ptr<output_writer> writer) {
  return sys.spawn(batch_driver, std::move(supervisor), std::move(writer));
}

} // namespace sv::grade
