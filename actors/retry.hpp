#pragma once

// Retrying a verification that failed because of the infrastructure after
// its sandbox existed (a node lost mid-exec, a sandbox-level error): once
// more in a fresh sandbox, away from the node that failed, within a budget
// so that a dead cluster does not become a retry storm. Failures that are
// the submission's own (verifier_error, invalid_request) are never retried.
// Pure logic: the supervisor asks it, and does the retrying.

#include "messages/protocol.hpp"

#include <cstdint>
#include <string>

namespace sv {

struct retry_settings {
  /// Retries per submission (the block's `retry_infra`); 0: none.
  uint32_t max_retries = 0;
  /// Retries earned per submission: over a long run, retries are at most
  /// this fraction of the submissions (plus the burst).
  double budget_ratio = 0.1;
  /// Retries available at once (and at the start).
  double budget_burst = 10;
};

/// The provider option a retried request carries: the nodes it should not
/// be placed on (a JSON array of "HOST:PORT"). The nodes provider reads it
/// and removes it; other providers ignore it.
inline constexpr const char* avoid_nodes_option = "avoid_nodes";

/// Whether `out` is an infrastructure failure worth a fresh sandbox: a
/// provider_unavailable in exec or download, or a node lost (node_down) in
/// ready or upload. A create failed by a node is retried by the nodes
/// provider itself; admission rejections (overloaded) and cancels (killed)
/// are the caller's to handle.
bool is_retryable(const verification_outcome& out);

/// A token bucket: each submission earns `budget_ratio` of a retry, up to
/// `budget_burst`; a retry spends one.
class retry_budget {
public:
  explicit retry_budget(const retry_settings& cfg = {});

  /// A new submission was admitted.
  void earn();

  /// Takes one retry if there is one.
  bool take();

  double tokens() const noexcept { return tokens_; }

private:
  double ratio_;
  double burst_;
  double tokens_;
};

/// The request of attempt `attempt + 1` after attempt `attempt` failed on
/// `failed_node` (empty: not known): the same submission, with that node
/// added to its `avoid_nodes` provider option.
void prepare_retry(verification_request& req, const std::string& failed_node);

} // namespace sv
