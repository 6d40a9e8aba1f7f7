#pragma once

// sv-serve's route table: which endpoint a request path is, which methods it
// allows and whether it needs a token. No sockets: the session (server.cpp)
// asks it from a request's header, then hands the request to the endpoint's
// router (verify_routes.hpp, sandboxes.hpp, compat_routes.hpp).

#include <string_view>

namespace sv::serve {

enum class route {
  healthz,
  metrics,
  identity,
  verify,
  verify_batch,
  sandboxes,
  compat,
  not_found,
};

/// The route of a request target (path and query).
route route_of(std::string_view target);

/// Whether `method` (as sent, e.g. "GET") is allowed on `r`; the sandbox
/// API and the compatible routes check their own methods.
bool allowed(route r, std::string_view method);

/// The Allow header of a 405 on `r`.
const char* allow_of(route r);

/// Whether `r` needs a bearer token (every route but /healthz; an open
/// compatible route is decided by compat_routes).
bool needs_token(route r);

} // namespace sv::serve
