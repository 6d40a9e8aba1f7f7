#include "testing/faults.hpp"

namespace sv::testing {

faults& faults::then(scripted_op op, scripted_fault fault,
                     caf::timespan delay) {
  script_.steps[op].push_back(scripted_step{fault, delay, false});
  return *this;
}

faults& faults::times(scripted_op op, size_t n, scripted_fault fault,
                      caf::timespan delay) {
  for (size_t i = 0; i < n; ++i)
    then(op, fault, delay);
  return *this;
}

faults& faults::always(scripted_op op, scripted_fault fault,
                       caf::timespan delay) {
  script_.steps[op].push_back(scripted_step{fault, delay, true});
  return *this;
}

faults& faults::result(std::string result_json_text) {
  script_.result_text = std::move(result_json_text);
  return *this;
}

faults& faults::starting_polls(uint32_t n) {
  script_.starting_polls = n;
  return *this;
}

faults& faults::random(double rate, uint64_t seed) {
  script_.fault_rate = rate;
  script_.seed = seed;
  return *this;
}

} // namespace sv::testing
