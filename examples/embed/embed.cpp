// Embedding the runtime in a CAF application: one submission graded in a
// fresh sandbox of the local provider, its outcome printed as JSON.
//
//   build/examples/embed/sv-embed-example [PYTHON]
//
// examples/embed/CMakeLists.txt also builds it out of tree against the
// installed package (README: Installing and using the package).

#include "actors/scheduler.hpp"
#include "actors/supervisor.hpp"
#include "messages/errors.hpp"
#include "messages/json.hpp"
#include "messages/registry.hpp"
#include "providers/local.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <iostream>

int main(int argc, char** argv) {
  caf::actor_system_config cfg;
  sv::register_protocol(cfg); // the same type names on every node
  sv::install_scheduler(cfg); // optional: the runtime's tuned scheduler
  caf::actor_system sys{cfg};

  sv::local_provider_config provider_cfg;
  if (argc > 1)
    provider_cfg.python = argv[1];
  auto provider = sv::spawn_local_provider(sys, provider_cfg);
  auto supervisor = sv::spawn_supervisor(sys, provider, {});

  // A runner reads request.json and writes result.json; the question is
  // part of the request, the answer part of the result.
  sv::verification_request req;
  req.id = "embed-1";
  req.files["sandbox_runner.py"] = R"(import json, sys
request = json.load(open(sys.argv[1]))
answer = sum(request["numbers"])
json.dump({"reward": float(answer == request["expected"]), "answer": answer},
          open(sys.argv[2], "w"))
)";
  req.request = {{"numbers", {1, 2, 3}}, {"expected", 6}};
  req.exec_timeout_s = 10;

  int status = 1;
  caf::scoped_actor self{sys};
  self
    ->request(supervisor, std::chrono::minutes{2}, sv::verify_atom::value,
              std::move(req))
    .receive(
      [&](sv::verification_outcome& out) {
        std::cout << sv::json(out).dump(2) << '\n';
        status = out.ok ? 0 : 1;
      },
      [&](caf::error& err) {
        std::cerr << "no reply: " << sv::describe(err) << '\n';
      });
  caf::anon_send_exit(supervisor, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(provider, caf::exit_reason::user_shutdown);
  return status;
}
