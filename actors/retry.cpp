#include "actors/retry.hpp"

#include <algorithm>

namespace sv {

bool is_retryable(const verification_outcome& out) {
  if (out.ok || out.failure.kind != failure_kind::provider_unavailable)
    return false;
  switch (out.failure.cause) {
  case failure_cause::overloaded:
  case failure_cause::killed:
    return false;
  default:
    break;
  }
  switch (out.failure.state) {
  case verification_state::ready:
  case verification_state::upload:
    // Before the runner: only a lost node (a ready timeout retried would
    // cost another ready_timeout_s).
    return out.failure.cause == failure_cause::node_down;
  case verification_state::exec:
  case verification_state::download:
    return true;
  default:
    return false;
  }
}

retry_budget::retry_budget(const retry_settings& cfg)
    : ratio_(std::max(0.0, cfg.budget_ratio)),
      burst_(std::max(0.0, cfg.budget_burst)), tokens_(burst_) {
  // nop
}

void retry_budget::earn() {
  tokens_ = std::min(burst_, tokens_ + ratio_);
}

bool retry_budget::take() {
  if (tokens_ < 1.0)
    return false;
  tokens_ -= 1.0;
  return true;
}

void prepare_retry(verification_request& req, const std::string& failed_node) {
  if (failed_node.empty())
    return;
  auto& opts = req.config.provider_options;
  if (!opts.is_object())
    opts = json::object();
  auto& avoid = opts[avoid_nodes_option];
  if (!avoid.is_array())
    avoid = json::array();
  if (std::find(avoid.begin(), avoid.end(), json(failed_node)) == avoid.end())
    avoid.push_back(failed_node);
}

} // namespace sv
