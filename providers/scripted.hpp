#pragma once

// The scripted provider: a sandbox backend whose behaviour a test (or a
// config) scripts per operation and per call: ok, error, hang, crash,
// delay(d) or garbage. It answers everything in memory, so it is also the
// provider of the orchestration benchmarks (all `ok`).

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
  /// Never answers.
  hang,
  /// The provider actor dies while handling the call.
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
  /// When set, the provider appends its ledger as one JSON line to this
  /// file when it exits (independent evidence for soak runs).
  std::string ledger_file;
};

/// What a scripted provider did, shared with whoever wants to check it.
/// Thread-safe.
class scripted_ledger {
public:
  void on_call(scripted_op op, scripted_fault fault);
  void on_create(const std::string& sandbox_id);
  void on_stop(const std::string& sandbox_id);
  /// A sandbox answered its first `running` status.
  void on_running(const std::string& sandbox_id);

  /// Calls of an operation so far.
  uint64_t calls(scripted_op op) const;
  /// Calls that got a given fault so far.
  uint64_t faults(scripted_fault fault) const;
  /// Sandboxes created so far.
  uint64_t creates() const;
  /// Stop calls so far (for any sandbox, known or not).
  uint64_t stops() const;
  /// Stop calls for one sandbox.
  uint64_t stops_of(const std::string& sandbox_id) const;
  /// Created sandboxes whose stop count is not exactly one.
  std::vector<std::string> not_stopped_once() const;
  /// The most sandboxes ever created but not yet running at once.
  uint64_t peak_starting() const;
  /// Everything above as JSON.
  json to_json() const;

private:
  mutable std::mutex mtx_;
  std::array<uint64_t, scripted_op_count> calls_{};
  std::array<uint64_t, 6> faults_{};
  uint64_t stops_ = 0;
  std::map<std::string, uint64_t> stops_by_sandbox_;
  std::map<std::string, bool> starting_;
  uint64_t peak_starting_ = 0;
};

/// Reads a `{"scripted": {...}}` block's settings: `steps` ({op: [fault or
/// {"fault": f, "delay_ms": n, "sticky": b}, ...]}), `fault_rate`, `seed`,
/// `random_faults`, `random_delay_ms`, `result_text`, `starting_polls`,
/// `ledger_file`.
/// Throws `json_error` naming the field.
scripted_script parse_scripted_script(const json& settings);

/// Spawns a scripted provider. `ledger` may be null.
provider_actor spawn_scripted_provider(caf::actor_system& sys,
                                       scripted_script script,
                                       std::shared_ptr<scripted_ledger> ledger);

} // namespace sv
