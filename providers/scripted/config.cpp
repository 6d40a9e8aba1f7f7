// The settings of a `scripted` block: its script (providers/scripted.hpp).

#include "messages/errors.hpp"
#include "messages/json.hpp"
#include "providers/scripted.hpp"

#include <chrono>
#include <string>

namespace sv {

namespace {

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
                "starting_polls", "crash_rate"});
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
    } else if (key == "crash_rate") {
      if (!value.is_number() || value.get<double>() < 0 ||
          value.get<double>() > 1)
        throw json_error(key, "expected a number in [0, 1]");
      out.crash_rate = value.get<double>();
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

} // namespace sv
