#pragma once

// The bridge between sv-serve's Asio threads and the supervisor: one small
// event-based actor per HTTP request (a "client"). The Asio side only
// sends it messages (never waits); the client requests the supervisor with
// a finite timeout and hands every outcome to a callback, called on a CAF
// thread, which posts it back to the session's strand. Submissions get an
// id unique to the server on the way in (so a cancel reaches only this
// client's) and their own id back on the way out.

#include "messages/protocol.hpp"
#include "messages/provider.hpp"

#include <caf/actor.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>

namespace caf {
class actor_system;
} // namespace caf

namespace sv::serve {

/// Called on a CAF thread with the caller's tag and the outcome.
using outcome_callback = std::function<void(uint64_t, verification_outcome)>;

/// Spawns the client of one HTTP request.
caf::actor spawn_client(caf::actor_system& sys, supervisor_actor supervisor,
                        outcome_callback done);

/// Grades `req`; its outcome comes to the callback with `tag`.
void submit(const caf::actor& client, uint64_t tag, verification_request req);

/// The HTTP peer is gone: cancels what is outstanding (sandboxes stopped
/// by the supervisor) and ends the client; no callback follows.
void cancel_client(const caf::actor& client);

/// The request is answered: ends the client (nothing outstanding).
void end_client(const caf::actor& client);

/// Ends every client still alive (at shutdown: `~actor_system` waits for
/// them, and a client holds its session).
void end_all_clients();

/// Waits (blocking: never on a CAF thread) until every client and stats
/// request has ended; false after `timeout`.
bool wait_clients_gone(std::chrono::milliseconds timeout);

/// Asks the supervisor for its counters; `done` runs on a CAF thread with
/// them, or with nothing after 5 s.
void fetch_stats(caf::actor_system& sys, supervisor_actor supervisor,
                 std::function<void(std::optional<supervisor_stats>)> done);

} // namespace sv::serve
