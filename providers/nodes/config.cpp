// The settings of a `nodes` block (README, "Distributed grading") and the
// middleman a front of them needs.

#include "messages/detail/endpoint.hpp"
#include "messages/errors.hpp"
#include "messages/json.hpp"
#include "providers/nodes/detail/nodes_provider.hpp"
#include "providers/nodes/detail/peer_identity.hpp"

#include <caf/actor_system_config.hpp>
#include <stdexcept>

namespace sv {

namespace {

bool is_endpoint(const std::string& text, port_zero zero = port_zero::refused) {
  try {
    parse_endpoint(text, zero);
    return true;
  } catch (const std::invalid_argument&) {
    return false;
  }
}

} // namespace

nodes_settings parse_nodes_settings(const json& j) {
  if (!j.is_object())
    throw json_error("", "expected an object");
  nodes_settings out;
  for (auto& item : j.items()) {
    auto& k = item.key();
    auto& v = item.value();
    if (k == "endpoints") {
      if (!v.is_array() || v.empty())
        throw json_error(k, "expected a non-empty array of \"HOST:PORT\"");
      for (auto& e : v) {
        if (!e.is_string() || !is_endpoint(e.get<std::string>()))
          throw json_error(k, "expected \"HOST:PORT\", got " + e.dump());
        out.endpoints.push_back(e.get<std::string>());
      }
    } else if (k == "listen") {
      // Port 0 picks a free one (tests).
      if (!v.is_string() ||
          !is_endpoint(v.get<std::string>(), port_zero::allowed))
        throw json_error(k, "expected \"HOST:PORT\", got " + v.dump());
      out.listen = v.get<std::string>();
    } else if (k == "insecure") {
      if (!v.is_boolean())
        throw json_error(k, "expected true or false");
      out.insecure = v.get<bool>();
    } else if (k == "join_wait_s") {
      if (!v.is_number() || v.get<double>() < 0 || v.get<double>() > 3600)
        throw json_error(k, "expected seconds 0..3600");
      out.join_wait_s = v.get<double>();
    } else if (k == "tls") {
      if (!v.is_object())
        throw json_error(k, "expected {\"cert\", \"key\", \"ca\"}");
      for (auto& t : v.items()) {
        if (!t.value().is_string())
          throw json_error(k + "." + t.key(), "expected a file name");
        auto s = t.value().get<std::string>();
        if (t.key() == "cert")
          out.tls.cert = s;
        else if (t.key() == "key")
          out.tls.key = s;
        else if (t.key() == "ca")
          out.tls.ca = s;
        else
          throw json_error(k + "." + t.key(),
                           "unknown key (known: cert, key, ca)");
      }
      if (out.tls.cert.empty() || out.tls.key.empty() || out.tls.ca.empty())
        throw json_error(k, "needs cert, key and ca");
    } else if (k == "connect_timeout_s" || k == "queue_timeout_s") {
      if (!v.is_number() || v.get<double>() <= 0)
        throw json_error(k, "expected a positive number of seconds");
      (k == "connect_timeout_s" ? out.connect_timeout_s : out.queue_timeout_s) =
        v.get<double>();
    } else if (k == "max_frame_bytes") {
      if (!v.is_number_unsigned() || v.get<uint64_t>() < (1u << 20) ||
          v.get<uint64_t>() > (1u << 30))
        throw json_error(k, "expected bytes 1048576..1073741824");
      out.max_frame_bytes = v.get<uint32_t>();
    } else if (k == "max_queue") {
      if (!v.is_number_unsigned() || v.get<uint64_t>() == 0)
        throw json_error(k, "expected a positive integer");
      out.max_queue = v.get<size_t>();
    } else if (k == "retry_budget_ratio" || k == "retry_budget_burst") {
      if (!v.is_number() || v.get<double>() < 0 || v.get<double>() > 1000)
        throw json_error(k, "expected a number 0..1000");
      (k == "retry_budget_ratio" ? out.retry_budget_ratio
                                 : out.retry_budget_burst) = v.get<double>();
    } else if (k == "retry_infra") {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
          v.get<int64_t>() > 10)
        throw json_error(k, "expected an integer 0..10");
      out.retry_infra = v.get<int>();
    } else {
      throw json_error(k, "unknown setting (known: endpoints, tls, "
                          "listen, insecure, join_wait_s, "
                          "connect_timeout_s, queue_timeout_s, max_queue, "
                          "max_frame_bytes, "
                          "retry_infra, retry_budget_ratio, "
                          "retry_budget_burst)");
    }
  }
  if (out.endpoints.empty() && out.listen.empty())
    throw json_error("endpoints", "missing: the nodes to grade on (or "
                                  "\"listen\" for nodes that join)");
  if (!out.tls.enabled() && !out.insecure)
    throw json_error("tls", "missing: " + tls_missing_hint(front_role) +
                              " (\"insecure\": true)");
  if (out.tls.enabled() && out.insecure)
    throw json_error("insecure", "tls and insecure exclude each other");
  return out;
}

void configure_front(caf::actor_system_config& cfg,
                     const nodes_settings& settings) {
  configure_middleman(cfg, settings.tls, settings.insecure, front_role,
                      settings.max_frame_bytes);
}

} // namespace sv
