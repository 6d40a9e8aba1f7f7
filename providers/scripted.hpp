#pragma once

// The scripted provider: a sandbox backend whose behaviour a test (or a
// config) scripts per operation and per call: ok, error, hang, crash,
// delay(d) or garbage. It answers everything in memory, so it is also the
// provider of the orchestration benchmarks (all `ok`).
//
// It tells the truth about its sandboxes: they live in a `scripted_world`
// that outlives any one provider actor (a replacement sees its
// predecessors' sandboxes); a call for an id the world never created, or
// one already stopped, gets `no_such_sandbox`, except a stop of a stopped
// sandbox, which is idempotent (and counted). A stop's faults are faults of
// its answer (the sandbox is gone all the same), except `crash`, which
// kills the provider before it stops anything.

#include "messages/provider.hpp"

#include <array>
#include <caf/timespan.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace caf {
class actor_system;
} // namespace caf

namespace sv {

class provider_backend;

/// The operations of the provider interface, in the order a verification
/// uses them (status is the ready state's poll).
enum class scripted_op : uint8_t {
  create,
  status,
  upload,
  exec,
  download,
  stop
};

inline constexpr size_t scripted_op_count = 6;

/// What one call does.
enum class scripted_fault : uint8_t {
  /// Answers correctly at once (create: a fresh sandbox; status: running;
  /// exec: exit 0; download: `result_text`).
  ok,
  /// Answers with a typed provider error (`provider_errc::sandbox_error`).
  error,
  /// Never answers (the call is lost; a stop is carried out all the same).
  hang,
  /// The provider actor dies while handling the call (before carrying it
  /// out: a crashing stop leaves its sandbox running).
  crash,
  /// Answers correctly after `delay`.
  delay,
  /// Answers nonsense: status `unknown`, download text the parser rejects,
  /// exec `error_type: sandbox`, and for create, upload and stop a reply of
  /// the wrong type.
  garbage,
};

std::string_view to_string(scripted_op x);
std::string_view to_string(scripted_fault x);
bool from_string(std::string_view name, scripted_op& x);
bool from_string(std::string_view name, scripted_fault& x);

struct scripted_step {
  scripted_fault fault = scripted_fault::ok;
  /// For `delay`: how long until the (correct) answer.
  caf::timespan delay{0};
  /// Applies to this call and every later call of the operation on the same
  /// sandbox (for create: on this provider).
  bool sticky = false;
};

struct scripted_script {
  /// Per operation, the steps of its 1st, 2nd, ... call on this provider;
  /// calls past the end of a list are `ok` (or random, see below).
  std::map<scripted_op, std::vector<scripted_step>> steps;
  /// Chance (0 to 1) that an unscripted call gets a random fault.
  double fault_rate = 0;
  /// Seed of the random faults.
  uint64_t seed = 1;
  /// The faults drawn at random.
  std::vector<scripted_fault> random_faults = {
    scripted_fault::error, scripted_fault::hang, scripted_fault::delay,
    scripted_fault::garbage};
  /// The delay of a random `delay` fault.
  caf::timespan random_delay = std::chrono::milliseconds(10);
  /// What an `ok` download returns.
  std::string result_text = R"({"reward": 1.0})";
  /// How many `ok` status polls of a sandbox answer `starting` first.
  uint32_t starting_polls = 0;
  /// Chance (0 to 1) that a call (any operation) kills the provider actor
  /// instead, with a non-normal exit reason. Creates it has in flight
  /// (delayed) end with it; its sandboxes stay in the world for a
  /// replacement to stop.
  double crash_rate = 0;
  /// When set, each provider actor appends its world's ledger as one JSON
  /// line to this file when it exits (independent evidence for soak runs;
  /// the last line covers every actor of the world).
  std::string ledger_file;
};

/// What happened to a stop call.
enum class scripted_stop_result : uint8_t {
  /// The sandbox was running and is gone now.
  stopped,
  /// The sandbox was already stopped: nothing to do (counted).
  repeated,
  /// No sandbox with this id was ever created in this world.
  unknown,
};

/// The world the scripted provider actors of one deployment share: their
/// sandboxes and the ledger of everything they did. A replacement provider
/// spawned with the same world after a crash knows (and can stop) every
/// sandbox of its predecessors. Thread-safe.
class scripted_world {
public:
  // -- provider actors ------------------------------------------------------

  /// A provider actor starts; returns its index (0, 1, ...) in this world.
  uint64_t on_spawn();
  /// Provider actor `index` exits (normally or not) with
  /// `creates_in_flight` creates it had not answered yet: those end with it.
  void on_exit(uint64_t index, uint64_t creates_in_flight, bool crashed);
  /// Appends `to_json()` as one line to `path` (done by each provider actor
  /// as it exits: the last line holds the whole world).
  void append_ledger(const std::string& path) const;

  // -- sandboxes ------------------------------------------------------------

  /// A create is being worked on (answered later by `on_created` or
  /// `on_create_failed`, or ended by `on_exit`).
  void on_create_begin();
  /// The create in flight made a sandbox; returns its id (unique in the
  /// world).
  std::string on_created(uint64_t actor = 0);
  /// The create in flight ended without a sandbox.
  void on_create_failed();
  /// The create in flight finished after its `create_deadline_s`: no
  /// sandbox, since nobody waits for it any more (counted).
  void on_create_abandoned();
  /// Whether this world created `sandbox_id` (stopped or not).
  bool is_known(const std::string& sandbox_id) const;
  /// Whether `sandbox_id` was created and not yet stopped.
  bool is_live(const std::string& sandbox_id) const;
  /// A status poll of a live sandbox: `starting` for its first
  /// `starting_polls` polls, then `running`.
  sandbox_status poll(const std::string& sandbox_id, uint32_t starting_polls);
  /// A stop call reached provider actor `actor` and was carried out.
  scripted_stop_result stop(const std::string& sandbox_id, uint64_t actor);

  // -- the ledger -----------------------------------------------------------

  void on_call(scripted_op op, scripted_fault fault);
  /// A stop call reached a provider (carried out, or not: a crash).
  void on_stop_call();

  /// Calls of an operation so far.
  uint64_t calls(scripted_op op) const;
  /// Calls that got a given fault so far.
  uint64_t faults(scripted_fault fault) const;
  /// Sandboxes created so far.
  uint64_t creates() const;
  /// Stop calls that reached a provider so far (for any id).
  uint64_t stops() const;
  /// Sandboxes stopped (each counts once).
  uint64_t stopped() const;
  /// Stops of a sandbox that was already stopped.
  uint64_t repeated_stops() const;
  /// Stops of an id this world never created.
  uint64_t unknown_stops() const;
  /// Stops carried out for one sandbox (1 when all is well).
  uint64_t stops_of(const std::string& sandbox_id) const;
  /// Created sandboxes whose stop count is not exactly one (still running,
  /// or stopped more than once).
  std::vector<std::string> not_stopped_once() const;
  /// Created sandboxes not stopped yet.
  uint64_t live() const;
  /// The most sandboxes ever created but not yet running at once.
  uint64_t peak_starting() const;
  /// Creates in flight now / the most ever in flight at once (a create is
  /// in flight from its arrival to its answer or its provider's death).
  uint64_t creating() const;
  uint64_t peak_creating() const;
  /// Provider actors spawned in this world / still alive / crashed.
  uint64_t actors_spawned() const;
  uint64_t actors_live() const;
  uint64_t crashes() const;
  /// Everything above as JSON.
  json to_json() const;

private:
  json to_json_locked() const;

  // Every sandbox ever created stays known (to tell a repeated stop from an
  // unknown id), so a record is small: ids are "sb-<index>" into this.
  struct sandbox {
    uint32_t stops = 0;
    uint32_t polls = 0;
    /// The provider actor that carried out the first stop.
    uint32_t stopped_by = 0;
    /// The provider actor that created it.
    uint32_t created_by = 0;
    bool running = false;
  };

  /// The record of `sandbox_id`, or null when this world never made it.
  sandbox* find(const std::string& sandbox_id);
  const sandbox* find(const std::string& sandbox_id) const;

  mutable std::mutex mtx_;
  std::array<uint64_t, scripted_op_count> calls_{};
  std::array<uint64_t, 6> faults_{};
  std::vector<sandbox> sandboxes_;
  uint64_t stop_calls_ = 0;
  uint64_t stopped_ = 0;
  uint64_t repeated_stops_ = 0;
  uint64_t repeated_after_crash_ = 0;
  uint64_t abandoned_creates_ = 0;
  std::vector<bool> crashed_actors_;
  uint64_t unknown_stops_ = 0;
  uint64_t starting_ = 0;
  uint64_t peak_starting_ = 0;
  uint64_t creating_ = 0;
  uint64_t peak_creating_ = 0;
  uint64_t actors_spawned_ = 0;
  uint64_t actors_live_ = 0;
  uint64_t crashes_ = 0;
};

/// The tests' name for the world: they check its ledger.
using scripted_ledger = scripted_world;

/// Reads a `{"scripted": {...}}` block's settings: `steps` ({op: [fault or
/// {"fault": f, "delay_ms": n, "sticky": b}, ...]}), `fault_rate`, `seed`,
/// `random_faults`, `random_delay_ms`, `result_text`, `starting_polls`,
/// `crash_rate`, `ledger_file`.
/// Throws `json_error` naming the field.
scripted_script parse_scripted_script(const json& settings);

/// Spawns a scripted provider in `world` (a fresh world when null). Spawn a
/// replacement with the world of the provider it replaces.
provider_actor spawn_scripted_provider(caf::actor_system& sys,
                                       scripted_script script,
                                       std::shared_ptr<scripted_world> world);

/// The backend of a `scripted` block (providers/factory.cpp). Throws
/// `json_error` for bad settings.
std::shared_ptr<provider_backend> make_scripted_backend(const json& settings);

/// The backend of `script` in `world` (the test kit's bench: its world).
std::shared_ptr<provider_backend>
make_scripted_backend(scripted_script script,
                      std::shared_ptr<scripted_world> world);

} // namespace sv
