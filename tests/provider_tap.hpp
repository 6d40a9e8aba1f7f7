#pragma once

// A provider that stands in front of another one and writes down who asked
// what, in order, then delegates (the reply goes straight to the asker). It
// can also die the way a provider does under load: with a request still in
// its mailbox, which bounces (request_receiver_down) to its sender before
// the provider's down_msg reaches its monitors. (Peeking into a mailbox
// from a test instead trips UBSan inside CAF's queue.)

#include "messages/provider.hpp"

#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <memory>
#include <string>
#include <vector>

namespace sv::test {

struct tap_log {
  /// The operations asked, in order ("create", "status", ...).
  std::vector<std::string> ops;
  /// Who asked each.
  std::vector<caf::actor> senders;
  /// When set, the tap dies on this operation, leaving it in its mailbox.
  std::string die_on;
};

struct tap_state {
  static inline const char* name = "sv.test.provider_tap";
};

using tap_pointer = provider_actor::stateful_pointer<tap_state>;

inline provider_actor::behavior_type
provider_tap(tap_pointer self, provider_actor inner,
             std::shared_ptr<tap_log> log) {
  // Returns whom to delegate to: the inner provider, or (to die with the
  // request in the mailbox) this tap itself, which quits at once.
  auto route = [=](const char* op) {
    log->ops.emplace_back(op);
    log->senders.push_back(caf::actor_cast<caf::actor>(self->current_sender()));
    if (log->die_on == op) {
      self->quit(caf::exit_reason::kill);
      return caf::actor_cast<provider_actor>(self);
    }
    return inner;
  };
  return {
    [=](create_atom a, sandbox_spec& spec) {
      return self->delegate(route("create"), a, std::move(spec));
    },
    [=](status_atom a, sandbox_handle& h) {
      return self->delegate(route("status"), a, std::move(h));
    },
    [=](upload_atom a, sandbox_handle& h, std::string& dir, file_map& files) {
      return self->delegate(route("upload"), a, std::move(h), std::move(dir),
                            std::move(files));
    },
    [=](exec_atom a, sandbox_handle& h, exec_request& req) {
      return self->delegate(route("exec"), a, std::move(h), std::move(req));
    },
    [=](download_atom a, sandbox_handle& h, std::string& path) {
      return self->delegate(route("download"), a, std::move(h),
                            std::move(path));
    },
    [=](stop_atom a, sandbox_handle& h) {
      return self->delegate(route("stop"), a, std::move(h));
    },
  };
}

} // namespace sv::test
