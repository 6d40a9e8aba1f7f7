#include "actors/detail/quiet.hpp"
#include "messages/errors.hpp"
#include "messages/json.hpp"
#include "providers/factory.hpp"
#include "providers/scripted.hpp"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>
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

// -- the actor ----------------------------------------------------------------

namespace {

using delayed_atom = caf::atom_constant<caf::atom("delayed")>;
using reply_fn = std::function<void(caf::response_promise&)>;

/// What the exit of a provider actor tells its world (shared with the exit
/// functor, which may run after the state is gone).
struct exit_report {
  uint64_t creates_in_flight = 0;
  bool crashed = false;
};

struct delayed_reply {
  caf::response_promise rp;
  reply_fn reply;
  bool is_create = false;
};

struct scripted_state {
  static inline const char* name = "sv.scripted_provider";

  scripted_script script;
  std::shared_ptr<scripted_world> world;
  /// This actor's index in its world.
  uint64_t index = 0;
  std::shared_ptr<exit_report> exit;
  std::array<uint64_t, scripted_op_count> calls{};
  /// Sticky steps by operation and sandbox id (empty for create).
  std::map<std::pair<scripted_op, std::string>, scripted_step> sticky;
  std::mt19937_64 rng;
  uint64_t next_token = 0;
  std::unordered_map<uint64_t, delayed_reply> delayed;
};

using self_ptr = caf::stateful_actor<scripted_state>*;

/// A random fault, or none.
bool coin(self_ptr self, double rate) {
  if (rate <= 0)
    return false;
  std::uniform_real_distribution<double> dist{0, 1};
  return dist(self->state.rng) < rate;
}

/// The step of the next call of `op` on `sandbox`: a random crash, sticky,
/// scripted, random or ok.
scripted_step next_step(self_ptr self, scripted_op op,
                        const std::string& sandbox) {
  auto& st = self->state;
  auto index = st.calls[static_cast<size_t>(op)]++;
  if (coin(self, st.script.crash_rate))
    return {scripted_fault::crash, caf::timespan{0}, false};
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
  if (!st.script.random_faults.empty() && coin(self, st.script.fault_rate)) {
    std::uniform_int_distribution<size_t> pick{
      0, st.script.random_faults.size() - 1};
    return {st.script.random_faults[pick(st.rng)], st.script.random_delay,
            false};
  }
  return {};
}

void crash(self_ptr self, scripted_op op) {
  self->state.exit->crashed = true;
  self->quit(make_error(provider_errc::unavailable,
                        "scripted crash in " + std::string{to_string(op)}));
}

caf::error no_such_sandbox(scripted_op op, const std::string& id) {
  return make_error(provider_errc::no_such_sandbox,
                    std::string{to_string(op)} + ": no sandbox " + id);
}

/// Runs one call: a crash, the world's verdict on the sandbox (`check`:
/// an error such as `no_such_sandbox`, or none), then the correct answer
/// `ok` or the step's fault.
/// (Templates, not std::function: this runs for every call of the
/// orchestration benchmarks; only a delayed answer needs to be stored.)
template <class Check, class Ok, class Garbage>
caf::response_promise respond(self_ptr self, scripted_op op,
                              const std::string& sandbox, Check&& check,
                              Ok&& ok, Garbage&& garbage) {
  auto& st = self->state;
  auto rp = self->make_response_promise();
  auto step = next_step(self, op, sandbox);
  st.world->on_call(op, step.fault);
  if (step.fault == scripted_fault::crash) {
    crash(self, op);
    return rp; // dies unanswered (there is no broken_promise in CAF 0.17)
  }
  if (auto err = check()) {
    rp.deliver(std::move(err));
    return rp;
  }
  auto is_create = op == scripted_op::create;
  switch (step.fault) {
  case scripted_fault::ok:
    if (is_create)
      st.world->on_create_begin();
    ok(rp);
    break;
  case scripted_fault::error:
    rp.deliver(make_error(provider_errc::sandbox_error,
                          "scripted error in " + std::string{to_string(op)}));
    break;
  case scripted_fault::hang:
    break; // the call is lost: no answer, ever
  case scripted_fault::crash:
    break; // handled above
  case scripted_fault::delay: {
    if (is_create) {
      st.world->on_create_begin();
      ++st.exit->creates_in_flight;
    }
    auto token = st.next_token++;
    st.delayed.emplace(token,
                       delayed_reply{rp, reply_fn{std::move(ok)}, is_create});
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

/// The check of a call that needs a live sandbox.
auto live(self_ptr self, scripted_op op, const std::string& id) {
  return [=]() -> caf::error {
    if (self->state.world->is_live(id))
      return {};
    return no_such_sandbox(op, id);
  };
}

/// Installs the exit report: the world learns of every exit, crash or not,
/// and the ledger file gets the world's state.
void attach_exit(self_ptr self, const std::string& ledger_file) {
  auto world = self->state.world;
  auto report = self->state.exit;
  auto index = self->state.index;
  self->attach_functor([world, report, index, ledger_file] {
    world->on_exit(index, report->creates_in_flight, report->crashed);
    if (!ledger_file.empty())
      world->append_ledger(ledger_file); // a tiny append, once per actor
  });
}

caf::behavior scripted_provider(self_ptr self, scripted_script script,
                                std::shared_ptr<scripted_world> world) {
  self->set_default_handler(log_and_drop_unexpected);
  auto& st = self->state;
  st.world = world ? std::move(world) : std::make_shared<scripted_world>();
  st.exit = std::make_shared<exit_report>();
  // A replacement must not replay its predecessor's random faults.
  st.index = st.world->on_spawn();
  st.rng.seed(script.seed + st.index * 0x9E3779B97F4A7C15ull);
  attach_exit(self, script.ledger_file);
  st.script = std::move(script);
  auto ok_atom_reply = [](caf::response_promise& rp) {
    rp.deliver(ok_atom::value);
  };
  return {
    [=](create_atom, sandbox_spec& spec) {
      // From the request's arrival when the requester stamped it (a create
      // dequeued late from a long mailbox is no less late), else from now.
      auto deadline = create_deadline(spec, self->clock().now());
      auto create = [=](caf::response_promise& rp) {
        // Past the requester's patience: nobody would stop this sandbox.
        if (self->clock().now() > deadline) {
          self->state.world->on_create_abandoned();
          rp.deliver(make_error(provider_errc::sandbox_error,
                                "create: finished after its deadline"));
          return;
        }
        rp.deliver(sandbox_handle{
          self->state.world->on_created(self->state.index), "scripted", ""});
      };
      auto none = [] { return caf::error{}; };
      return respond(self, scripted_op::create, {}, none, create, wrong_type);
    },
    [=](status_atom, sandbox_handle& h) {
      auto id = h.sandbox_id;
      auto known = [=]() -> caf::error {
        if (self->state.world->is_known(id))
          return {};
        return no_such_sandbox(scripted_op::status, id);
      };
      auto status = [=](caf::response_promise& rp) {
        rp.deliver(
          self->state.world->poll(id, self->state.script.starting_polls));
      };
      auto unknown = [](caf::response_promise& rp) {
        rp.deliver(sandbox_status::unknown);
      };
      return respond(self, scripted_op::status, id, known, status, unknown);
    },
    [=](upload_atom, sandbox_handle& h, std::string&, file_map&) {
      return respond(self, scripted_op::upload, h.sandbox_id,
                     live(self, scripted_op::upload, h.sandbox_id),
                     ok_atom_reply, wrong_type);
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
      return respond(self, scripted_op::exec, h.sandbox_id,
                     live(self, scripted_op::exec, h.sandbox_id), ok, broken);
    },
    [=](download_atom, sandbox_handle& h, std::string&) {
      auto ok = [=](caf::response_promise& rp) {
        rp.deliver(self->state.script.result_text);
      };
      auto junk = [](caf::response_promise& rp) {
        rp.deliver(std::string{"\x01\x02 this is not JSON {"});
      };
      return respond(self, scripted_op::download, h.sandbox_id,
                     live(self, scripted_op::download, h.sandbox_id), ok, junk);
    },
    [=](stop_atom, sandbox_handle& h) {
      auto id = h.sandbox_id;
      // Carried out on arrival (unless the provider crashes first): a
      // stop's faults are faults of its answer.
      self->state.world->on_stop_call();
      auto carry_out = [=]() -> caf::error {
        auto& st = self->state;
        if (st.world->stop(id, st.index) == scripted_stop_result::unknown)
          return no_such_sandbox(scripted_op::stop, id);
        return {};
      };
      return respond(self, scripted_op::stop, id, carry_out, ok_atom_reply,
                     wrong_type);
    },
    [=](delayed_atom, uint64_t token) {
      auto i = self->state.delayed.find(token);
      if (i == self->state.delayed.end())
        return;
      auto entry = std::move(i->second);
      self->state.delayed.erase(i);
      if (entry.is_create)
        --self->state.exit->creates_in_flight;
      entry.reply(entry.rp);
    },
  };
}

} // namespace

provider_actor spawn_scripted_provider(caf::actor_system& sys,
                                       scripted_script script,
                                       std::shared_ptr<scripted_world> world) {
  auto hdl = sys.spawn(scripted_provider, std::move(script), std::move(world));
  return caf::actor_cast<provider_actor>(hdl);
}

namespace {

class scripted_backend : public provider_backend {
public:
  explicit scripted_backend(const json& settings)
      : identity_(settings_identity("scripted", settings, {"ledger_file"})),
        script_(parse_scripted_script(settings)),
        world_(std::make_shared<scripted_world>()) {
    // nop
  }

  scripted_backend(scripted_script script,
                   std::shared_ptr<scripted_world> world)
      : identity_(json{{"name", "scripted"}}), script_(std::move(script)),
        world_(world ? std::move(world) : std::make_shared<scripted_world>()) {
    // nop
  }

  // Every actor of one backend lives in the same world: a replacement sees
  // its predecessors' sandboxes.
  provider_actor spawn(caf::actor_system& sys) const override {
    return spawn_scripted_provider(sys, script_, world_);
  }

  void shut_down() override {
    // the world is plain memory: nothing to stop
  }

  json grade_identity(const verification_config&) const override {
    return identity_;
  }

private:
  json identity_;
  scripted_script script_;
  std::shared_ptr<scripted_world> world_;
};

} // namespace

std::shared_ptr<provider_backend> make_scripted_backend(const json& settings) {
  return std::make_shared<scripted_backend>(settings);
}

std::shared_ptr<provider_backend>
make_scripted_backend(scripted_script script,
                      std::shared_ptr<scripted_world> world) {
  return std::make_shared<scripted_backend>(std::move(script),
                                            std::move(world));
}

} // namespace sv
