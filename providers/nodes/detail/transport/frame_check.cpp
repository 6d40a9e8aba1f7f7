#include "providers/nodes/detail/transport/frame_check.hpp"

#include <caf/atom.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/deep_to_string.hpp>
#include <cstring>
#include <string_view>

namespace sv::transport {

namespace {

enum op : uint8_t {
  server_handshake = 0,
  client_handshake = 1,
  direct_message = 2,
  routed_message = 3,
  monitor_message = 4,
  down_message = 5,
  heartbeat = 6,
};

constexpr uint8_t named_receiver_flag = 0x01;

uint32_t be32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) |
         (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

uint64_t be64(const unsigned char* p) {
  return (uint64_t{be32(p)} << 32) | be32(p + 4);
}

/// A node id at the front of `data` (CAF's default kind only: an atom
/// "default", a process id and a 20-byte host id); none when it is not.
caf::node_id read_node_id(const char* data, size_t size, size_t& used) {
  used = 0;
  constexpr size_t default_size = 8 + 4 + 20;
  if (size < default_size ||
      be64(reinterpret_cast<const unsigned char*>(data)) !=
        static_cast<uint64_t>(caf::atom("default")))
    return caf::node_id{};
  caf::binary_deserializer source{nullptr, data, default_size};
  caf::node_id out;
  if (source(out) || source.remaining() != 0)
    return caf::node_id{};
  used = default_size;
  return out;
}

/// The varint CAF writes before a sequence (7 bits a byte, low first).
bool read_varint(const char* data, size_t size, size_t& pos, uint64_t& out) {
  out = 0;
  for (int shift = 0; shift < 64 && pos < size; shift += 7) {
    auto b = static_cast<unsigned char>(data[pos++]);
    out |= uint64_t{b & 0x7fu} << shift;
    if ((b & 0x80) == 0)
      return true;
  }
  return false;
}

/// At most 64 characters of `x`, others than printable ASCII as '?'.
std::string printable(std::string x) {
  if (x.size() > 64)
    x = x.substr(0, 64) + "...";
  for (auto& c : x)
    if (c < 0x20 || c > 0x7e)
      c = '?';
  return x;
}

std::string op_name(uint8_t x) {
  static const char* names[] = {
    "server_handshake", "client_handshake", "direct_message", "routed_message",
    "monitor_message",  "down_message",     "heartbeat"};
  return x <= heartbeat ? names[x] : "operation " + std::to_string(x);
}

/// The message types CAF streams and configuration use: recursive without
/// a message header in between, never sent by our protocol.
bool recursive_type_name(std::string_view tname) {
  for (auto bad : {"@config_value", "@downstream_msg", "@upstream_msg",
                   "@open_stream_msg"})
    if (tname.find(bad) != std::string_view::npos)
      return true;
  return false;
}

} // namespace

uint32_t message_nesting(const char* payload, size_t size) {
  // A caf::message is written as a zero uint16, the varint length of its
  // type-name list and the list ("@<>+T1+T2..."), then its elements. A
  // nested message (or an error's context, after its code and category,
  // or an exit/down message's, after an address) starts a few bytes after
  // the header of the one holding it. Headers closer than `reach` to the
  // end of the previous one count as one chain.
  constexpr size_t reach = 64;
  static constexpr char magic[] = "@<>";
  uint32_t depth = 0;
  uint32_t deepest = 0;
  size_t last_end = 0;
  bool have_last = false;
  const char* end = payload + size;
  const char* p = payload;
  while (p < end) {
    auto* hit = static_cast<const char*>(
      memmem(p, static_cast<size_t>(end - p), magic, 3));
    if (hit == nullptr)
      break;
    p = hit + 1;
    auto at = static_cast<size_t>(hit - payload);
    // The varint length right before: one byte (< 128) or two.
    size_t len = 0;
    size_t start = 0;
    auto b1 = at >= 1 ? static_cast<unsigned char>(payload[at - 1]) : 0xffu;
    if (at >= 3 && b1 >= 3 && b1 < 0x80) {
      len = b1;
      start = at - 3;
    } else if (at >= 4 && b1 < 0x80 && b1 > 0 &&
               (static_cast<unsigned char>(payload[at - 2]) & 0x80) != 0) {
      len = (size_t{b1} << 7) | (payload[at - 2] & 0x7f);
      start = at - 4;
    } else {
      continue;
    }
    if (payload[start] != 0 || payload[start + 1] != 0 || at + len > size)
      continue;
    auto tname = std::string_view{hit, len};
    if (len > 3 && tname.compare(0, 4, "@<>+") != 0)
      continue;
    if (recursive_type_name(tname))
      return UINT32_MAX;
    depth = have_last && start <= last_end + reach ? depth + 1 : 1;
    deepest = std::max(deepest, depth);
    have_last = true;
    last_end = at + len;
  }
  return deepest;
}

frame_check::frame_check(bool dialed, caf::node_id self, frame_limits limits)
    : dialed_(dialed), self_(std::move(self)), limits_(limits) {
  // nop
}

bool frame_check::refuse(std::string why) {
  refusal_ = std::move(why);
  return false;
}

bool frame_check::feed(const char* data, size_t n, std::vector<char>& out) {
  if (!refusal_.empty())
    return false;
  buf_.insert(buf_.end(), data, data + n);
  size_t pos = 0;
  while (buf_.size() - pos >= basp_header_size) {
    auto* hdr = reinterpret_cast<const unsigned char*>(buf_.data() + pos);
    auto len = be32(hdr + 4);
    // Checked on the header alone, before waiting for any payload.
    if (hdr[0] > heartbeat)
      return refuse("unknown BASP operation " + std::to_string(hdr[0]));
    if (len > limits_.max_payload)
      return refuse(op_name(hdr[0]) + " announcing " + std::to_string(len) +
                    " payload bytes (max_frame_bytes " +
                    std::to_string(limits_.max_payload) + ")");
    if ((hdr[0] == server_handshake || hdr[0] == client_handshake) && len == 0)
      return refuse(op_name(hdr[0]) + " without payload");
    if (hdr[0] == server_handshake && be64(hdr + 8) != basp_version)
      return refuse("server_handshake of BASP version " +
                    std::to_string(be64(hdr + 8)) + " (expected " +
                    std::to_string(basp_version) + ")");
    if (hdr[0] == routed_message)
      return refuse("routed_message (this gate relays no other node's "
                    "messages)");
    if (buf_.size() - pos < basp_header_size + len)
      break;
    if (!check_frame(hdr, buf_.data() + pos + basp_header_size))
      return false;
    out.insert(out.end(), buf_.data() + pos,
               buf_.data() + pos + basp_header_size + len);
    pos += basp_header_size + len;
  }
  buf_.erase(buf_.begin(), buf_.begin() + static_cast<ptrdiff_t>(pos));
  return true;
}

bool frame_check::check_frame(const unsigned char* hdr, const char* payload) {
  auto operation = hdr[0];
  auto flags = hdr[3];
  auto len = be32(hdr + 4);
  auto op_data = be64(hdr + 8);
  auto src = be64(hdr + 16);
  auto dest = be64(hdr + 24);
  // CAF's own header rules (basp/header.cpp, valid()).
  bool valid = true;
  switch (operation) {
  case server_handshake:
    valid = op_data != 0;
    break;
  case client_handshake:
    valid = src == 0 && dest == 0;
    break;
  case direct_message:
    valid = dest != 0 && len != 0;
    break;
  case monitor_message:
    valid = len != 0 && op_data == 0;
    break;
  case down_message:
    valid = src != 0 && dest == 0 && len != 0 && op_data == 0;
    break;
  case heartbeat:
    valid = src == 0 && dest == 0 && len == 0 && op_data == 0;
    break;
  default:
    break;
  }
  if (!valid)
    return refuse("invalid " + op_name(operation) + " header");
  if (!handshaken_) {
    auto expected = dialed_ ? server_handshake : client_handshake;
    if (operation != expected)
      return refuse(op_name(operation) + " before the " + op_name(expected));
  }
  switch (operation) {
  case server_handshake:
  case client_handshake: {
    if (operation == server_handshake ? !dialed_ || handshaken_ : dialed_)
      return refuse("unexpected " + op_name(operation));
    size_t used = 0;
    auto nid = read_node_id(payload, len, used);
    if (!nid)
      return refuse(op_name(operation) + " without a valid node id");
    if (nid == self_)
      return refuse(op_name(operation) + " claiming this node's id");
    if (operation == client_handshake && used != len)
      return refuse("client_handshake with " + std::to_string(len - used) +
                    " bytes after the node id");
    if (handshaken_) {
      if (nid != peer_)
        return refuse(op_name(operation) + " claiming another node id");
      return true;
    }
    peer_ = std::move(nid);
    handshaken_ = true;
    learned_ = true;
    return true;
  }
  case direct_message: {
    // Payload: the forwarding stack (a vector of actor handles), then
    // the message. A non-empty stack asks this node to forward.
    size_t pos = 0;
    uint64_t stages = 0;
    if (!read_varint(payload, len, pos, stages))
      return refuse("direct_message with a truncated forwarding stack");
    if (stages != 0)
      return refuse("direct_message with a forwarding stack of " +
                    std::to_string(stages));
    if ((flags & named_receiver_flag) != 0) {
      // Only CAF's own hello on a new connection: (sys, get, "info") to
      // the spawn server.
      uint64_t tlen = 0;
      if (len - pos < 2 || payload[pos] != 0 || payload[pos + 1] != 0)
        return refuse("named direct_message without a message");
      pos += 2;
      if (!read_varint(payload, len, pos, tlen) || tlen > len - pos)
        return refuse("named direct_message with a truncated message");
      auto tname = std::string_view{payload + pos, tlen};
      // The receiver's name is in the destination field.
      if (dest != static_cast<uint64_t>(caf::atom("SpawnServ")) ||
          tname != "@<>+@atom+@atom+@str")
        return refuse("direct_message to named actor " +
                      printable(caf::to_string(caf::atom_value{dest})) +
                      " with types " + printable(std::string{tname}) +
                      " (only the spawn server's info question is "
                      "relayed)");
    }
    auto depth = message_nesting(payload, len);
    if (depth == UINT32_MAX)
      return refuse("direct_message holding a recursive CAF type");
    if (depth > limits_.max_nesting)
      return refuse("direct_message nesting " + std::to_string(depth) +
                    " messages (max_nesting " +
                    std::to_string(limits_.max_nesting) + ")");
    return true;
  }
  case monitor_message:
  case down_message: {
    size_t used_src = 0;
    size_t used_dest = 0;
    auto source_node = read_node_id(payload, len, used_src);
    auto dest_node =
      read_node_id(payload + used_src, len - used_src, used_dest);
    if (source_node != peer_ || dest_node != self_)
      return refuse(op_name(operation) + " not from the peer to this node");
    if (operation == down_message) {
      auto depth = message_nesting(payload, len);
      if (depth == UINT32_MAX || depth > limits_.max_nesting)
        return refuse("down_message with a nested reason");
    }
    return true;
  }
  default:
    return true; // heartbeat
  }
}

} // namespace sv::transport
