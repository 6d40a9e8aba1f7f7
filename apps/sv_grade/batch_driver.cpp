#include "apps/sv_grade/batch_driver.hpp"

#include "apps/sv_grade/batch_line.hpp"
#include "apps/sv_grade/output_writer.hpp"
#include "messages/errors.hpp"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/sec.hpp>

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

caf::behavior batch_driver(caf::event_based_actor* self,
                           supervisor_actor supervisor,
                           std::shared_ptr<output_writer> writer) {
  return {
    [=](uint64_t line, verification_request& req) {
      auto timeout = reply_timeout(req);
      auto id = req.id;
      self->request(supervisor, timeout, verify_atom::value, std::move(req))
        .then(
          [=](verification_outcome& outcome) {
            batch_entry entry;
            entry.line = line;
            entry.outcome = std::move(outcome);
            writer->push(std::move(entry));
          },
          [=](caf::error& err) mutable {
            writer->push(lost_reply(std::move(id), line, err, timeout));
          });
    },
  };
}

} // namespace

caf::actor spawn_batch_driver(caf::actor_system& sys,
                              supervisor_actor supervisor,
                              std::shared_ptr<output_writer> writer) {
  return sys.spawn(batch_driver, std::move(supervisor), std::move(writer));
}

} // namespace sv::grade
