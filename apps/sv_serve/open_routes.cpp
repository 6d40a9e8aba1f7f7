#include "apps/sv_serve/open_routes.hpp"

#include <boost/asio/ip/address.hpp>
#include <stdexcept>

namespace sv::serve {

namespace {

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    auto end = list.find(',', start);
    if (end == std::string::npos)
      end = list.size();
    auto item = list.substr(start, end - start);
    auto b = item.find_first_not_of(' ');
    auto e = item.find_last_not_of(' ');
    if (b != std::string::npos)
      out.push_back(item.substr(b, e - b + 1));
    start = end + 1;
  }
  return out;
}

/// `text` as 16 bytes (IPv4 mapped); false when it is no address.
bool address_bytes(const std::string& text, std::array<uint8_t, 16>& out,
                   bool& v4) {
  boost::system::error_code ec;
  auto addr = boost::asio::ip::make_address(text, ec);
  if (ec)
    return false;
  if (addr.is_v6() && addr.to_v6().is_v4_mapped())
    addr = boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped,
                                            addr.to_v6());
  v4 = addr.is_v4();
  out = (v4 ? boost::asio::ip::make_address_v6(boost::asio::ip::v4_mapped,
                                               addr.to_v4())
            : addr.to_v6())
          .to_bytes();
  return true;
}

ip_network parse_network(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return std::invalid_argument("--open-from " + text + ": " + why);
  };
  ip_network net;
  net.text = text;
  auto slash = text.find('/');
  bool v4 = false;
  if (!address_bytes(text.substr(0, slash), net.prefix, v4))
    throw bad("not an IP address");
  unsigned max = v4 ? 32 : 128;
  unsigned bits = max;
  if (slash != std::string::npos) {
    auto digits = text.substr(slash + 1);
    if (digits.empty() || digits.size() > 3 ||
        digits.find_first_not_of("0123456789") != std::string::npos ||
        std::stoul(digits) > max)
      throw bad("the prefix length must be 0 to " + std::to_string(max));
    bits = static_cast<unsigned>(std::stoul(digits));
  }
  net.bits = v4 ? bits + 96 : bits;
  return net;
}

} // namespace

bool ip_network::contains(const std::array<uint8_t, 16>& address) const {
  for (unsigned i = 0; i < bits; ++i) {
    auto mask = static_cast<uint8_t>(0x80u >> (i % 8));
    if ((address[i / 8] & mask) != (prefix[i / 8] & mask))
      return false;
  }
  return true;
}

open_routes::open_routes(const std::string& routes,
                         const std::string& networks) {
  for (auto& name : split(routes)) {
    if (name == "run_code")
      run_code_ = true;
    else if (name == "execute")
      execute_ = true;
    else
      throw std::invalid_argument("--open-routes " + routes + ": unknown " +
                                  "route \"" + name +
                                  "\" (allowed: run_code, execute)");
  }
  if (none() && !networks.empty())
    throw std::invalid_argument("--open-from needs --open-routes");
  networks_ = {parse_network("127.0.0.0/8"), parse_network("::1/128")};
  for (auto& text : split(networks))
    networks_.push_back(parse_network(text));
}

bool open_routes::open_to(std::string_view path,
                          const std::string& peer) const {
  bool open = (run_code_ && (path == "/run_code" || path == "/v1/languages")) ||
              (execute_ && path == "/execute");
  if (!open)
    return false;
  std::array<uint8_t, 16> bytes{};
  bool v4 = false;
  if (!address_bytes(peer, bytes, v4))
    return false;
  for (auto& net : networks_)
    if (net.contains(bytes))
      return true;
  return false;
}

std::string open_routes::describe() const {
  std::string routes = run_code_ ? "/run_code, /v1/languages" : "";
  if (execute_)
    routes += std::string{routes.empty() ? "" : ", "} + "/execute";
  std::string from;
  for (auto& net : networks_)
    from += (from.empty() ? "" : ", ") + net.text;
  return routes + " served WITHOUT a token to " + from;
}

} // namespace sv::serve
