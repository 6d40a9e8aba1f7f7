// The seed's function from a plain C++ program (no actors in sight): one
// grader on the local provider, one submission, its parsed result printed,
// or its failure_kind and message.
//
//   build/examples/embed/sv-grader-example [PYTHON]

#include "facade/grader.hpp"

#include <iostream>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

int main(int argc, char** argv) {
  // The runtime logs through spdlog's default logger: to stderr here, so
  // stdout holds only the answer.
  spdlog::set_default_logger(spdlog::stderr_color_mt("grader"));
  sv::json local = sv::json::object();
  if (argc > 1)
    local["python"] = argv[1];
  sv::grader grader{sv::json{{"local", local}}};

  sv::file_map files{{"sandbox_runner.py", R"(import json, sys
request = json.load(open(sys.argv[1]))
answer = sum(request["numbers"])
json.dump({"reward": float(answer == request["expected"]), "answer": answer},
          open(sys.argv[2], "w"))
)"}};
  sv::verification_config config;
  config.python = argc > 1 ? argv[1] : "python3";
  auto reward = grader.run_verification_sandbox(
    config, files, {{"numbers", {1, 2, 3}}, {"expected", 6}},
    /*exec_timeout_s=*/10,
    [](const sv::json& result) { return result.at("reward"); });
  try {
    auto value = reward.get();
    std::cout << "reward: " << value << '\n';
    return 0;
  } catch (const sv::sandbox_verification_error& e) {
    std::cerr << e.failure_kind_name() << ": " << e.what() << '\n';
    return 1;
  }
}
