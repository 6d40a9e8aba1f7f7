#pragma once

// Lets CAF carry nlohmann::json values in messages. Inside one process a
// message is passed by reference count, so no JSON is ever re-serialized;
// between nodes the value travels as its compact text, parsed back with the
// bounded parser (another node's text is as hostile as any input: depth and
// duplicate keys are checked, nothing recurses past the limit).

#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/sec.hpp>
#include <nlohmann/json.hpp>
#include <string_view>

namespace sv {

/// Parses JSON text that came from another node with the bounded parser's
/// default limits (messages/bounded_json.cpp); false if it breaks them.
bool parse_wire_json(std::string_view text, nlohmann::json& out);

} // namespace sv
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
    if (!sv::parse_wire_json(text, x)) {
      x = nullptr;
      return caf::make_error(caf::sec::invalid_argument);
    }
    return caf::none;
  });
  return f(text, load);
}

} // namespace nlohmann
