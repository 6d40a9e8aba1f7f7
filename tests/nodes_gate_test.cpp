// The BASP gate's frame checks
// (providers/nodes/detail/transport/frame_check.hpp) on frames made here byte
// by byte: what CAF 0.17.6 would crash or stall on is refused before it parses
// it, CAF's own frames pass.

#include "providers/nodes/detail/transport/frame_check.hpp"

#include <caf/atom.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/node_id.hpp>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

using namespace sv::transport;

namespace {

caf::node_id node(uint8_t tag) {
  caf::node_id::default_data::host_id_type host{};
  host.fill(tag);
  return caf::make_node_id(1000u + tag, host);
}

void put_be(std::vector<char>& out, uint64_t x, int bytes) {
  for (int i = bytes - 1; i >= 0; --i)
    out.push_back(static_cast<char>((x >> (8 * i)) & 0xff));
}

std::vector<char> header(uint8_t op, uint8_t flags, uint32_t len,
                         uint64_t op_data, uint64_t src, uint64_t dest) {
  std::vector<char> out{static_cast<char>(op), 0, 0, static_cast<char>(flags)};
  put_be(out, len, 4);
  put_be(out, op_data, 8);
  put_be(out, src, 8);
  put_be(out, dest, 8);
  return out;
}

std::vector<char> serialized(const caf::node_id& nid) {
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  REQUIRE(!sink(nid));
  return buf;
}

std::vector<char> frame(uint8_t op, uint8_t flags, uint64_t op_data,
                        uint64_t src, uint64_t dest,
                        const std::vector<char>& payload) {
  auto out = header(op, flags, static_cast<uint32_t>(payload.size()), op_data,
                    src, dest);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

/// A caf::message header: zero, the varint length, the type names.
void message_header(std::vector<char>& out, const std::string& tname) {
  out.push_back(0);
  out.push_back(0);
  REQUIRE(tname.size() < 128);
  out.push_back(static_cast<char>(tname.size()));
  out.insert(out.end(), tname.begin(), tname.end());
}

struct peer {
  caf::node_id me = node(1);
  caf::node_id them = node(2);
  frame_check check;
  std::vector<char> out;
  explicit peer(bool dialed) : check(dialed, node(1), frame_limits{}) {}
  bool feed(const std::vector<char>& bytes) {
    return check.feed(bytes.data(), bytes.size(), out);
  }
  /// The client handshake a dialing CAF sends first.
  void hello() {
    REQUIRE(feed(frame(1, 0, 0, 0, 0, serialized(them))));
    REQUIRE(check.take_learned());
    REQUIRE(check.peer() == them);
  }
};

} // namespace

TEST_CASE("gate: a client handshake without payload is refused",
          "[nodes][gate]") {
  peer p{false};
  CHECK_FALSE(p.feed(header(1, 0, 0, 0, 0, 0)));
  CHECK(p.check.refusal() == "client_handshake without payload");
  CHECK(p.out.empty());
}

TEST_CASE("gate: a server handshake of version 3 without payload, or of "
          "another version, is refused",
          "[nodes][gate]") {
  peer p{true};
  CHECK_FALSE(p.feed(header(0, 0, 0, 3, 0, 0)));
  CHECK(p.check.refusal() == "server_handshake without payload");
  peer q{true};
  CHECK_FALSE(q.feed(frame(0, 0, 2, 0, 0, serialized(q.them))));
  CHECK(q.check.refusal() == "server_handshake of BASP version 2 (expected 3)");
}

TEST_CASE("gate: a header announcing 4 GiB is refused on its 32 bytes",
          "[nodes][gate]") {
  peer small{false};
  small.check = frame_check{false, small.me, frame_limits{1000, 64}};
  small.hello();
  CHECK_FALSE(small.feed(header(2, 0, 1001, 0, 0, 7)));
  CHECK(small.check.refusal() == "direct_message announcing 1001 payload "
                                 "bytes (max_frame_bytes 1000)");
  peer p{false};
  p.hello();
  CHECK_FALSE(p.feed(header(2, 0, 0xffffffffu, 0, 0, 7)));
  CHECK(p.check.refusal() == "direct_message announcing 4294967295 payload "
                             "bytes (max_frame_bytes 83886080)");
}

TEST_CASE("gate: routed messages, forwarding stacks, monitor messages for "
          "other nodes and unknown operations are refused",
          "[nodes][gate]") {
  peer p{false};
  p.hello();
  CHECK_FALSE(p.feed(header(3, 0, 40, 0, 1, 7)));
  CHECK(p.check.refusal().rfind("routed_message", 0) == 0);
  peer q{false};
  q.hello();
  std::vector<char> stacked{1, 0, 0, 0, 0, 0, 0, 0, 0};
  CHECK_FALSE(q.feed(frame(2, 0, 0, 0, 7, stacked)));
  CHECK(q.check.refusal() == "direct_message with a forwarding stack of 1");
  peer r{false};
  r.hello();
  auto pl = serialized(r.them);
  auto other = serialized(node(3));
  pl.insert(pl.end(), other.begin(), other.end());
  CHECK_FALSE(r.feed(frame(4, 0, 0, 0, 7, pl)));
  CHECK(r.check.refusal() == "monitor_message not from the peer to this node");
  peer s{false};
  s.hello();
  CHECK_FALSE(s.feed(header(9, 0, 0, 0, 0, 0)));
  CHECK(s.check.refusal() == "unknown BASP operation 9");
}

TEST_CASE("gate: frames before the handshake and a second node id are "
          "refused",
          "[nodes][gate]") {
  peer p{false};
  CHECK_FALSE(p.feed(header(6, 0, 0, 0, 0, 0)));
  CHECK(p.check.refusal() == "heartbeat before the client_handshake");
  peer q{false};
  q.hello();
  CHECK_FALSE(q.feed(frame(1, 2, 0, 0, 0, serialized(node(3)))));
  CHECK(q.check.refusal() == "client_handshake claiming another node id");
  peer r{false};
  CHECK_FALSE(r.feed(frame(1, 0, 0, 0, 0, serialized(r.me))));
  CHECK(r.check.refusal() == "client_handshake claiming this node's id");
}

TEST_CASE("gate: CAF's own frames pass, split anywhere", "[nodes][gate]") {
  peer p{false};
  std::vector<char> all = frame(1, 0, 0, 0, 0, serialized(p.them));
  auto again = frame(1, 2, 0, 0, 0, serialized(p.them));
  all.insert(all.end(), again.begin(), again.end());
  std::vector<char> msg{0}; // empty forwarding stack
  message_header(msg, "@<>+@atom+@str");
  msg.resize(msg.size() + 20, 'x');
  auto direct = frame(2, 0, 0, 5, 7, msg);
  all.insert(all.end(), direct.begin(), direct.end());
  auto beat = header(6, 0, 0, 0, 0, 0);
  all.insert(all.end(), beat.begin(), beat.end());
  for (char c : all)
    REQUIRE(p.check.feed(&c, 1, p.out));
  CHECK(p.out == all);
  CHECK(p.check.peer() == p.them);
}

TEST_CASE("gate: messages nested beyond max_nesting are refused",
          "[nodes][gate]") {
  auto nested = [](int depth) {
    std::vector<char> msg{0};
    for (int i = 0; i < depth; ++i)
      message_header(msg, "@<>+@message");
    message_header(msg, "@<>");
    return msg;
  };
  CHECK(message_nesting(nested(3).data(), nested(3).size()) == 4);
  peer p{false};
  p.hello();
  CHECK(p.feed(frame(2, 0, 0, 5, 7, nested(10))));
  auto deep = nested(300000);
  CHECK_FALSE(p.feed(frame(2, 0, 0, 5, 7, deep)));
  CHECK(p.check.refusal() ==
        "direct_message nesting 300001 messages (max_nesting 64)");
  // Through error contexts (a code and a category between the headers).
  std::vector<char> errs{0};
  for (int i = 0; i < 100; ++i) {
    message_header(errs, "@<>+@error");
    errs.resize(errs.size() + 9, 1);
  }
  CHECK(message_nesting(errs.data(), errs.size()) == 100);
  std::vector<char> cfg{0};
  message_header(cfg, "@<>+@config_value");
  CHECK(message_nesting(cfg.data(), cfg.size()) == UINT32_MAX);
}

TEST_CASE("gate: a named receiver is only CAF's hello to the spawn server",
          "[nodes][gate]") {
  auto named = [](caf::atom_value receiver, const std::string& tname) {
    std::vector<char> msg{0};
    message_header(msg, tname);
    msg.resize(msg.size() + 24, 'x');
    return frame(2, 1, 0, 5, static_cast<uint64_t>(receiver), msg);
  };
  peer p{false};
  p.hello();
  CHECK(p.feed(named(caf::atom("SpawnServ"), "@<>+@atom+@atom+@str")));
  CHECK_FALSE(
    p.feed(named(caf::atom("SpawnServ"), "@<>+@atom+@str+@message+@strset")));
  CHECK(p.check.refusal().rfind("direct_message to named actor SpawnServ", 0) ==
        0);
  peer q{false};
  q.hello();
  CHECK_FALSE(q.feed(named(caf::atom("ConfigServ"), "@<>+@atom+@atom+@str")));
  CHECK(q.check.refusal().rfind("direct_message to named actor ConfigServ",
                                0) == 0);
}
