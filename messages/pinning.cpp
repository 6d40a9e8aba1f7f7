// Which node a handle's sandbox is pinned to, as its provider says
// (messages/protocol.hpp): the supervisor asks, a provider answers, and no
// one outside providers/ knows which providers pin.

#include "messages/protocol.hpp"

#include <map>
#include <mutex>

namespace sv {

namespace {

struct pinnings {
  std::mutex mtx;
  std::map<std::string, node_pinning, std::less<>> by_provider;
};

pinnings& registry() {
  static pinnings instance;
  return instance;
}

} // namespace

void register_node_pinning(const std::string& provider_name, node_pinning fn) {
  auto& r = registry();
  std::lock_guard<std::mutex> guard{r.mtx};
  r.by_provider[provider_name] = fn;
}

std::string pinned_node(const sandbox_handle& hdl) {
  node_pinning fn = nullptr;
  {
    auto& r = registry();
    std::lock_guard<std::mutex> guard{r.mtx};
    auto i = r.by_provider.find(hdl.provider_name);
    if (i == r.by_provider.end())
      return {};
    fn = i->second;
  }
  return fn(hdl);
}

} // namespace sv
