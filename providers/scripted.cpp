#include "providers/scripted.hpp"

#include "messages/errors.hpp"
#include "messages/json.hpp"

#include <atomic>
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <fstream>
#include <functional>
#include <random>
#include <unordered_map>

namespace sv {

// -- names --------------------------------------------------------------------

namespace {

constexpr std::array<std::string_view, scripted_op_count> op_names{
  "create", "status", "upload", "exec", "download", "stop"};
constexpr std::array<std::string_view, 6> fault_names{
  "ok", "error", "hang", "crash", "delay", "garbage"};

template <class Enum, size_t N>
bool parse_name(const std::array<std::string_view, N>& names,
                std::string_view name, Enum& x) {
  for (size_t i = 0; i < N; ++i)
    if (names[i] == name) {
      x = static_cast<Enum>(i);
      return true;
    }
  return false;
}

} // namespace

std::string_view to_string(scripted_op x) {
  return op_names[static_cast<size_t>(x)];
}

std::string_view to_string(scripted_fault x) {
  return fault_names[static_cast<size_t>(x)];
}

bool from_string(std::string_view name, scripted_op& x) {
  return parse_name(op_names, name, x);
}

bool from_string(std::string_view name, scripted_fault& x) {
  return parse_name(fault_names, name, x);
}

// -- ledger -------------------------------------------------------------------

void scripted_ledger::on_call(scripted_op op, scripted_fault fault) {
  std::lock_guard<std::mutex> guard{mtx_};
  ++calls_[static_cast<size_t>(op)];
  ++faults_[static_cast<size_t>(fault)];
}

void scripted_ledger::on_create(const std::string& sandbox_id) {
  std::lock_guard<std::mutex> guard{mtx_};
  stops_by_sandbox_.emplace(sandbox_id, 0);
  starting_.emplace(sandbox_id, true);
  peak_starting_ = std::max<uint64_t>(peak_starting_, starting_.size());
}

void scripted_ledger::on_running(const std::string& sandbox_id) {
  std::lock_guard<std::mutex> guard{mtx_};
  starting_.erase(sandbox_id);
}

json scripted_ledger::to_json() const {
  std::lock_guard<std::mutex> guard{mtx_};
  json calls = json::object();
  for (size_t i = 0; i < scripted_op_count; ++i)
    calls[std::string{op_names[i]}] = calls_[i];
  json faults = json::object();
  for (size_t i = 0; i < fault_names.size(); ++i)
    faults[std::string{fault_names[i]}] = faults_[i];
  uint64_t not_once = 0;
  for (auto& [id, n] : stops_by_sandbox_)
    not_once += n != 1 ? 1 : 0;
  return json{{"creates", stops_by_sandbox_.size()},
              {"stop_calls", stops_},
              {"not_stopped_once", not_once},
              {"peak_starting", peak_starting_},
              {"calls", calls},
              {"faults", faults}};
}

uint64_t scripted_ledger::peak_starting() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return peak_starting_;
}

void scripted_ledger::on_stop(const std::string& sandbox_id) {
  std::lock_guard<std::mutex> guard{mtx_};
  starting_.erase(sandbox_id);
  ++stops_;
  ++stops_by_sandbox_[sandbox_id];
}

uint64_t scripted_ledger::calls(scripted_op op) const {
  std::lock_guard<std::mutex> guard{mtx_};
  return calls_[static_cast<size_t>(op)];
}

uint64_t scripted_ledger::faults(scripted_fault fault) const {
  std::lock_guard<std::mutex> guard{mtx_};
  return faults_[static_cast<size_t>(fault)];
}

uint64_t scripted_ledger::creates() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return stops_by_sandbox_.size();
}

uint64_t scripted_ledger::stops() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return stops_;
}

uint64_t scripted_ledger::stops_of(const std::string& sandbox_id) const {
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = stops_by_sandbox_.find(sandbox_id);
  return i != stops_by_sandbox_.end() ? i->second : 0;
}

std::vector<std::string> scripted_ledger::not_stopped_once() const {
  std::lock_guard<std::mutex> guard{mtx_};
  std::vector<std::string> out;
  for (auto& [id, n] : stops_by_sandbox_)
    if (n != 1)
      out.push_back(id);
  return out;
}

// -- the actor ----------------------------------------------------------------

namespace {

using delayed_atom = caf::atom_constant<caf::atom("delayed")>;
using reply_fn = std::function<void(caf::response_promise&)>;

struct scripted_state {
  static inline const char* name = "sv.scripted_provider";

  scripted_script script;
  std::shared_ptr<scripted_ledger> ledger;
  std::array<uint64_t, scripted_op_count> calls{};
  /// Sticky steps by operation and sandbox id (empty for create).
  std::map<std::pair<scripted_op, std::string>, scripted_step> sticky;
  std::mt19937_64 rng;
  /// Sandbox ids are unique across providers (a restarted provider must not
  /// hand out the ids of its predecessor).
  std::string id_prefix;
  uint64_t next_sandbox = 0;
  std::unordered_map<std::string, uint32_t> polls;
  uint64_t next_token = 0;
  std::unordered_map<uint64_t, std::pair<caf::response_promise, reply_fn>>
    delayed;
};

using self_ptr = caf::stateful_actor<scripted_state>*;

/// The step of the next call of `op` on `sandbox`: sticky, scripted, random
/// or ok.
scripted_step next_step(self_ptr self, scripted_op op,
                        const std::string& sandbox) {
  auto& st = self->state;
  auto index = st.calls[static_cast<size_t>(op)]++;
  if (!st.sticky.empty()) {
    if (auto i = st.sticky.find({op, sandbox}); i != st.sticky.end())
      return i->second;
  }
  if (auto i = st.script.steps.find(op);
      i != st.script.steps.end() && index < i->second.size()) {
    auto step = i->second[index];
    if (step.sticky)
      st.sticky.emplace(std::make_pair(op, sandbox), step);
    return step;
  }
  if (st.script.fault_rate > 0 && !st.script.random_faults.empty()) {
    std::uniform_real_distribution<double> coin{0, 1};
    if (coin(st.rng) < st.script.fault_rate) {
      std::uniform_int_distribution<size_t> pick{
        0, st.script.random_faults.size() - 1};
      return {st.script.random_faults[pick(st.rng)], st.script.random_delay,
              false};
    }
  }
  return {};
}

/// Runs one call: the correct answer `ok`, or the step's fault.
/// (Templates, not std::function: this runs for every call of the
/// orchestration benchmarks; only a delayed answer needs to be stored.)
template <class Ok, class Garbage>
caf::response_promise respond(self_ptr self, scripted_op op,
                              const std::string& sandbox, Ok&& ok,
                              Garbage&& garbage) {
  auto& st = self->state;
  auto rp = self->make_response_promise();
  auto step = next_step(self, op, sandbox);
  if (st.ledger)
    st.ledger->on_call(op, step.fault);
  switch (step.fault) {
  case scripted_fault::ok:
    ok(rp);
    break;
  case scripted_fault::error:
    rp.deliver(make_error(provider_errc::sandbox_error,
                          "scripted error in " + std::string{to_string(op)}));
    break;
  case scripted_fault::hang:
    break; // the promise is dropped: no answer, ever
  case scripted_fault::crash:
    self->quit(caf::make_error(caf::sec::runtime_error));
    break;
  case scripted_fault::delay: {
    auto token = st.next_token++;
    st.delayed.emplace(token, std::make_pair(rp, reply_fn{std::move(ok)}));
    self->delayed_send(self, step.delay, delayed_atom::value, token);
    break;
  }
  case scripted_fault::garbage:
    garbage(rp);
    break;
  }
  return rp;
}

/// A reply of a type the requester does not expect.
void wrong_type(caf::response_promise& rp) {
  rp.deliver(std::string{"scripted garbage"});
}

caf::behavior scripted_provider(self_ptr self, scripted_script script,
                                std::shared_ptr<scripted_ledger> ledger) {
  static std::atomic<uint64_t> instances{0};
  self->state.id_prefix = "sb-" + std::to_string(instances++) + "-";
  self->state.rng.seed(script.seed);
  if (!script.ledger_file.empty()) {
    if (!ledger)
      ledger = std::make_shared<scripted_ledger>();
    // Written once, when the provider exits; a tiny append.
    self->attach_functor([ledger, path = script.ledger_file] {
      std::ofstream out{path, std::ios::app};
      out << ledger->to_json().dump() << '\n';
    });
  }
  self->state.script = std::move(script);
  self->state.ledger = std::move(ledger);
  return {
    [=](create_atom, sandbox_spec&) {
      auto create = [=](caf::response_promise& rp) {
        auto& st = self->state;
        sandbox_handle h{st.id_prefix + std::to_string(st.next_sandbox++),
                         "scripted", ""};
        if (st.ledger)
          st.ledger->on_create(h.sandbox_id);
        rp.deliver(std::move(h));
      };
      return respond(self, scripted_op::create, {}, create, wrong_type);
    },
    [=](status_atom, sandbox_handle& h) {
      auto id = h.sandbox_id;
      auto status = [=](caf::response_promise& rp) {
        auto& st = self->state;
        if (st.script.starting_polls > 0 &&
            st.polls[id]++ < st.script.starting_polls) {
          rp.deliver(sandbox_status::starting);
          return;
        }
        st.polls.erase(id);
        if (st.ledger)
          st.ledger->on_running(id);
        rp.deliver(sandbox_status::running);
      };
      auto unknown = [](caf::response_promise& rp) {
        rp.deliver(sandbox_status::unknown);
      };
      return respond(self, scripted_op::status, h.sandbox_id, status, unknown);
    },
    [=](upload_atom, sandbox_handle& h, std::string&, file_map&) {
      auto ok = [](caf::response_promise& rp) { rp.deliver(ok_atom::value); };
      return respond(self, scripted_op::upload, h.sandbox_id, ok, wrong_type);
    },
    [=](exec_atom, sandbox_handle& h, exec_request&) {
      auto ok = [](caf::response_promise& rp) { rp.deliver(exec_result{}); };
      auto broken = [](caf::response_promise& rp) {
        exec_result res;
        res.error_type = exec_error_type::sandbox;
        res.return_code = -1;
        res.message = "scripted garbage: the sandbox lost the runner";
        rp.deliver(std::move(res));
      };
      return respond(self, scripted_op::exec, h.sandbox_id, ok, broken);
    },
    [=](download_atom, sandbox_handle& h, std::string&) {
      auto ok = [=](caf::response_promise& rp) {
        rp.deliver(self->state.script.result_text);
      };
      auto junk = [](caf::response_promise& rp) {
        rp.deliver(std::string{"\x01\x02 this is not JSON {"});
      };
      return respond(self, scripted_op::download, h.sandbox_id, ok, junk);
    },
    [=](stop_atom, sandbox_handle& h) {
      auto id = h.sandbox_id;
      if (self->state.ledger)
        self->state.ledger->on_stop(id);
      auto ok = [](caf::response_promise& rp) { rp.deliver(ok_atom::value); };
      return respond(self, scripted_op::stop, id, ok, wrong_type);
    },
    [=](delayed_atom, uint64_t token) {
      auto i = self->state.delayed.find(token);
      if (i == self->state.delayed.end())
        return;
      auto [rp, reply] = std::move(i->second);
      self->state.delayed.erase(i);
      reply(rp);
    },
  };
}

// -- configuration ------------------------------------------------------------

template <class Enum>
Enum read_name(const json& j, const std::string& path, const char* what) {
  Enum x{};
  if (!j.is_string() || !from_string(j.get<std::string>(), x))
    throw json_error(path, std::string{"expected "} + what + " name, got " +
                             j.dump());
  return x;
}

/// A non-negative number of milliseconds at `path`.
caf::timespan read_millis(const json& v, const std::string& path) {
  if (!v.is_number() || v.get<double>() < 0)
    throw json_error(path, "expected milliseconds >= 0");
  return std::chrono::duration_cast<caf::timespan>(
    std::chrono::duration<double, std::milli>(v.get<double>()));
}

scripted_step read_step(const json& j, const std::string& path) {
  scripted_step step;
  if (j.is_string()) {
    step.fault = read_name<scripted_fault>(j, path, "a fault");
    return step;
  }
  if (!j.is_object())
    throw json_error(path, "expected a fault name or an object");
  try {
    check_object(j, "a step", {"fault", "delay_ms", "sticky"});
  } catch (const json_error& e) {
    throw json_error(path + "." + e.path(), e.reason());
  }
  for (auto& [key, value] : j.items()) {
    if (key == "fault") {
      step.fault = read_name<scripted_fault>(value, path + ".fault", "a fault");
    } else if (key == "delay_ms") {
      step.delay = read_millis(value, path + ".delay_ms");
    } else if (!value.is_boolean()) { // sticky
      throw json_error(path + ".sticky", "expected true or false");
    } else {
      step.sticky = value.get<bool>();
    }
  }
  return step;
}

} // namespace

scripted_script parse_scripted_script(const json& j) {
  check_object(j, "scripted settings",
               {"steps", "fault_rate", "seed", "random_faults",
                "random_delay_ms", "result_text", "ledger_file",
                "starting_polls"});
  scripted_script out;
  for (auto& [key, value] : j.items()) {
    if (key == "steps") {
      if (!value.is_object())
        throw json_error("steps", "expected an object of operations");
      for (auto& [op_name, list] : value.items()) {
        auto path = "steps." + op_name;
        auto op = read_name<scripted_op>(op_name, path, "an operation");
        if (!list.is_array())
          throw json_error(path, "expected an array of steps");
        for (size_t i = 0; i < list.size(); ++i)
          out.steps[op].push_back(
            read_step(list[i], path + "[" + std::to_string(i) + "]"));
      }
    } else if (key == "fault_rate") {
      if (!value.is_number() || value.get<double>() < 0 ||
          value.get<double>() > 1)
        throw json_error(key, "expected a number in [0, 1]");
      out.fault_rate = value.get<double>();
    } else if (key == "seed") {
      if (!value.is_number_unsigned())
        throw json_error(key, "expected a non-negative integer");
      out.seed = value.get<uint64_t>();
    } else if (key == "random_faults") {
      if (!value.is_array())
        throw json_error(key, "expected an array of fault names");
      out.random_faults.clear();
      for (size_t i = 0; i < value.size(); ++i)
        out.random_faults.push_back(read_name<scripted_fault>(
          value[i], key + "[" + std::to_string(i) + "]", "a fault"));
    } else if (key == "random_delay_ms") {
      out.random_delay = read_millis(value, key);
    } else if (key == "result_text") {
      if (!value.is_string())
        throw json_error(key, "expected a string");
      out.result_text = value.get<std::string>();
    } else if (key == "ledger_file") {
      if (!value.is_string() || value.get<std::string>().empty())
        throw json_error(key, "expected a file path");
      out.ledger_file = value.get<std::string>();
    } else { // starting_polls: check_object admitted no other key
      if (!value.is_number_unsigned())
        throw json_error(key, "expected a non-negative integer");
      out.starting_polls = value.get<uint32_t>();
    }
  }
  return out;
}

provider_actor
spawn_scripted_provider(caf::actor_system& sys, scripted_script script,
                        std::shared_ptr<scripted_ledger> ledger) {
  auto hdl = sys.spawn(scripted_provider, std::move(script), std::move(ledger));
  return caf::actor_cast<provider_actor>(hdl);
}

} // namespace sv
