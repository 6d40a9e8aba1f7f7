// A verification against a fake provider whose replies cross a wire (CAF's
// binary serializer and back, as between nodes) and carry enum values that
// name no enumerator: each ends as a typed provider failure, never as a
// verification with nothing pending.

#include "actors/supervisor.hpp"
#include "deterministic_fixture.hpp"
#include "grading_fixture.hpp"
#include "messages/atoms.hpp"
#include "messages/provider.hpp"

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <catch2/catch.hpp>

using namespace sv;
using namespace std::chrono_literals;

namespace {

/// `x` as the other side of a wire would load it (a load failure would
/// drop the message: then the requester's deadline answers).
template <class T>
T over_the_wire(caf::actor_system& sys, T x) {
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  if (auto err = sink(x))
    throw std::runtime_error("serialization failed");
  T y{};
  caf::binary_deserializer source{sys, buf};
  if (auto err = source(y))
    throw std::runtime_error("deserialization failed");
  return y;
}

struct wire_script {
  uint8_t status = static_cast<uint8_t>(sandbox_status::running);
  uint8_t error_type = static_cast<uint8_t>(exec_error_type::none);
  /// Whether exec results cross the wire (else: as an in-process provider
  /// hands them over, raw value and all).
  bool exec_over_wire = true;
};

/// A provider that answers everything at once, its status and exec results
/// through the wire with the scripted raw enum values.
provider_actor::behavior_type wire_provider(provider_actor::pointer self,
                                            wire_script script) {
  return {
    [](create_atom, sandbox_spec&) {
      return sandbox_handle{"sb-wire", "wire", ""};
    },
    [=](status_atom, sandbox_handle&) {
      return over_the_wire(self->system(),
                           static_cast<sandbox_status>(script.status));
    },
    [](upload_atom, sandbox_handle&, std::string&, file_map&) {
      return ok_atom::value;
    },
    [=](exec_atom, sandbox_handle&, exec_request&) {
      exec_result res;
      res.error_type = static_cast<exec_error_type>(script.error_type);
      if (!script.exec_over_wire)
        return res;
      return over_the_wire(self->system(), res);
    },
    [](download_atom, sandbox_handle&, std::string&) {
      return std::string{R"({"reward": 1.0})"};
    },
    [](stop_atom, sandbox_handle&) { return ok_atom::value; },
  };
}

struct fixture : test::deterministic_fixture {
  verification_outcome grade(wire_script script) {
    auto provider = keep(sys.spawn(wire_provider, script));
    auto supervisor = keep(spawn_supervisor(sys, provider, {}));
    client->send(supervisor, verify_atom::value, test::make_request());
    run();
    auto out = take<verification_outcome>();
    REQUIRE(out.has_value());
    return *out;
  }
};

} // namespace

TEST_CASE_METHOD(fixture, "control: through the wire with known values, "
                          "the verification succeeds") {
  auto out = grade({});
  CHECK(out.ok);
}

TEST_CASE_METHOD(fixture, "an exec error_type of 42 off the wire is a "
                          "provider failure of exec, at once") {
  auto out = grade({static_cast<uint8_t>(sandbox_status::running), 42});
  test::check_failure(out, failure_kind::provider_unavailable,
                      verification_state::exec, failure_cause::error);
  CHECK_THAT(out.failure.message,
             Catch::Contains("unknown exec error_type 42"));
}

TEST_CASE_METHOD(fixture, "an exec error_type of 42 from an in-process "
                          "provider is a provider failure of exec, at once") {
  auto out = grade({static_cast<uint8_t>(sandbox_status::running), 42, false});
  test::check_failure(out, failure_kind::provider_unavailable,
                      verification_state::exec, failure_cause::error);
  CHECK_THAT(out.failure.message,
             Catch::Contains("unknown exec error_type 42"));
}

TEST_CASE_METHOD(fixture, "a sandbox status of 42 off the wire is a "
                          "provider failure of ready, at once") {
  auto out = grade({42, 0});
  test::check_failure(out, failure_kind::provider_unavailable,
                      verification_state::ready, failure_cause::error);
}
