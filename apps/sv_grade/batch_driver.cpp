#include "apps/sv_grade/batch_driver.hpp"

#include "apps/sv_grade/batch_line.hpp"
#include "apps/sv_grade/output_writer.hpp"
#include "messages/errors.hpp"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/sec.hpp>
#include <caf/stateful_actor.hpp>
#include <map>
#include <optional>
#include <unordered_map>

namespace sv::grade {

namespace {

/// The line of a request the supervisor never answered.
batch_entry lost_reply(std::string id, uint64_t line, const caf::error& err,
                       std::chrono::milliseconds timeout) {
  batch_entry entry;
  entry.line = line;
  if (err == caf::sec::request_timeout) {
    auto s = std::to_string(timeout.count() / 1000);
    entry.outcome =
      make_failed_outcome(std::move(id), failure_kind::verifier_error,
                          verification_state::queue, failure_cause::timeout,
                          "the supervisor did not answer within " + s + " s");
  } else {
    entry.outcome = make_failed_outcome(
      std::move(id), failure_kind::verifier_error, verification_state::queue,
      failure_cause::crash, "the supervisor failed: " + describe(err));
  }
  return entry;
}

using sweep_atom = caf::atom_constant<caf::atom("sweep")>;

/// How often the driver looks for replies past their deadline.
constexpr auto sweep_interval = std::chrono::seconds{1};

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
  /// Their deadlines, earliest first.
  std::multimap<time_point, uint64_t> deadlines;
  bool sweeping = false;
};

using driver_ptr = caf::stateful_actor<driver_state>*;

/// Fails every line whose reply is overdue. One periodic sweep instead of a
/// timeout per request: CAF 0.17 cancels a request's timeout only when the
/// requesting actor ends, and this actor lives for the whole batch.
void sweep(driver_ptr self, std::shared_ptr<output_writer>& writer) {
  auto& st = self->state;
  auto now = self->clock().now();
  while (!st.deadlines.empty() && st.deadlines.begin()->first <= now) {
    auto line = st.deadlines.begin()->second;
    st.deadlines.erase(st.deadlines.begin());
    auto i = st.pending.find(line);
    writer->push(lost_reply(std::move(i->second.id), line,
                            caf::make_error(caf::sec::request_timeout),
                            i->second.timeout));
    st.pending.erase(i);
  }
  st.sweeping = !st.pending.empty();
  if (st.sweeping)
    self->delayed_send(self, sweep_interval, sweep_atom::value);
}

caf::behavior batch_driver(driver_ptr self, supervisor_actor supervisor,
                           std::shared_ptr<output_writer> writer) {
  return {
    [=](uint64_t line, verification_request& req) mutable {
      auto& st = self->state;
      auto timeout = reply_timeout(req);
      auto deadline = st.deadlines.emplace(self->clock().now() + timeout, line);
      st.pending.emplace(line,
                         driver_state::pending_line{req.id, timeout, deadline});
      if (!st.sweeping) {
        st.sweeping = true;
        self->delayed_send(self, sweep_interval, sweep_atom::value);
      }
      // Which line a reply belongs to; a reply after the sweep failed the
      // line is dropped (the line already has its one output).
      auto take = [self](uint64_t line) -> std::optional<std::string> {
        auto& st = self->state;
        auto i = st.pending.find(line);
        if (i == st.pending.end())
          return std::nullopt;
        auto id = std::move(i->second.id);
        st.deadlines.erase(i->second.deadline);
        st.pending.erase(i);
        return id;
      };
      self
        ->request(supervisor, caf::infinite, verify_atom::value, std::move(req))
        .then(
          [=](verification_outcome& outcome) {
            if (!take(line))
              return;
            batch_entry entry;
            entry.line = line;
            entry.outcome = std::move(outcome);
            writer->push(std::move(entry));
          },
          [=](caf::error& err) mutable {
            if (auto id = take(line))
              writer->push(lost_reply(std::move(*id), line, err, timeout));
          });
    },
    [=](sweep_atom) mutable { sweep(self, writer); },
  };
}

} // namespace

caf::actor spawn_batch_driver(caf::actor_system& sys,
                              supervisor_actor supervisor,
                              std::shared_ptr<output_writer> writer) {
  return sys.spawn(batch_driver, std::move(supervisor), std::move(writer));
}

} // namespace sv::grade
