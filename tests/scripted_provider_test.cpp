// The scripted provider on its own, on the deterministic scheduler: its
// world outlives its actors, it refuses ids it never made, it counts what
// it really did, and it crashes, delays and polls as scripted.

#include "deterministic_fixture.hpp"
#include "messages/atoms.hpp"
#include "messages/errors.hpp"
#include "messages/json.hpp"
#include "providers/factory.hpp"
#include "providers/scripted.hpp"

#include <caf/actor_system.hpp>
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <unistd.h>

using namespace sv;
using namespace std::chrono_literals;

namespace {

struct fixture : test::deterministic_fixture {
  std::shared_ptr<scripted_world> world = std::make_shared<scripted_world>();
  const sandbox_spec spec{}; // sent by copy (a temporary trips g++ 12's
                             // maybe-uninitialized at -O2)

  provider_actor spawn(scripted_script script = {}) {
    return keep(spawn_scripted_provider(sys, std::move(script), world));
  }

  sandbox_handle create(const provider_actor& p) {
    client->send(p, create_atom::value, spec);
    run();
    auto h = take<sandbox_handle>();
    REQUIRE(h.has_value());
    return *h;
  }

  /// Sends `xs` to `p`, runs, and returns the error it answered (none when
  /// it answered something else or nothing).
  template <class... Ts>
  caf::error error_of(const provider_actor& p, Ts&&... xs) {
    client->send(p, std::forward<Ts>(xs)...);
    run();
    auto err = take<caf::error>();
    return err ? *err : caf::error{};
  }

  /// True when `p` answers `stop` with ok.
  bool stop(const provider_actor& p, const sandbox_handle& h) {
    client->send(p, stop_atom::value, h);
    run();
    return take<ok_atom>().has_value();
  }

  caf::down_msg await_down(const provider_actor& p) {
    client->monitor(p);
    run();
    auto dm = take<caf::down_msg>();
    REQUIRE(dm.has_value());
    return *dm;
  }
};

scripted_script with_step(scripted_op op, std::vector<scripted_step> steps) {
  scripted_script script;
  script.steps[op] = std::move(steps);
  return script;
}

uint8_t code_of(const caf::error& err) {
  return provider_error_code(err);
}

constexpr auto no_such = static_cast<uint8_t>(provider_errc::no_such_sandbox);

} // namespace

// -- the world ----------------------------------------------------------------

TEST_CASE_METHOD(fixture, "a replacement stops its crashed predecessor's "
                          "sandbox exactly once") {
  auto first = spawn(
    with_step(scripted_op::upload, {scripted_step{scripted_fault::crash}}));
  auto h = create(first);
  client->send(first, upload_atom::value, h, std::string{"d"}, file_map{});
  auto dm = await_down(first);
  CHECK(dm.reason != caf::exit_reason::normal);
  CHECK(code_of(dm.reason) == static_cast<uint8_t>(provider_errc::unavailable));
  CHECK(world->live() == 1);
  auto second = spawn();
  CHECK(stop(second, h));
  CHECK(world->creates() == 1);
  CHECK(world->stopped() == 1);
  CHECK(world->live() == 0);
  CHECK(world->not_stopped_once().empty());
  CHECK(world->actors_spawned() == 2);
  CHECK(world->crashes() == 1);
}

TEST_CASE_METHOD(fixture, "a provider in another world does not know the "
                          "sandbox: no_such_sandbox") {
  auto h = create(spawn());
  auto other = keep(spawn_scripted_provider(sys, {}, nullptr));
  CHECK(code_of(error_of(other, stop_atom::value, h)) == no_such);
  CHECK(world->live() == 1);
}

TEST_CASE_METHOD(fixture, "stop of an id never created is no_such_sandbox "
                          "and counted") {
  auto p = spawn();
  sandbox_handle ghost{"sb-404", "scripted", ""};
  CHECK(code_of(error_of(p, stop_atom::value, ghost)) == no_such);
  CHECK(world->unknown_stops() == 1);
  CHECK(world->stops() == 1);
  CHECK(world->stopped() == 0);
}

TEST_CASE_METHOD(fixture, "a second stop is idempotent and counted as "
                          "repeated") {
  auto p = spawn();
  auto h = create(p);
  CHECK(stop(p, h));
  CHECK(stop(p, h));
  CHECK(world->stopped() == 1);
  CHECK(world->repeated_stops() == 1);
  CHECK(world->stops_of(h.sandbox_id) == 2);
  CHECK(world->not_stopped_once() == std::vector<std::string>{h.sandbox_id});
}

TEST_CASE_METHOD(fixture, "a stopped sandbox takes no more work, its status "
                          "is stopped") {
  auto p = spawn();
  auto h = create(p);
  REQUIRE(stop(p, h));
  CHECK(code_of(error_of(p, upload_atom::value, h, std::string{"d"},
                         file_map{})) == no_such);
  CHECK(code_of(error_of(p, exec_atom::value, h, exec_request{})) == no_such);
  CHECK(code_of(error_of(p, download_atom::value, h, std::string{"f"})) ==
        no_such);
  client->send(p, status_atom::value, h);
  run();
  CHECK(take<sandbox_status>() == sandbox_status::stopped);
  sandbox_handle ghost{"sb-9", "scripted", ""};
  CHECK(code_of(error_of(p, status_atom::value, ghost)) == no_such);
}

TEST_CASE_METHOD(fixture, "a stop's faults are faults of its answer, a "
                          "crashing stop stops nothing") {
  auto p =
    spawn(with_step(scripted_op::stop, {scripted_step{scripted_fault::error},
                                        scripted_step{scripted_fault::hang},
                                        scripted_step{scripted_fault::crash}}));
  auto a = create(p);
  auto b = create(p);
  auto c = create(p);
  CHECK(code_of(error_of(p, stop_atom::value, a)) ==
        static_cast<uint8_t>(provider_errc::sandbox_error));
  CHECK_FALSE(stop(p, b)); // hangs, but carried out
  client->send(p, stop_atom::value, c);
  await_down(p);
  CHECK(world->stops() == 3);
  CHECK(world->stopped() == 2);
  CHECK(world->is_live(c.sandbox_id));
  CHECK(world->not_stopped_once() == std::vector<std::string>{c.sandbox_id});
}

// -- creates in flight and crashes --------------------------------------------

TEST_CASE_METHOD(fixture, "delayed creates are in flight until answered: "
                          "peak_creating") {
  scripted_step late{scripted_fault::delay, 10ms, false};
  auto p = spawn(with_step(scripted_op::create, {late, late, late}));
  for (int i = 0; i < 3; ++i)
    client->send(p, create_atom::value, spec);
  run();
  CHECK(world->creating() == 3);
  CHECK(world->creates() == 0);
  run_for(10ms);
  CHECK(world->creating() == 0);
  CHECK(world->peak_creating() == 3);
  CHECK(world->creates() == 3);
  for (int i = 0; i < 3; ++i)
    CHECK(take<sandbox_handle>().has_value());
}

TEST_CASE_METHOD(fixture, "a crash ends the creates in flight with the "
                          "provider") {
  auto p = spawn(with_step(scripted_op::create,
                           {scripted_step{scripted_fault::delay, 10ms, false},
                            scripted_step{scripted_fault::crash}}));
  client->send(p, create_atom::value, spec);
  run();
  CHECK(world->creating() == 1);
  client->send(p, create_atom::value, spec);
  auto dm = await_down(p);
  CHECK(dm.reason != caf::exit_reason::normal);
  run_for(10ms);
  CHECK_FALSE(take<sandbox_handle>().has_value());
  CHECK(world->creating() == 0);
  CHECK(world->creates() == 0);
  CHECK(world->crashes() == 1);
  CHECK(world->actors_live() == 0);
}

TEST_CASE_METHOD(fixture, "crash_rate 1 kills the provider at its first "
                          "call, unanswered") {
  scripted_script script;
  script.crash_rate = 1;
  auto p = spawn(script);
  client->send(p, create_atom::value, spec);
  auto dm = await_down(p);
  CHECK(code_of(dm.reason) == static_cast<uint8_t>(provider_errc::unavailable));
  CHECK_FALSE(take<sandbox_handle>().has_value());
  CHECK(world->faults(scripted_fault::crash) == 1);
  CHECK(world->calls(scripted_op::create) == 1);
}

TEST_CASE_METHOD(fixture, "a replacement does not replay its predecessor's "
                          "random faults") {
  scripted_script script;
  script.fault_rate = 0.5;
  script.random_faults = {scripted_fault::error};
  auto answers = [&](const provider_actor& p) {
    std::string out;
    for (int i = 0; i < 64; ++i) {
      client->send(p, create_atom::value, spec);
      run();
      out += take<sandbox_handle>().has_value() ? 'o' : 'e';
      take<caf::error>();
    }
    return out;
  };
  auto first = answers(spawn(script));
  auto second = answers(spawn(script));
  CHECK(first.find('e') != std::string::npos);
  CHECK(first != second);
}

// -- status polls -------------------------------------------------------------

TEST_CASE_METHOD(fixture, "starting_polls: status answers starting that many "
                          "times, then running") {
  scripted_script script;
  script.starting_polls = 2;
  auto p = spawn(script);
  auto h = create(p);
  CHECK(world->peak_starting() == 1);
  std::vector<sandbox_status> seen;
  for (int i = 0; i < 4; ++i) {
    client->send(p, status_atom::value, h);
    run();
    auto s = take<sandbox_status>();
    REQUIRE(s.has_value());
    seen.push_back(*s);
  }
  CHECK(seen == std::vector<sandbox_status>{
                  sandbox_status::starting, sandbox_status::starting,
                  sandbox_status::running, sandbox_status::running});
}

TEST_CASE_METHOD(fixture, "a replacement continues its predecessor's "
                          "polls") {
  scripted_script script;
  script.starting_polls = 1;
  auto first = spawn(script);
  auto h = create(first);
  client->send(first, status_atom::value, h);
  run();
  CHECK(take<sandbox_status>() == sandbox_status::starting);
  caf::anon_send_exit(first, caf::exit_reason::kill);
  run();
  auto second = spawn(script);
  client->send(second, status_atom::value, h);
  run();
  CHECK(take<sandbox_status>() == sandbox_status::running);
}

// -- the actor's manners ------------------------------------------------------

TEST_CASE_METHOD(fixture, "an unexpected message is dropped unanswered and "
                          "the provider lives on") {
  auto p = spawn();
  client->send(caf::actor_cast<caf::actor>(p), std::string{"hello?"});
  run();
  CHECK_FALSE(take<caf::error>().has_value());
  CHECK(create(p).sandbox_id == "sb-0");
}

TEST_CASE_METHOD(fixture, "the ledger file's last line covers every actor "
                          "of the world") {
  char path[] = "/tmp/sv-ledger-XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  scripted_script script;
  script.ledger_file = path;
  script.steps[scripted_op::stop] = {scripted_step{scripted_fault::crash}};
  auto first = spawn(script);
  auto h = create(first);
  client->send(first, stop_atom::value, h);
  await_down(first);
  script.steps.clear();
  auto second = spawn(script);
  REQUIRE(stop(second, h));
  caf::anon_send_exit(second, caf::exit_reason::user_shutdown);
  run();
  std::ifstream in{path};
  std::string line, last;
  int lines = 0;
  while (std::getline(in, line)) {
    last = line;
    ++lines;
  }
  std::remove(path);
  CHECK(lines == 2);
  auto book = json::parse(last);
  CHECK(book["creates"] == 1);
  CHECK(book["stopped"] == 1);
  CHECK(book["live"] == 0);
  CHECK(book["stop_calls"] == 2);
  CHECK(book["actors_spawned"] == 2);
  CHECK(book["actors_live"] == 0);
  CHECK(book["crashes"] == 1);
}

// -- the factory --------------------------------------------------------------

TEST_CASE_METHOD(fixture, "providers spawned from one backend share a "
                          "world, another backend does not") {
  auto block = parse_provider_block(json{{"scripted", json::object()}});
  auto backend = prepare_provider(block);
  auto first = keep(backend->spawn(sys));
  auto h = create(first);
  auto second = keep(backend->spawn(sys)); // what sv-grade's restart spawns
  auto other = keep(prepare_provider(block)->spawn(sys));
  CHECK(code_of(error_of(other, stop_atom::value, h)) == no_such);
  CHECK(stop(second, h));
  CHECK(code_of(error_of(second, stop_atom::value,
                         sandbox_handle{"nope", "scripted", ""})) == no_such);
}

TEST_CASE("crash_rate is read and range-checked") {
  auto script = parse_scripted_script(json{{"crash_rate", 0.25}});
  CHECK(script.crash_rate == 0.25);
  CHECK_THROWS_WITH(parse_scripted_script(json{{"crash_rate", 2}}),
                    Catch::Contains("crash_rate"));
  CHECK_THROWS_WITH(parse_scripted_script(json{{"crash_rate", "often"}}),
                    Catch::Contains("crash_rate"));
}
