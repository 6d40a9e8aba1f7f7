#include "providers/nodes/detail/peer_identity.hpp"

#include <map>
#include <mutex>

namespace sv {

namespace {

struct table {
  std::mutex mtx;
  std::map<caf::node_id, peer_identity> bound;
};

table& the_table() {
  static table t;
  return t;
}

} // namespace

bool peer_registry::bind(const caf::node_id& id, const peer_identity& who) {
  auto& t = the_table();
  std::lock_guard<std::mutex> guard{t.mtx};
  auto [i, added] = t.bound.emplace(id, who);
  return added || i->second == who;
}

void peer_registry::unbind(const caf::node_id& id) {
  auto& t = the_table();
  std::lock_guard<std::mutex> guard{t.mtx};
  t.bound.erase(id);
}

std::optional<peer_identity> peer_registry::find(const caf::node_id& id) {
  auto& t = the_table();
  std::lock_guard<std::mutex> guard{t.mtx};
  auto i = t.bound.find(id);
  if (i == t.bound.end())
    return std::nullopt;
  return i->second;
}

} // namespace sv
