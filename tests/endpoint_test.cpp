// HOST:PORT and the loopback rule (messages/detail/endpoint.hpp).

#include "messages/detail/endpoint.hpp"

#include <catch2/catch.hpp>
#include <stdexcept>
#include <string>

using sv::endpoint;
using sv::parse_endpoint;
using sv::port_zero;

namespace {

std::string error_of(const std::string& text,
                     port_zero zero = port_zero::refused) {
  try {
    parse_endpoint(text, zero);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

} // namespace

TEST_CASE("endpoint: HOST:PORT, [V6]:PORT and names", "[endpoint]") {
  auto a = parse_endpoint("127.0.0.1:8080");
  CHECK(a.host == "127.0.0.1");
  CHECK(a.port == 8080);
  auto b = parse_endpoint("[::1]:7000");
  CHECK(b.host == "::1");
  CHECK(b.port == 7000);
  auto c = parse_endpoint("node-3.example:65535");
  CHECK(c.host == "node-3.example");
  CHECK(c.port == 65535);
  CHECK(parse_endpoint("localhost:0", port_zero::allowed).port == 0);
}

TEST_CASE("endpoint: refused with the reason", "[endpoint]") {
  CHECK(error_of("127.0.0.1") == "expected HOST:PORT");
  CHECK(error_of(":80") == "expected HOST:PORT");
  CHECK(error_of("127.0.0.1:") == "expected HOST:PORT");
  CHECK(error_of("::1:80") == "expected HOST:PORT");
  CHECK(error_of("[]:80") == "expected HOST:PORT");
  CHECK(error_of("[::1:80") == "expected HOST:PORT");
  CHECK(error_of("127.0.0.1:x") == "bad port");
  CHECK(error_of("127.0.0.1: 80") == "bad port");
  CHECK(error_of("127.0.0.1:+80") == "bad port");
  CHECK(error_of("127.0.0.1:65536") == "bad port");
  CHECK(error_of("127.0.0.1:123456") == "bad port");
  CHECK(error_of("127.0.0.1:0") == "bad port");
  CHECK(error_of("127.0.0.1:0", port_zero::allowed).empty());
}

TEST_CASE("endpoint: loopback by address, after resolution", "[endpoint]") {
  CHECK(sv::is_loopback_host("127.0.0.1"));
  CHECK(sv::is_loopback_host("127.8.9.10"));
  CHECK(sv::is_loopback_host("::1"));
  CHECK(sv::is_loopback_host("::ffff:127.0.0.1"));
  CHECK(sv::is_loopback_host("localhost"));
  CHECK_FALSE(sv::is_loopback_host("0.0.0.0"));
  CHECK_FALSE(sv::is_loopback_host("::"));
  CHECK_FALSE(sv::is_loopback_host("10.1.2.3"));
  CHECK_FALSE(sv::is_loopback_host("::ffff:10.0.0.1"));
  CHECK_FALSE(sv::is_loopback_host(""));
  // A name is judged by its addresses, not its spelling.
  CHECK_FALSE(sv::is_loopback_host("127.0.0.1.invalid"));
}
