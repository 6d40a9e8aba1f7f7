#pragma once

// CAF 0.17.6's libcaf_openssl leaves OpenSSL's per-thread error queue
// uncleared, so one peer's failed handshake closed the process's other TLS
// connections. openssl_error_queue.cpp interposes the TLS I/O calls CAF
// makes and clears the queue before each one (the why is there).

namespace sv {

/// Whether libcaf_openssl's SSL_read/SSL_accept calls bind to our clearing
/// versions in this process (they are exported by the executable).
bool openssl_error_queue_fix_active();

} // namespace sv
