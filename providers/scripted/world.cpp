// The scripted provider's world: the sandboxes and the ledger its provider
// actors share (see scripted.hpp).

#include "providers/scripted.hpp"

#include <fstream>
#include <string_view>
#include <utility>

namespace sv {

namespace {

using guard = std::lock_guard<std::mutex>;

constexpr std::string_view id_prefix = "sb-";

std::string id_of(size_t index) {
  return std::string{id_prefix} + std::to_string(index);
}

} // namespace

scripted_world::sandbox* scripted_world::find(const std::string& sandbox_id) {
  auto& self = *this;
  return const_cast<sandbox*>(std::as_const(self).find(sandbox_id));
}

const scripted_world::sandbox*
scripted_world::find(const std::string& sandbox_id) const {
  std::string_view id{sandbox_id};
  if (id.substr(0, id_prefix.size()) != id_prefix)
    return nullptr;
  auto digits = id.substr(id_prefix.size());
  if (digits.empty() || digits.size() > 18 ||
      (digits[0] == '0' && digits.size() > 1))
    return nullptr;
  size_t index = 0;
  for (char c : digits) {
    if (c < '0' || c > '9')
      return nullptr;
    index = index * 10 + static_cast<size_t>(c - '0');
  }
  return index < sandboxes_.size() ? &sandboxes_[index] : nullptr;
}

// -- provider actors ----------------------------------------------------------

uint64_t scripted_world::on_spawn() {
  guard g{mtx_};
  ++actors_live_;
  crashed_actors_.push_back(false);
  return actors_spawned_++;
}

void scripted_world::on_exit(uint64_t index, uint64_t creates_in_flight,
                             bool crashed) {
  guard g{mtx_};
  if (index < crashed_actors_.size())
    crashed_actors_[index] = crashed;
  --actors_live_;
  creating_ -= std::min(creating_, creates_in_flight);
  crashes_ += crashed ? 1 : 0;
}

void scripted_world::append_ledger(const std::string& path) const {
  // Under the lock, so that the last line written is the latest state.
  guard g{mtx_};
  std::ofstream out{path, std::ios::app};
  out << to_json_locked().dump() << '\n';
}

// -- sandboxes ----------------------------------------------------------------

void scripted_world::on_create_begin() {
  guard g{mtx_};
  peak_creating_ = std::max(peak_creating_, ++creating_);
}

std::string scripted_world::on_created(uint64_t actor) {
  guard g{mtx_};
  --creating_;
  auto id = id_of(sandboxes_.size());
  sandboxes_.emplace_back().created_by = static_cast<uint32_t>(actor);
  peak_starting_ = std::max(peak_starting_, ++starting_);
  return id;
}

void scripted_world::on_create_failed() {
  guard g{mtx_};
  --creating_;
}

void scripted_world::on_create_abandoned() {
  guard g{mtx_};
  --creating_;
  ++abandoned_creates_;
}

bool scripted_world::is_known(const std::string& sandbox_id) const {
  guard g{mtx_};
  return find(sandbox_id) != nullptr;
}

bool scripted_world::is_live(const std::string& sandbox_id) const {
  guard g{mtx_};
  auto* sb = find(sandbox_id);
  return sb != nullptr && sb->stops == 0;
}

sandbox_status scripted_world::poll(const std::string& sandbox_id,
                                    uint32_t starting_polls) {
  guard g{mtx_};
  auto* found = find(sandbox_id);
  if (found == nullptr)
    return sandbox_status::unknown;
  auto& sb = *found;
  if (sb.stops > 0)
    return sandbox_status::stopped;
  if (!sb.running && sb.polls++ < starting_polls)
    return sandbox_status::starting;
  if (!sb.running) {
    sb.running = true;
    --starting_;
  }
  return sandbox_status::running;
}

scripted_stop_result scripted_world::stop(const std::string& sandbox_id,
                                          uint64_t actor) {
  guard g{mtx_};
  auto* found = find(sandbox_id);
  if (found == nullptr) {
    ++unknown_stops_;
    return scripted_stop_result::unknown;
  }
  auto& sb = *found;
  if (sb.stops++ > 0) {
    ++repeated_stops_;
    // The first stop's provider crashed: its answer may never have left, so
    // the verification rightly had the stop repeated by a replacement.
    if (sb.stopped_by < crashed_actors_.size() &&
        crashed_actors_[sb.stopped_by])
      ++repeated_after_crash_;
    return scripted_stop_result::repeated;
  }
  sb.stopped_by = static_cast<uint32_t>(actor);
  ++stopped_;
  if (!sb.running)
    --starting_;
  return scripted_stop_result::stopped;
}

// -- the ledger ---------------------------------------------------------------

void scripted_world::on_call(scripted_op op, scripted_fault fault) {
  guard g{mtx_};
  ++calls_[static_cast<size_t>(op)];
  ++faults_[static_cast<size_t>(fault)];
}

void scripted_world::on_stop_call() {
  guard g{mtx_};
  ++stop_calls_;
}

uint64_t scripted_world::calls(scripted_op op) const {
  guard g{mtx_};
  return calls_[static_cast<size_t>(op)];
}

uint64_t scripted_world::faults(scripted_fault fault) const {
  guard g{mtx_};
  return faults_[static_cast<size_t>(fault)];
}

uint64_t scripted_world::creates() const {
  guard g{mtx_};
  return sandboxes_.size();
}

uint64_t scripted_world::stops() const {
  guard g{mtx_};
  return stop_calls_;
}

uint64_t scripted_world::stopped() const {
  guard g{mtx_};
  return stopped_;
}

uint64_t scripted_world::repeated_stops() const {
  guard g{mtx_};
  return repeated_stops_;
}

uint64_t scripted_world::unknown_stops() const {
  guard g{mtx_};
  return unknown_stops_;
}

uint64_t scripted_world::stops_of(const std::string& sandbox_id) const {
  guard g{mtx_};
  auto* sb = find(sandbox_id);
  return sb != nullptr ? sb->stops : 0;
}

std::vector<std::string> scripted_world::not_stopped_once() const {
  guard g{mtx_};
  std::vector<std::string> out;
  for (size_t i = 0; i < sandboxes_.size(); ++i)
    if (sandboxes_[i].stops != 1)
      out.push_back(id_of(i));
  return out;
}

uint64_t scripted_world::live() const {
  guard g{mtx_};
  return sandboxes_.size() - stopped_;
}

uint64_t scripted_world::peak_starting() const {
  guard g{mtx_};
  return peak_starting_;
}

uint64_t scripted_world::creating() const {
  guard g{mtx_};
  return creating_;
}

uint64_t scripted_world::peak_creating() const {
  guard g{mtx_};
  return peak_creating_;
}

uint64_t scripted_world::actors_spawned() const {
  guard g{mtx_};
  return actors_spawned_;
}

uint64_t scripted_world::actors_live() const {
  guard g{mtx_};
  return actors_live_;
}

uint64_t scripted_world::crashes() const {
  guard g{mtx_};
  return crashes_;
}

json scripted_world::to_json() const {
  guard g{mtx_};
  return to_json_locked();
}

json scripted_world::to_json_locked() const {
  json calls = json::object();
  for (size_t i = 0; i < scripted_op_count; ++i)
    calls[std::string{to_string(static_cast<scripted_op>(i))}] = calls_[i];
  json faults = json::object();
  for (size_t i = 0; i < faults_.size(); ++i)
    faults[std::string{to_string(static_cast<scripted_fault>(i))}] = faults_[i];
  uint64_t not_once = 0;
  // The first few sandboxes still running, to find a leak's history.
  json live_ids = json::array();
  for (size_t i = 0; i < sandboxes_.size(); ++i) {
    auto& sb = sandboxes_[i];
    not_once += sb.stops != 1 ? 1 : 0;
    if (sb.stops == 0 && live_ids.size() < 10)
      live_ids.push_back(json{{"id", id_of(i)},
                              {"created_by", sb.created_by},
                              {"polls", sb.polls},
                              {"running", sb.running}});
  }
  return json{{"creates", sandboxes_.size()},
              {"stopped", stopped_},
              {"live", sandboxes_.size() - stopped_},
              {"stop_calls", stop_calls_},
              {"repeated_stops", repeated_stops_},
              {"repeated_after_crash", repeated_after_crash_},
              {"abandoned_creates", abandoned_creates_},
              {"unknown_stops", unknown_stops_},
              {"not_stopped_once", not_once},
              {"live_ids", live_ids},
              {"peak_starting", peak_starting_},
              {"creating", creating_},
              {"peak_creating", peak_creating_},
              {"actors_spawned", actors_spawned_},
              {"actors_live", actors_live_},
              {"crashes", crashes_},
              {"calls", calls},
              {"faults", faults}};
}

} // namespace sv
