#pragma once
// What every actor of the project does with a message it has no handler for:
// log it through spdlog (stderr, never stdout: sv-grade's data stream) and
// drop it. CAF's default, print_and_drop, writes through aout to stdout and
// answers the sender with an unexpected_message error, which kills a
// requester that did not expect it.

#include <caf/fwd.hpp>
#include <caf/result.hpp>

namespace sv {

// The default handler to install with set_default_handler(). It logs at
// debug level (stale timers and late replies are normal), at most 200
// characters of the message, and drops it without answering.
caf::result<caf::message> log_and_drop_unexpected(caf::scheduled_actor* self,
                                                  caf::message_view& msg);

} // namespace sv
