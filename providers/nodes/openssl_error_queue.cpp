// Clears this thread's OpenSSL error queue before every TLS I/O call that
// CAF 0.17.6's libcaf_openssl makes.
//
// Why: caf::openssl::session (libcaf_openssl/src/openssl/session.cpp,
// do_some() and handle_ssl_result()) calls SSL_read, SSL_write, SSL_accept
// and SSL_connect and then SSL_get_error() without ERR_clear_error() first.
// The only place that drains the queue, session::get_ssl_error(), is called
// inside CAF_LOG_INFO, which Debian's build compiles out
// (CAF_LOG_LEVEL_QUIET). So a peer that fails the handshake (another CA's
// certificate) leaves its errors in the queue of the one multiplexer thread
// that runs every session, and OpenSSL's SSL_get_error() reports any queued
// error as SSL_ERROR_SSL: the next healthy session whose SSL_read returns -1
// (no data yet, WANT_READ) is taken as failed and closed, and its errors
// stay queued too. A bad peer knocked every established TLS connection of
// the process off.
//
// How: the executables define these four functions, so the dynamic linker
// binds libcaf_openssl's calls (it is a shared library) to them; each one
// calls ERR_clear_error(), as OpenSSL documents for SSL_get_error(), and
// then the real function found with dlsym(RTLD_NEXT). Our own TLS code
// (Boost.Asio in sv-serve, the remote provider's client) clears the queue
// itself already; clearing it once more is harmless. The object is pulled
// into every executable that configures the middleman: middleman_setup.cpp
// calls openssl_error_queue_fix_active().

#include "providers/nodes/openssl_error_queue.hpp"

#include <dlfcn.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

namespace {

template <class Fn>
Fn next_symbol(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

using io_fn = int (*)(SSL*, void*, int);
using write_fn = int (*)(SSL*, const void*, int);
using handshake_fn = int (*)(SSL*);

} // namespace

extern "C" {

int SSL_read(SSL* ssl, void* buf, int num) {
  static const auto real = next_symbol<io_fn>("SSL_read");
  ERR_clear_error();
  return real(ssl, buf, num);
}

int SSL_write(SSL* ssl, const void* buf, int num) {
  static const auto real = next_symbol<write_fn>("SSL_write");
  ERR_clear_error();
  return real(ssl, buf, num);
}

int SSL_accept(SSL* ssl) {
  static const auto real = next_symbol<handshake_fn>("SSL_accept");
  ERR_clear_error();
  return real(ssl);
}

int SSL_connect(SSL* ssl) {
  static const auto real = next_symbol<handshake_fn>("SSL_connect");
  ERR_clear_error();
  return real(ssl);
}

} // extern "C"

namespace sv {

bool openssl_error_queue_fix_active() {
  // The global lookup finds the executable's definitions first when they
  // are exported, which is what libcaf_openssl's calls bind to.
  return dlsym(RTLD_DEFAULT, "SSL_read") ==
           reinterpret_cast<void*>(&::SSL_read) &&
         dlsym(RTLD_DEFAULT, "SSL_accept") ==
           reinterpret_cast<void*>(&::SSL_accept) &&
         next_symbol<void*>("SSL_read") != nullptr;
}

} // namespace sv
