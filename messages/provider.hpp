#pragma once

// The provider-neutral sandbox API. Every backend (local processes, a remote
// HTTP node, a CAF node, a scripted fake) speaks exactly this interface, so
// the verification actor never knows which one it drives.

#include "messages/atoms.hpp"
#include "messages/protocol.hpp"

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

namespace sv {

using provider_actor = caf::typed_actor<
  // Builds a fresh sandbox; it may still be starting when this replies.
  caf::replies_to<create_atom, sandbox_spec>::with<sandbox_handle>,
  // Reports whether the sandbox is running yet.
  caf::replies_to<status_atom, sandbox_handle>::with<sandbox_status>,
  // Writes files (paths relative to the directory) into a sandbox directory.
  caf::replies_to<upload_atom, sandbox_handle, std::string,
                  file_map>::with<ok_atom>,
  // Runs a command to its end, its deadline or the sandbox's failure.
  caf::replies_to<exec_atom, sandbox_handle, exec_request>::with<exec_result>,
  // Reads one regular file of the sandbox.
  caf::replies_to<download_atom, sandbox_handle,
                  std::string>::with<std::string>,
  // Kills everything the sandbox runs and removes it.
  caf::replies_to<stop_atom, sandbox_handle>::with<ok_atom>>;

using supervisor_actor = caf::typed_actor<
  // Grades one submission; exactly one terminal reply.
  caf::replies_to<verify_atom,
                  verification_request>::with<verification_outcome>,
  // Counters so far.
  caf::replies_to<stats_atom>::with<supervisor_stats>,
  // Cancels the submissions with this id: a queued one is answered
  // killed at once; a running one's actor is stopped, and its sandbox is
  // stopped like a crashed verification's.
  caf::reacts_to<cancel_atom, std::string>>;

} // namespace sv
