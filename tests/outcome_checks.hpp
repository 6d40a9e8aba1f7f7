#pragma once

// Exact checks of a verification's terminal reply, shared by the tests.

#include "messages/protocol.hpp"

#include <catch2/catch.hpp>

namespace sv::test {

/// The reply is a failure of exactly this kind, state and cause.
inline void check_failure(const verification_outcome& out, failure_kind kind,
                          verification_state state, failure_cause cause) {
  INFO("message: " << out.failure.message);
  CHECK_FALSE(out.ok);
  CHECK(to_string(out.failure.kind) == to_string(kind));
  CHECK(to_string(out.failure.state) == to_string(state));
  CHECK(to_string(out.failure.cause) == to_string(cause));
}

} // namespace sv::test
