#pragma once

// The test kit, part 2: scripting the faults of the scripted provider
// (providers/scripted.hpp), call by call. A script says, per operation of
// the provider interface (create, status, upload, exec, download, stop),
// what its 1st, 2nd, ... call does: answer (`ok`), fail with a provider
// error (`error`), never answer (`hang`), kill the provider (`crash`),
// answer late (`delay`) or answer nonsense (`garbage`). Calls beyond the
// script answer `ok`.
//
//   using sv::scripted_op;
//   auto script = sv::testing::faults{}
//                   .then(scripted_op::create, sv::scripted_fault::error)
//                   .always(scripted_op::exec, sv::scripted_fault::hang)
//                   .result(R"({"reward": 0.5})");
//
// A script converts to `sv::scripted_script` wherever one is expected.

#include "providers/scripted.hpp"

#include <caf/timespan.hpp>
#include <string>

namespace sv::testing {

class faults {
public:
  /// The next call of `op` (after those already scripted for it) gets
  /// `fault`; `delay` is how late a `delay` fault answers.
  faults& then(scripted_op op, scripted_fault fault,
               caf::timespan delay = caf::timespan{0});

  /// The next `n` calls of `op` get `fault`.
  faults& times(scripted_op op, size_t n, scripted_fault fault,
                caf::timespan delay = caf::timespan{0});

  /// From the next call of `op` on, every call on the same sandbox (for
  /// create: on this provider) gets `fault`.
  faults& always(scripted_op op, scripted_fault fault,
                 caf::timespan delay = caf::timespan{0});

  /// The next call of `op` answers correctly, `delay` late.
  faults& late(scripted_op op, caf::timespan delay) {
    return then(op, scripted_fault::delay, delay);
  }

  /// What a correct download returns (the text of `result.json`).
  faults& result(std::string result_json_text);

  /// Each sandbox answers `starting` to its first `n` status polls.
  faults& starting_polls(uint32_t n);

  /// Unscripted calls get a random fault with chance `rate` (seeded).
  faults& random(double rate, uint64_t seed = 1);

  const scripted_script& script() const { return script_; }
  operator scripted_script() const { return script_; }

private:
  scripted_script script_;
};

} // namespace sv::testing
