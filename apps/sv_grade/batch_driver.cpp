#include "apps/sv_grade/batch_driver.hpp"

#include "actors/detail/quiet.hpp"
#include "apps/sv_grade/batch_line.hpp"
#include "apps/sv_grade/output_writer.hpp"
#include "messages/detail/private_id.hpp"
#include "messages/errors.hpp"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/sec.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>
#include <charconv>
#include <map>
#include <optional>
#include <string_view>
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
// O(N) per reply. A reply is matched by a private id, never by the line's
// own: lines that share an id (two completions of one task, the normal case
// in GRPO) each get their own result. The private id is the line's id with
// "#L<line>" appended (unique, since the line number is; still readable in
// the supervisor's logs), and the reply gets the line's id back.
struct driver_state {
  static inline const char* name = "sv.batch_driver";

  using time_point = caf::actor_clock::time_point;

  struct pending_line {
    std::string id; // the line's own
    std::chrono::milliseconds timeout;
    std::multimap<time_point, uint64_t>::iterator deadline;
  };

  /// Lines waiting for the supervisor, by line number.
  std::unordered_map<uint64_t, pending_line> pending;
  /// Their deadlines, earliest first.
  std::multimap<time_point, uint64_t> deadlines;
  bool sweeping = false;
};

constexpr std::string_view line_tag = "#L";

std::string private_id(const std::string& id, uint64_t line) {
  return tag_private_id(id, line_tag, line);
}

/// The line number a private id names; nullopt for one that is not ours.
std::optional<uint64_t> line_of(const std::string& id) {
  return private_id_number(id, line_tag);
}

using driver_ptr = caf::stateful_actor<driver_state>*;

/// Forgets a pending line; returns its id.
std::string forget(driver_ptr self, uint64_t line, bool keep_deadline) {
  auto& st = self->state;
  auto i = st.pending.find(line);
  auto id = std::move(i->second.id);
  if (!keep_deadline)
    st.deadlines.erase(i->second.deadline);
  st.pending.erase(i);
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
      auto own = private_id(req.id, line);
      st.pending.emplace(
        line, driver_state::pending_line{std::move(req.id), timeout, deadline});
      req.id = std::move(own);
      if (!st.sweeping) {
        st.sweeping = true;
        self->delayed_send(self, sweep_interval, sweep_atom::value);
      }
      self->send(supervisor, verify_atom::value, std::move(req));
    },
    [=](verification_outcome& outcome) {
      auto line = line_of(outcome.id);
      if (!line || self->state.pending.count(*line) == 0)
        return; // its line was already failed by the sweep
      batch_entry entry;
      entry.line = *line;
      outcome.id = forget(self, *line, false);
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
