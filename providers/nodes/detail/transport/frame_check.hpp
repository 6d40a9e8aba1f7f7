#pragma once

// Checks the BASP frames a peer sends before CAF 0.17.6 parses them (the
// BASP gate relays only frames that pass). CAF's own parser trusts them: a
// handshake without payload dereferences a null payload, a header
// announcing 4 GiB makes it wait for (and reserve) 4 GiB, and a routed
// message or a forwarding stack lets a peer speak for another node. The
// layout is CAF 0.17.6's libcaf_io/caf/io/basp/header.hpp: 32 bytes in
// network order (operation, two pad bytes, flags, payload length,
// operation data, source actor, destination actor), then the payload.

#include <caf/node_id.hpp>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace sv::transport {

inline constexpr size_t basp_header_size = 32;
/// The BASP version CAF 0.17.6 speaks (basp/version.hpp).
inline constexpr uint64_t basp_version = 3;
/// Default bound of one frame's payload (max_frame_bytes): a node's
/// default upload bound (64 MiB) and a local provider's default download
/// bound (16 MiB) fit, with room for the rest of the message.
inline constexpr uint32_t default_max_payload = 80u << 20;
/// Default bound of caf::message headers chained in one payload.
inline constexpr uint32_t default_max_nesting = 64;

struct frame_limits {
  uint32_t max_payload = default_max_payload;
  uint32_t max_nesting = default_max_nesting;
};

/// The frames of one connection, in the order the peer sends them.
class frame_check {
public:
  /// `dialed`: this process connected out (the peer serves: its first frame
  /// is a server handshake); else the peer connected to us (its first
  /// frame is a client handshake). `self` is this process's node id.
  frame_check(bool dialed, caf::node_id self, frame_limits limits);

  /// Takes `n` bytes from the peer and appends every complete frame that
  /// passed to `out`. Returns false on the first frame that does not pass;
  /// `refusal()` then says why (one line) and nothing more may be fed.
  bool feed(const char* data, size_t n, std::vector<char>& out);

  /// Why the last feed failed.
  const std::string& refusal() const { return refusal_; }

  /// The peer's node id, once its handshake passed (else none).
  const caf::node_id& peer() const { return peer_; }

  /// True once, right after the feed whose handshake set `peer()`.
  bool take_learned() {
    auto x = learned_;
    learned_ = false;
    return x;
  }

private:
  bool check_frame(const unsigned char* hdr, const char* payload);
  bool refuse(std::string why);

  bool dialed_;
  caf::node_id self_;
  frame_limits limits_;
  std::vector<char> buf_;
  caf::node_id peer_;
  bool learned_ = false;
  bool handshaken_ = false;
  std::string refusal_;
};

/// The deepest chain of caf::message headers directly nested in `payload`
/// (a message whose element starts another message, or an error whose
/// context does), found by a linear scan without recursion.
uint32_t message_nesting(const char* payload, size_t size);

} // namespace sv::transport
