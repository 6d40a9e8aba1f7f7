#pragma once

// Our message-level tests use the public test kit (testing/deterministic.hpp),
// the same one users get as sandbox_verification::testing.

#include "testing/deterministic.hpp"

namespace sv::test {

using sv::testing::quiet_logs;
using deterministic_config = sv::testing::deterministic_config;
using deterministic_fixture = sv::testing::deterministic_system;

} // namespace sv::test
