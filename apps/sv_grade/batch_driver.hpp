#pragma once

// The batch driver: an event-based actor between sv-grade's reader thread
// and the supervisor. It receives `(line, verification_request)`, requests
// the supervisor with a finite timeout, and pushes the reply (or a failure
// naming what went wrong) to the output writer. It never blocks.

#include "messages/provider.hpp"

#include <caf/fwd.hpp>
#include <memory>

namespace sv::grade {

class output_writer;

/// Spawns the driver. `writer` must stay alive until the driver is gone.
caf::actor spawn_batch_driver(caf::actor_system& sys,
                              supervisor_actor supervisor,
                              std::shared_ptr<output_writer> writer);

} // namespace sv::grade
