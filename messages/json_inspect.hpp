#pragma once

// Lets CAF carry nlohmann::json values in messages. Inside one process a
// message is passed by reference count, so no JSON is ever re-serialized;
// between nodes the value travels as its compact text.

#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/sec.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>

namespace nlohmann {

template <class Inspector>
typename std::enable_if<Inspector::reads_state,
                        typename Inspector::result_type>::type
inspect(Inspector& f, json& x) {
  auto text = x.dump();
  return f(text);
}

template <class Inspector>
typename std::enable_if<Inspector::writes_state,
                        typename Inspector::result_type>::type
inspect(Inspector& f, json& x) {
  std::string text;
  auto load = caf::meta::load_callback([&]() -> caf::error {
    x = json::parse(text, nullptr, false);
    if (x.is_discarded())
      return caf::make_error(caf::sec::invalid_argument);
    return caf::none;
  });
  return f(text, load);
}

} // namespace nlohmann
