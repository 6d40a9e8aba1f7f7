// The fault matrix: every state (create, ready, upload, exec, download,
// stop) times every fault (error, hang, crash, delay past the deadline,
// garbage), one named test case per cell, on the deterministic scheduler.
// Each cell asserts the exact terminal reply, the exact moment it comes,
// that stop reached every sandbox create returned exactly once (and no
// other), that the verification actor is gone, and that the supervisor
// grades the next submission normally.

#include "grading_fixture.hpp"

using namespace sv;
using namespace sv::test;

namespace {

/// What one cell must produce. The stop runs after the reply (the
/// supervisor's default), so a stop fault never delays the reply.
struct cell {
  scripted_op op;
  scripted_fault fault;
  /// An ok outcome (stop faults keep the outcome before the stop).
  bool ok;
  failure_kind kind;
  verification_state state;
  failure_cause cause;
  /// When the reply comes, counted from the submission (0: at once).
  caf::timespan at;
  /// Whether the provider created a sandbox (in time or late).
  bool creates;
};

/// The deadline the verification puts on a call of `op` (make_request's
/// settings: ready 10 s, upload 20 s, exec 30 + 5 s, download 40 s, stop
/// 50 s; create and ready share the ready deadline).
caf::timespan deadline_of(scripted_op op) {
  switch (op) {
  case scripted_op::create:
  case scripted_op::status:
    return 10s;
  case scripted_op::upload:
    return 20s;
  case scripted_op::exec:
    return 35s;
  case scripted_op::download:
    return 40s;
  case scripted_op::stop:
    return 50s;
  }
  return 0s;
}

struct matrix_fixture : grading_fixture {
  void run_cell(const cell& c) {
    scripted_step step{c.fault};
    if (c.fault == scripted_fault::delay)
      step.delay = deadline_of(c.op) + 1s; // one second too late
    // Status is polled: an unknown status must stay unknown for this sandbox.
    step.sticky = c.op == scripted_op::status;
    scripted_script script;
    script.steps[c.op] = {step};
    start(std::move(script), restarting());
    auto baseline = sys.registry().running();
    submit();

    auto out = c.at > 0s ? reply_exactly_at(c.at) : reply_now();
    if (c.ok) {
      INFO("failure: " << out.failure.message);
      CHECK(out.ok);
      CHECK(out.result == json{{"reward", 1.0}});
    } else {
      check_failure(out, c.kind, c.state, c.cause);
      CHECK(out.result.is_null());
    }
    // Past every late answer (and the 60 s a verification waits for a late
    // create after its 10 s deadline): still exactly one reply.
    run_for(60s);
    CHECK_FALSE(take<verification_outcome>().has_value());

    // Stop reached every created sandbox exactly once, and nothing else.
    CHECK(ledger->creates() == (c.creates ? 1u : 0u));
    // A provider that crashes inside stop stopped nothing: the stop goes
    // again through the replacement, which really stops the sandbox.
    auto crash_in_stop =
      c.op == scripted_op::stop && c.fault == scripted_fault::crash;
    CHECK(ledger->stops() == (c.creates ? (crash_in_stop ? 2u : 1u) : 0u));
    CHECK(ledger->not_stopped_once().empty());
    CHECK(ledger->repeated_stops() == 0);
    auto s = stats();
    CHECK(s.sandboxes_created == (c.creates ? 1u : 0u));
    CHECK(s.provider_restarts == (c.fault == scripted_fault::crash ? 1u : 0u));
    if (c.op == scripted_op::stop)
      CHECK(s.stop_failures == (crash_in_stop ? 0u : 1u));
    // Every verification that reached stop replied first and stopped
    // behind its reply; none is left stopping.
    auto reached_stop =
      c.creates && c.op != scripted_op::create &&
      (c.fault != scripted_fault::crash || c.op == scripted_op::stop);
    CHECK(s.stops_after_reply == (reached_stop ? 1u : 0u));
    CHECK(s.stopping == 0);
    CHECK(s.in_flight == 0);
    CHECK(s.creating == 0); // a late create released its slot when it came

    // The verification actor is gone (a crashed provider was replaced).
    CHECK(sys.registry().running() == baseline);

    // The next submission is graded normally.
    submit(make_request("next"));
    auto next = reply_now();
    INFO("next: " << next.failure.message);
    CHECK(next.ok);
    CHECK(next.id == "next");
    CHECK(ledger->not_stopped_once().empty());
  }
};

constexpr auto pu = failure_kind::provider_unavailable;
constexpr auto ve = failure_kind::verifier_error;
using op = scripted_op;
using fault = scripted_fault;
using state = verification_state;
using cause = failure_cause;

} // namespace

#define MATRIX_CELL(name, ...)                                                 \
  TEST_CASE_METHOD(matrix_fixture, name, "[matrix]") {                         \
    run_cell(cell{__VA_ARGS__});                                               \
  }

// clang-format off
MATRIX_CELL("create error",   op::create, fault::error,   false, pu, state::create, cause::error,     0s,  false)
MATRIX_CELL("create hang",    op::create, fault::hang,    false, pu, state::create, cause::timeout,   10s, false)
MATRIX_CELL("create crash",   op::create, fault::crash,   false, pu, state::create, cause::node_down, 0s,  false)
MATRIX_CELL("create delay",   op::create, fault::delay,   false, pu, state::create, cause::timeout,   10s, true)
MATRIX_CELL("create garbage", op::create, fault::garbage, false, pu, state::create, cause::error,     0s,  false)

MATRIX_CELL("ready error",    op::status, fault::error,   false, pu, state::ready, cause::error,      0s,  true)
MATRIX_CELL("ready hang",     op::status, fault::hang,    false, pu, state::ready, cause::timeout,    10s, true)
MATRIX_CELL("ready crash",    op::status, fault::crash,   false, pu, state::ready, cause::node_down,  0s,  true)
MATRIX_CELL("ready delay",    op::status, fault::delay,   false, pu, state::ready, cause::timeout,    10s, true)
MATRIX_CELL("ready garbage",  op::status, fault::garbage, false, pu, state::ready, cause::timeout,    10s, true)

MATRIX_CELL("upload error",   op::upload, fault::error,   false, pu, state::upload, cause::error,     0s,  true)
MATRIX_CELL("upload hang",    op::upload, fault::hang,    false, pu, state::upload, cause::timeout,   20s, true)
MATRIX_CELL("upload crash",   op::upload, fault::crash,   false, pu, state::upload, cause::node_down, 0s,  true)
MATRIX_CELL("upload delay",   op::upload, fault::delay,   false, pu, state::upload, cause::timeout,   20s, true)
MATRIX_CELL("upload garbage", op::upload, fault::garbage, false, pu, state::upload, cause::error,     0s,  true)

MATRIX_CELL("exec error",     op::exec, fault::error,     false, pu, state::exec, cause::error,       0s,  true)
MATRIX_CELL("exec hang",      op::exec, fault::hang,      false, pu, state::exec, cause::timeout,     35s, true)
MATRIX_CELL("exec crash",     op::exec, fault::crash,     false, pu, state::exec, cause::node_down,   0s,  true)
MATRIX_CELL("exec delay",     op::exec, fault::delay,     false, pu, state::exec, cause::timeout,     35s, true)
MATRIX_CELL("exec garbage",   op::exec, fault::garbage,   false, pu, state::exec, cause::error,       0s,  true)

MATRIX_CELL("download error",   op::download, fault::error,   false, pu, state::download, cause::error,          0s,  true)
MATRIX_CELL("download hang",    op::download, fault::hang,    false, pu, state::download, cause::timeout,        40s, true)
MATRIX_CELL("download crash",   op::download, fault::crash,   false, pu, state::download, cause::node_down,      0s,  true)
MATRIX_CELL("download delay",   op::download, fault::delay,   false, pu, state::download, cause::timeout,        40s, true)
MATRIX_CELL("download garbage", op::download, fault::garbage, false, ve, state::parse,    cause::invalid_result, 0s,  true)

MATRIX_CELL("stop error",     op::stop, fault::error,     true, pu, state::stop, cause::error, 0s,  true)
MATRIX_CELL("stop hang",      op::stop, fault::hang,      true, pu, state::stop, cause::error, 0s,  true)
MATRIX_CELL("stop crash",     op::stop, fault::crash,     true, pu, state::stop, cause::error, 0s,  true)
MATRIX_CELL("stop delay",     op::stop, fault::delay,     true, pu, state::stop, cause::error, 0s,  true)
MATRIX_CELL("stop garbage",   op::stop, fault::garbage,   true, pu, state::stop, cause::error, 0s,  true)
// clang-format on
