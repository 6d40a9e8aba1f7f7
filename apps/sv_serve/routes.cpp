#include "apps/sv_serve/routes.hpp"

#include "apps/sv_serve/compat_routes.hpp"
#include "apps/sv_serve/sandbox_wire.hpp"

namespace sv::serve {

route route_of(std::string_view target) {
  auto path = target.substr(0, target.find('?'));
  if (path == "/healthz")
    return route::healthz;
  if (path == "/metrics")
    return route::metrics;
  if (path == "/v1/identity")
    return route::identity;
  if (path == "/v1/verify")
    return route::verify;
  if (path == "/v1/verify/batch")
    return route::verify_batch;
  if (is_sandbox_path(path))
    return route::sandboxes;
  if (is_compat_path(path))
    return route::compat;
  return route::not_found;
}

bool allowed(route r, std::string_view method) {
  switch (r) {
  case route::healthz:
  case route::metrics:
  case route::identity:
    return method == "GET" || method == "HEAD";
  case route::verify:
  case route::verify_batch:
    return method == "POST";
  default:
    return true;
  }
}

const char* allow_of(route r) {
  return r == route::verify || r == route::verify_batch ? "POST" : "GET";
}

bool needs_token(route r) {
  return r == route::verify || r == route::verify_batch ||
         r == route::sandboxes || r == route::compat || r == route::metrics ||
         r == route::identity;
}

} // namespace sv::serve
