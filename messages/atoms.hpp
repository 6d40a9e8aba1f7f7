#pragma once

// The atoms of the protocol. CAF 0.17 atoms hold at most 10 characters.

#include <caf/atom.hpp>

namespace sv {

// -- provider interface -------------------------------------------------------

using create_atom = caf::atom_constant<caf::atom("create")>;
using status_atom = caf::atom_constant<caf::atom("status")>;
using upload_atom = caf::atom_constant<caf::atom("upload")>;
using exec_atom = caf::atom_constant<caf::atom("exec")>;
using download_atom = caf::atom_constant<caf::atom("download")>;
using stop_atom = caf::atom_constant<caf::atom("stop")>;
using ok_atom = caf::atom_constant<caf::atom("ok")>;

// -- supervisor interface -----------------------------------------------------

using verify_atom = caf::atom_constant<caf::atom("verify")>;
using stats_atom = caf::atom_constant<caf::atom("stats")>;
using cancel_atom = caf::atom_constant<caf::atom("cancel")>;

} // namespace sv
