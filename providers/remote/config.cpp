// The settings of a `{"remote": {...}}` provider block.

#include "messages/detail/endpoint.hpp"
#include "messages/json.hpp"
#include "providers/remote.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace sv {

namespace {

constexpr const char* known_keys =
  "url, token_file, ca_file, connections, timeout_s, exec_grace_s, "
  "create_attempts, max_response_bytes";

double read_seconds(const json& v, const std::string& key) {
  if (!v.is_number() || !(v.get<double>() > 0) || v.get<double>() > 604800)
    throw json_error(key, "expected a number of seconds in (0, 604800]");
  return v.get<double>();
}

uint64_t read_count(const json& v, const std::string& key, uint64_t min,
                    uint64_t max) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
      v.get<uint64_t>() < min || v.get<uint64_t>() > max)
    throw json_error(key, "expected an integer in [" + std::to_string(min) +
                            ", " + std::to_string(max) + "]");
  return v.get<uint64_t>();
}

/// "http://HOST:PORT" or "https://HOST:PORT" (an optional trailing slash).
void read_url(const std::string& url, remote_provider_config& out) {
  auto bad = [&](const std::string& why) {
    return json_error("url", "\"" + url + "\": " + why +
                               " (expected \"http://HOST:PORT\" or "
                               "\"https://HOST:PORT\")");
  };
  std::string rest;
  if (url.rfind("http://", 0) == 0) {
    rest = url.substr(7);
  } else if (url.rfind("https://", 0) == 0) {
    rest = url.substr(8);
    out.tls = true;
  } else {
    throw bad("not an http or https URL");
  }
  if (!rest.empty() && rest.back() == '/')
    rest.pop_back();
  if (rest.find('/') != std::string::npos ||
      rest.find('@') != std::string::npos)
    throw bad("a path or user info is not allowed");
  // The authority is HOST:PORT as every program takes it (the one parser).
  endpoint where;
  try {
    where = parse_endpoint(rest);
  } catch (const std::invalid_argument& e) {
    throw bad(std::string{e.what()} == "bad port" ? "the port must be 1..65535"
                                                  : "no host or no port");
  }
  out.url = url;
  out.host = where.host;
  out.port = where.port;
}

} // namespace

remote_provider_config parse_remote_provider_config(const json& settings) {
  if (!settings.is_object())
    throw json_error("", std::string{"expected an object, got "} +
                           settings.type_name());
  remote_provider_config out;
  for (auto& item : settings.items()) {
    auto& k = item.key();
    auto& v = item.value();
    if (k == "url") {
      if (!v.is_string())
        throw json_error(k, "expected a string like \"http://HOST:PORT\"");
      read_url(v.get<std::string>(), out);
    } else if (k == "token_file") {
      if (!v.is_string() || v.get<std::string>().empty())
        throw json_error(k, "expected a file name");
      out.token_file = v.get<std::string>();
    } else if (k == "ca_file") {
      if (!v.is_string() || v.get<std::string>().empty())
        throw json_error(k, "expected a file name (PEM)");
      out.ca_file = v.get<std::string>();
    } else if (k == "connections") {
      out.connections = read_count(v, k, 1, 4096);
    } else if (k == "timeout_s") {
      out.timeout_s = read_seconds(v, k);
    } else if (k == "exec_grace_s") {
      out.exec_grace_s = read_seconds(v, k);
    } else if (k == "create_attempts") {
      out.create_attempts = static_cast<uint32_t>(read_count(v, k, 1, 10));
    } else if (k == "max_response_bytes") {
      out.max_response_bytes = read_count(v, k, 4096, uint64_t{1} << 34);
    } else {
      throw json_error(k, std::string{"unknown setting (known: "} + known_keys +
                            ")");
    }
  }
  if (out.url.empty())
    throw json_error("url", "missing: the sv-serve to use, "
                            "\"http://HOST:PORT\"");
  if (!out.ca_file.empty() && !out.tls)
    throw json_error("ca_file", "only for an https url");
  return out;
}

/// The first line of the token file, without surrounding whitespace.
std::string read_token_file(const std::string& path) {
  std::ifstream in{path};
  if (!in)
    throw std::runtime_error("remote provider: cannot read the token file " +
                             path + ": " + std::strerror(errno));
  std::string line;
  std::getline(in, line);
  auto first = line.find_first_not_of(" \t\r\n");
  auto last = line.find_last_not_of(" \t\r\n");
  if (first == std::string::npos)
    throw std::runtime_error("remote provider: the token file " + path +
                             " is empty");
  auto token = line.substr(first, last - first + 1);
  for (unsigned char c : token)
    if (c < 0x21 || c > 0x7e)
      throw std::runtime_error("remote provider: the token in " + path +
                               " has a character a header cannot carry");
  return token;
}

} // namespace sv
