#include "apps/sv_serve/tokens.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>

namespace sv::serve {

namespace {

std::string_view trim(std::string_view s) {
  auto ws = " \t\r\n";
  auto b = s.find_first_not_of(ws);
  if (b == std::string_view::npos)
    return {};
  auto e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

} // namespace

token_set::token_set(std::string path) : path_(std::move(path)) {
  tokens_ = std::make_shared<const std::vector<std::string>>();
  if (!path_.empty())
    if (auto err = reload(); !err.empty())
      throw std::runtime_error(err);
}

std::string token_set::reload() {
  std::ifstream in{path_};
  if (!in)
    return "token file " + path_ + ": " + std::strerror(errno);
  auto fresh = std::make_shared<std::vector<std::string>>();
  std::string line;
  while (std::getline(in, line))
    if (auto t = trim(line); !t.empty())
      fresh->emplace_back(t);
  if (in.bad())
    return "token file " + path_ + ": read error";
  if (fresh->empty())
    return "token file " + path_ + ": no token in it";
  std::lock_guard<std::mutex> guard{mtx_};
  tokens_ = std::move(fresh);
  return {};
}

bool token_set::equal(std::string_view a, std::string_view b) {
  // Every byte of the longer one is looked at, whatever matches.
  auto n = std::max(a.size(), b.size());
  unsigned diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    auto x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0u;
    auto y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0u;
    diff |= x ^ y;
  }
  return diff == 0;
}

bool token_set::accepts(std::string_view authorization) const {
  std::string ignored;
  return accepts(authorization, ignored);
}

bool token_set::accepts(std::string_view authorization,
                        std::string& owner) const {
  owner.clear();
  if (!required())
    return true;
  constexpr std::string_view scheme = "Bearer ";
  if (authorization.size() <= scheme.size() ||
      authorization.substr(0, scheme.size()) != scheme)
    return false;
  auto token = trim(authorization.substr(scheme.size()));
  std::shared_ptr<const std::vector<std::string>> tokens;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    tokens = tokens_;
  }
  bool ok = false;
  for (auto& t : *tokens)
    ok |= equal(token, t); // no early exit: the time says nothing
  if (ok)
    owner = std::string{token};
  return ok;
}

} // namespace sv::serve
