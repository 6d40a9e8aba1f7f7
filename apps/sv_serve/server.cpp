#include "apps/sv_serve/server.hpp"

#include "apps/sv_serve/bridge.hpp"
#include "apps/sv_serve/compat_routes.hpp"
#include "apps/sv_serve/routes.hpp"
#include "apps/sv_serve/sandbox_wire.hpp"
#include "apps/sv_serve/sandboxes.hpp"
#include "apps/sv_serve/verify_routes.hpp"

#include <array>
#include <atomic>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <csignal>
#include <deque>
#include <functional>
#include <iostream>
#include <malloc.h>
#include <memory>
#include <optional>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <thread>
#include <type_traits>
#include <vector>

namespace sv::serve {

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
namespace ssl = net::ssl;
using tls_stream = beast::ssl_stream<beast::tcp_stream>;

/// What all sessions share.
struct shared_state {
  server_options opts;
  server_context ctx;
  std::atomic<bool> draining{false};
  /// Requests whose verifications are not all answered yet.
  std::atomic<size_t> busy{0};
  /// Set before the server runs (then only read): called, from any thread,
  /// when `busy` drops to 0 while draining, so the drain ends at once.
  std::function<void()> on_idle;
};

/// One connection (a session or a TLS detector) counted in the open
/// connections while it lives; moves from the TLS detector to its session.
class connection_slot {
public:
  explicit connection_slot(std::shared_ptr<shared_state> st)
      : st_(std::move(st)) {
    ++st_->ctx.counters->conns.open;
  }
  connection_slot(connection_slot&&) noexcept = default;
  connection_slot& operator=(connection_slot&&) = delete;
  connection_slot(const connection_slot&) = delete;
  connection_slot& operator=(const connection_slot&) = delete;
  ~connection_slot() {
    if (st_)
      --st_->ctx.counters->conns.open;
  }

private:
  std::shared_ptr<shared_state> st_;
};

/// Every error of sv-serve: {"error": {"code": ..., "message": ...}}.
std::string error_body(const char* code, const std::string& message) {
  return error_reply(0, code, message).body;
}

/// One connection: `Stream` is a beast::tcp_stream or a TLS stream over
/// one (already past its handshake).
template <class Stream>
class session : public std::enable_shared_from_this<session<Stream>> {
public:
  static constexpr bool tls = !std::is_same_v<Stream, beast::tcp_stream>;

  /// `metrics_only`: a connection of --metrics-listen (/metrics and
  /// /healthz, no token; everything else 404).
  session(Stream&& stream, beast::flat_buffer&& buffer,
          std::shared_ptr<shared_state> st, connection_slot&& slot,
          bool metrics_only = false)
      : stream_(std::move(stream)), buffer_(std::move(buffer)),
        st_(std::move(st)), slot_(std::move(slot)),
        metrics_only_(metrics_only) {}

  ~session() { release(); }

  void run() {
    net::dispatch(
      stream_.get_executor(),
      beast::bind_front_handler(&session::do_read, this->shared_from_this()));
  }

private:
  beast::tcp_stream& tcp() { return beast::get_lowest_layer(stream_); }

  // -- reading a request ------------------------------------------------------

  void do_read() {
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(st_->opts.max_header_bytes));
    parser_->body_limit(st_->opts.max_body_bytes);
    tcp().expires_after(st_->opts.header_timeout);
    http::async_read_header(
      stream_, buffer_, *parser_,
      beast::bind_front_handler(&session::on_header, this->shared_from_this()));
  }

  void on_header(beast::error_code ec, size_t) {
    if (ec)
      return on_read_error(ec);
    auto& req = parser_->get();
    route_ = route_of(std::string_view{req.target()});
    if (metrics_only_ && route_ != route::metrics && route_ != route::healthz)
      route_ = route::not_found;
    keep_alive_ = req.keep_alive();
    unauthorized_ =
      !metrics_only_ && needs_token(route_) &&
      allowed(route_, std::string_view{req.method_string()}) &&
      !open_route(req.target()) &&
      !st_->ctx.tokens->accepts(req[http::field::authorization], owner_);
    // An answer that does not depend on the body (401, 404, 405, /healthz,
    // /metrics) is given from the header: no body byte is read or kept
    // (no 100 Continue either). A body left unread ends the connection;
    // the lingering close drops what the client still sends.
    if (unauthorized_ || !reads_body()) {
      if (!parser_->is_done())
        keep_alive_ = false;
      return handle();
    }
    if (beast::iequals(req[http::field::expect], "100-continue")) {
      static const std::string cont = "HTTP/1.1 100 Continue\r\n\r\n";
      net::async_write(
        stream_, net::buffer(cont),
        [self = this->shared_from_this()](beast::error_code ec, size_t) {
          if (ec)
            return self->close();
          self->read_body();
        });
      return;
    }
    read_body();
  }

  /// Whether the current request's answer needs its body.
  bool reads_body() const {
    switch (route_) {
    case route::verify:
    case route::verify_batch:
    case route::sandboxes:
    case route::compat:
      return allowed(route_, std::string_view{parser_->get().method_string()});
    default:
      return false;
    }
  }

  void read_body() {
    tcp().expires_after(st_->opts.body_timeout);
    http::async_read(
      stream_, buffer_, *parser_,
      beast::bind_front_handler(&session::on_read, this->shared_from_this()));
  }

  void on_read(beast::error_code ec, size_t) {
    if (ec)
      return on_read_error(ec);
    body_bytes_ = parser_->get().body().size();
    handle();
  }

  /// After a large body (its text and DOM freed by now, or soon), the
  /// heap's free pages go back to the system: glibc keeps the small
  /// blocks of a DOM in its arenas otherwise.
  void trim_after_large_body() {
    if (body_bytes_ < large_body_bytes)
      return;
    body_bytes_ = 0;
    ::malloc_trim(0);
  }

  void on_read_error(beast::error_code ec) {
    keep_alive_ = false;
    if (ec == http::error::body_limit)
      return respond(http::status::payload_too_large,
                     error_body("payload_too_large",
                                "body longer than --max-body-bytes " +
                                  std::to_string(st_->opts.max_body_bytes)));
    if (ec == http::error::header_limit)
      return respond(http::status::request_header_fields_too_large,
                     error_body("header_too_large",
                                "header longer than " +
                                  std::to_string(st_->opts.max_header_bytes) +
                                  " bytes"));
    if (ec == beast::error::timeout) {
      spdlog::debug("a client was too slow to send its request");
      return close();
    }
    // (stream_truncated: a TLS peer that closed without close_notify.)
    if (ec == http::error::end_of_stream || ec == net::error::eof ||
        ec == net::error::connection_reset ||
        ec == net::error::operation_aborted ||
        ec == ssl::error::stream_truncated)
      return close();
    // Anything else is a request that is not HTTP.
    respond(http::status::bad_request,
            error_body("bad_request", "not an HTTP request: " + ec.message()));
  }

  // -- routing ----------------------------------------------------------------

  void handle() {
    auto& req = parser_->get();
    if (unauthorized_) {
      req.body().clear();
      return respond(
        http::status::unauthorized,
        error_body("unauthorized", "missing or wrong bearer token"));
    }
    if (route_ == route::not_found)
      return respond(http::status::not_found,
                     error_body("no_such_endpoint", "no such endpoint"));
    if (!allowed(route_, std::string_view{req.method_string()})) {
      std::vector<std::pair<http::field, std::string>> extra{
        {http::field::allow, allow_of(route_)}};
      return respond(http::status::method_not_allowed,
                     error_body("method_not_allowed", "method not allowed"),
                     "application/json", extra);
    }
    switch (route_) {
    case route::healthz:
      if (st_->draining)
        return respond(http::status::service_unavailable, "draining\n",
                       "text/plain");
      return respond(http::status::ok, "ok\n", "text/plain");
    case route::metrics:
      return serve_metrics();
    case route::identity:
      return serve_identity();
    case route::verify:
    case route::verify_batch:
      return serve_verify();
    case route::sandboxes:
      return serve_sandbox();
    case route::compat:
      return serve_compat();
    default:
      return respond(http::status::not_found,
                     error_body("no_such_endpoint", "no such endpoint"));
    }
  }

  /// GET /v1/identity?python=P: what this server's backend contributes to
  /// a result cache key (the remote provider's grade identity). Answered
  /// here: the backend keeps each answer after the first (a few stats).
  void serve_identity() {
    send_reply(identity_reply(std::string{parser_->get().target()},
                              st_->ctx.grade_identity));
  }

  void serve_metrics() {
    auto self = this->shared_from_this();
    fetch_stats(*st_->ctx.sys, st_->ctx.supervisor,
                [self](std::optional<supervisor_stats> stats) {
                  net::post(self->stream_.get_executor(), [self, stats] {
                    self->respond(http::status::ok,
                                  self->st_->ctx.counters->render(stats),
                                  "text/plain; version=0.0.4");
                  });
                });
  }

  /// A call of the sandbox API: the actor answers on a CAF thread, the
  /// answer is posted back to this strand.
  void serve_sandbox() {
    auto& req = parser_->get();
    if (!st_->ctx.sandboxes)
      return respond(http::status::not_found,
                     error_body("no_such_endpoint", "no sandbox API here"));
    sandbox_call call;
    call.method = std::string{req.method_string()};
    call.target = std::string{req.target()};
    call.owner = owner_;
    if (auto key = req.find("Idempotency-Key"); key != req.end()) {
      call.has_idempotency_key = true;
      call.idempotency_key = std::string{key->value()};
    }
    if (auto type = req.find(http::field::content_type); type != req.end())
      call.content_type = std::string{type->value()};
    call.body = std::move(req.body());
    req.body().clear();
    ++st_->busy;
    holding_busy_ = true;
    auto self = this->shared_from_this();
    sandbox_replied_ = false;
    auto id =
      st_->ctx.sandboxes->handle(std::move(call), [self](sandbox_reply r) {
        net::post(self->stream_.get_executor(),
                  [self, r = std::move(r)]() mutable {
                    self->on_sandbox_reply(std::move(r));
                  });
      });
    // A client that goes away meanwhile abandons the call (a create's
    // sandbox is then stopped once made).
    if (!sandbox_replied_) {
      sandbox_call_ = id;
      watch_peer();
    }
  }

  /// A compatible route declared open needs no token from its networks.
  bool open_route(beast::string_view target) {
    if (route_ != route::compat || !st_->ctx.compat)
      return false;
    beast::error_code ec;
    auto peer = tcp().socket().remote_endpoint(ec).address().to_string();
    return !ec && !st_->ctx.compat->needs_token(
                    target.substr(0, target.find('?')), peer);
  }

  /// A call of SandboxFusion's or NeMo-Skills' routes: answered as the
  /// sandbox API's are (docs/compat.md).
  void serve_compat() {
    auto& req = parser_->get();
    if (!st_->ctx.compat)
      return respond(http::status::not_found,
                     error_body("no_such_endpoint", "no such endpoint"));
    compat_call call;
    call.method = std::string{req.method_string()};
    call.target = std::string{req.target()};
    call.has_session_header = req.find("X-Session-ID") != req.end();
    call.draining = st_->draining;
    call.body = std::move(req.body());
    req.body().clear();
    ++st_->busy;
    holding_busy_ = true;
    auto self = this->shared_from_this();
    st_->ctx.compat->handle(std::move(call), [self](sandbox_reply r) {
      net::post(self->stream_.get_executor(),
                [self, r = std::move(r)]() mutable {
                  self->on_sandbox_reply(std::move(r));
                });
    });
  }

  void on_sandbox_reply(sandbox_reply r) {
    sandbox_replied_ = true;
    sandbox_call_ = 0;
    if (gone_)
      return;
    send_reply(std::move(r));
  }

  /// Writes a reply of a router (verify_routes, sandboxes, compat_routes).
  void send_reply(sandbox_reply r) {
    std::vector<std::pair<http::field, std::string>> extra;
    for (auto& [name, value] : r.headers)
      extra.emplace_back(http::string_to_field(name), value);
    respond(static_cast<http::status>(r.status), std::move(r.body),
            r.content_type.empty() ? nullptr : r.content_type.c_str(), extra);
  }

  json_limits limits() const {
    json_limits l;
    l.max_depth = st_->opts.max_json_depth;
    l.max_values = st_->opts.max_json_values;
    l.max_bytes = st_->opts.max_body_bytes;
    return l;
  }

  /// Starts the client of this request; its outcomes come back to
  /// `on_outcome` on this session's strand.
  void start_client() {
    auto self = this->shared_from_this();
    client_ =
      spawn_client(*st_->ctx.sys, st_->ctx.supervisor,
                   [self](uint64_t tag, verification_outcome out) {
                     net::post(self->stream_.get_executor(),
                               [self, tag, out = std::move(out)]() mutable {
                                 self->on_outcome(tag, std::move(out));
                               });
                   });
    ++st_->busy;
    holding_busy_ = true;
    watch_peer();
  }

  void submit_line(uint64_t line, verification_request&& req) {
    st_->ctx.counters->started();
    ++outstanding_;
    submit(client_, line, std::move(req));
  }

  /// /v1/verify and /v1/verify/batch: the router's plan carried out (its
  /// reply, or its requests graded and answered as it says).
  void serve_verify() {
    verify_call call;
    call.batch = route_ == route::verify_batch;
    call.body = std::move(parser_->get().body());
    parser_->get().body().clear();
    call.limits = limits();
    call.draining = st_->draining;
    auto plan = plan_verify_call(std::move(call));
    if (plan.reply)
      return send_reply(std::move(*plan.reply));
    batch_ = plan.stream;
    if (batch_)
      start_stream(std::move(plan.rejected_lines));
    if (!plan.requests.empty()) {
      start_client();
      for (auto& [line, req] : plan.requests)
        submit_line(line, std::move(req));
    }
    if (batch_)
      pump();
  }

  /// The header of a batch's streamed answer, and its first lines.
  void start_stream(std::vector<std::string> first_lines) {
    for (auto& text : first_lines)
      chunks_.push_back(std::move(text));
    auto res = std::make_shared<http::response<http::empty_body>>(
      http::status::ok, parser_->get().version());
    res->set(http::field::content_type, "application/x-ndjson");
    res->keep_alive(keep_alive_);
    res->chunked(true);
    header_ = res;
    serializer_ =
      std::make_shared<http::response_serializer<http::empty_body>>(*res);
    header_sent_ = false;
    last_sent_ = false;
    st_->ctx.counters->count_http(200);
  }

  void on_outcome(uint64_t line, verification_outcome out) {
    if (gone_ || outstanding_ == 0)
      return;
    st_->ctx.counters->finished(out);
    if (--outstanding_ == 0)
      end_work();
    if (!batch_)
      return send_reply(verify_reply(line, std::move(out)));
    chunks_.push_back(verify_line(line, std::move(out)));
    pump();
  }

  /// This request's verifications are all answered (or cancelled).
  void end_work() {
    if (client_) {
      end_client(client_);
      client_ = nullptr;
    }
  }

  /// The request's answer is written (or its client is gone): a drain need
  /// not wait for it any more.
  void release() {
    if (holding_busy_) {
      holding_busy_ = false;
      // (busy, then draining; the drainer writes draining, then reads busy:
      // one of the two sees the other's write.)
      if (--st_->busy == 0 && st_->draining && st_->on_idle)
        st_->on_idle();
    }
  }

  // -- noticing a client that went away --------------------------------------

  /// While verifications are outstanding nothing is read, so a closed
  /// connection would go unnoticed: wait for the socket to turn readable and
  /// peek. End of stream means the client is gone.
  void watch_peer() {
    tcp().socket().async_wait(
      tcp::socket::wait_read,
      [self = this->shared_from_this()](beast::error_code ec) {
        self->on_peer_readable(ec);
      });
  }

  void on_peer_readable(beast::error_code ec) {
    if (ec || gone_ || (outstanding_ == 0 && sandbox_call_ == 0))
      return;
    char c;
    auto n =
      ::recv(tcp().socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) {
      // A pipelined request (read after this one), or, under TLS, maybe a
      // close_notify: then the peer has also shut its side.
      if constexpr (tls) {
        pollfd pfd{tcp().socket().native_handle(), POLLRDHUP, 0};
        if (::poll(&pfd, 1, 0) == 1 &&
            (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR)))
          on_peer_gone();
      }
      return;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
      return watch_peer();
    on_peer_gone();
  }

  void on_peer_gone() {
    if (gone_)
      return;
    gone_ = true;
    if (client_ && outstanding_ > 0) {
      spdlog::info("a client went away: cancelling its {} verifications",
                   outstanding_);
      cancel_client(client_);
      st_->ctx.counters->cancelled(outstanding_);
      client_ = nullptr;
      outstanding_ = 0;
    }
    if (sandbox_call_ != 0 && st_->ctx.sandboxes) {
      spdlog::info("a client went away during its sandbox call");
      st_->ctx.sandboxes->abandon(sandbox_call_);
      sandbox_call_ = 0;
    }
    end_work();
    release();
    beast::error_code ignored;
    tcp().socket().shutdown(tcp::socket::shutdown_both, ignored);
    tcp().close();
  }

  // -- writing ----------------------------------------------------------------

  void
  respond(http::status status, std::string body,
          const char* content_type = "application/json",
          const std::vector<std::pair<http::field, std::string>>& extra = {}) {
    auto version = parser_ ? parser_->get().version() : 11;
    auto res =
      std::make_shared<http::response<http::string_body>>(status, version);
    res->set(http::field::server, "sv-serve");
    if (content_type)
      res->set(http::field::content_type, content_type);
    if (status == http::status::unauthorized)
      res->set(http::field::www_authenticate, "Bearer");
    for (auto& [field, value] : extra)
      res->set(field, value);
    res->keep_alive(keep_alive_);
    res->body() = std::move(body);
    res->prepare_payload();
    if (status == http::status::no_content)
      res->erase(http::field::content_length);
    st_->ctx.counters->count_http(static_cast<unsigned>(status));
    tcp().expires_after(st_->opts.body_timeout);
    http::async_write(
      stream_, *res,
      [self = this->shared_from_this(), res](beast::error_code ec, size_t) {
        self->on_written(ec);
      });
  }

  void on_written(beast::error_code ec) {
    if (ec)
      return on_peer_gone();
    trim_after_large_body();
    release();
    if (!keep_alive_)
      return close();
    do_read();
  }

  /// The streamed answer of a batch: its header, the lines as they come,
  /// the last chunk once every line is answered.
  void pump() {
    if (writing_ || gone_)
      return;
    auto self = this->shared_from_this();
    auto next = [self](beast::error_code ec, size_t) {
      self->writing_ = false;
      if (ec)
        return self->on_peer_gone();
      self->pump();
    };
    tcp().expires_after(st_->opts.body_timeout);
    if (!header_sent_) {
      header_sent_ = writing_ = true;
      http::async_write_header(stream_, *serializer_, next);
      return;
    }
    if (!chunks_.empty()) {
      writing_ = true;
      auto text = std::make_shared<std::string>(std::move(chunks_.front()));
      chunks_.pop_front();
      net::async_write(
        stream_, http::make_chunk(net::buffer(*text)),
        [next, text](beast::error_code ec, size_t n) { next(ec, n); });
      return;
    }
    if (outstanding_ > 0 || last_sent_) {
      if (last_sent_)
        finish_batch();
      else
        tcp().expires_never();
      return;
    }
    last_sent_ = writing_ = true;
    net::async_write(stream_, http::make_chunk_last(), next);
  }

  void finish_batch() {
    trim_after_large_body();
    release();
    header_.reset();
    serializer_.reset();
    if (!keep_alive_)
      return close();
    do_read();
  }

  /// A lingering close: our side is shut, then what the client still
  /// sends (a body we refused) is read and dropped for up to 1 s, so the
  /// kernel does not answer it with a reset that could destroy our answer.
  void close() {
    release();
    if constexpr (tls) {
      // close_notify both ways, within a second.
      tcp().expires_after(std::chrono::seconds{1});
      stream_.async_shutdown([self = this->shared_from_this()](
                               beast::error_code) { self->tcp().close(); });
      return;
    }
    beast::error_code ignored;
    tcp().socket().shutdown(tcp::socket::shutdown_send, ignored);
    tcp().expires_after(std::chrono::seconds{1});
    linger();
  }

  void linger() {
    stream_.async_read_some(
      net::buffer(discard_),
      [self = this->shared_from_this()](beast::error_code ec, size_t) {
        if (ec)
          return self->tcp().close();
        self->linger();
      });
  }

  Stream stream_;
  beast::flat_buffer buffer_;
  std::shared_ptr<shared_state> st_;
  connection_slot slot_;
  bool metrics_only_ = false;
  std::optional<http::request_parser<http::string_body>> parser_;
  /// The size of the current request's body (`trim_after_large_body`).
  size_t body_bytes_ = 0;
  static constexpr size_t large_body_bytes = size_t{1} << 20;
  route route_ = route::not_found;
  bool keep_alive_ = false;
  bool unauthorized_ = false;
  /// The token of the current request (owner of the sandboxes it makes).
  std::string owner_;
  std::array<char, 4096> discard_;
  // The verifications of the current request.
  caf::actor client_;
  size_t outstanding_ = 0;
  /// The sandbox API call awaiting its answer (0: none), and whether the
  /// answer came (maybe at once, before `handle` returned).
  uint64_t sandbox_call_ = 0;
  bool sandbox_replied_ = false;
  bool batch_ = false;
  bool gone_ = false;
  /// Counted in `busy` until its answer is written.
  bool holding_busy_ = false;
  // The streamed answer of a batch.
  std::shared_ptr<http::response<http::empty_body>> header_;
  std::shared_ptr<http::response_serializer<http::empty_body>> serializer_;
  std::deque<std::string> chunks_;
  bool writing_ = false;
  bool header_sent_ = false;
  bool last_sent_ = false;
};

/// A connection to a TLS port: its first bytes say whether it speaks TLS.
/// If so, the handshake (within the header deadline), then a session; if
/// not, a plain 400 saying so, and the connection closed.
class tls_detector : public std::enable_shared_from_this<tls_detector> {
public:
  tls_detector(tcp::socket&& socket, ssl::context& ctx,
               std::shared_ptr<shared_state> st, connection_slot&& slot)
      : stream_(std::move(socket)), ctx_(ctx), st_(std::move(st)),
        slot_(std::move(slot)) {}

  void run() {
    net::dispatch(
      stream_.get_executor(),
      beast::bind_front_handler(&tls_detector::detect, shared_from_this()));
  }

private:
  void detect() {
    stream_.expires_after(st_->opts.header_timeout);
    beast::async_detect_ssl(
      stream_, buffer_,
      beast::bind_front_handler(&tls_detector::on_detect, shared_from_this()));
  }

  void on_detect(beast::error_code ec, bool is_tls) {
    if (ec)
      return stream_.close();
    if (!is_tls)
      return refuse_plain();
    tls_.emplace(std::move(stream_), ctx_);
    tls_->async_handshake(ssl::stream_base::server, buffer_.data(),
                          beast::bind_front_handler(&tls_detector::on_handshake,
                                                    shared_from_this()));
  }

  void on_handshake(beast::error_code ec, size_t used) {
    if (ec) {
      spdlog::debug("TLS handshake: {}", ec.message());
      return beast::get_lowest_layer(*tls_).close();
    }
    buffer_.consume(used);
    std::make_shared<session<tls_stream>>(std::move(*tls_), std::move(buffer_),
                                          st_, std::move(slot_))
      ->run();
  }

  void refuse_plain() {
    static const std::string body =
      error_body("bad_request", "this port speaks TLS (https://)");
    static const std::string reply =
      "HTTP/1.1 400 Bad Request\r\nServer: sv-serve\r\n"
      "Content-Type: application/json\r\nConnection: close\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
    st_->ctx.counters->count_http(400);
    stream_.expires_after(std::chrono::seconds{1});
    net::async_write(stream_, net::buffer(reply),
                     [self = shared_from_this()](beast::error_code, size_t) {
                       beast::error_code ignored;
                       self->stream_.socket().shutdown(
                         tcp::socket::shutdown_send, ignored);
                       self->linger();
                     });
  }

  /// As a session's close: what the client still sends is dropped for up
  /// to a second, so no reset takes the answer with it.
  void linger() {
    stream_.async_read_some(
      net::buffer(discard_),
      [self = shared_from_this()](beast::error_code ec, size_t) {
        if (ec)
          return self->stream_.close();
        self->linger();
      });
  }

  beast::tcp_stream stream_;
  ssl::context& ctx_;
  std::shared_ptr<shared_state> st_;
  connection_slot slot_;
  beast::flat_buffer buffer_;
  std::optional<tls_stream> tls_;
  std::array<char, 4096> discard_;
};

class listener : public std::enable_shared_from_this<listener> {
public:
  /// `metrics_only`: the --metrics-listen port (plain HTTP).
  listener(net::io_context& ioc, tcp::endpoint ep,
           std::shared_ptr<shared_state> st, ssl::context* tls,
           bool metrics_only = false)
      : ioc_(ioc), acceptor_(net::make_strand(ioc)),
        pause_(acceptor_.get_executor()), st_(std::move(st)), tls_(tls),
        metrics_only_(metrics_only) {
    acceptor_.open(ep.protocol());
    acceptor_.set_option(net::socket_base::reuse_address(true));
    acceptor_.bind(ep);
    acceptor_.listen(net::socket_base::max_listen_connections);
  }

  tcp::endpoint local() const { return acceptor_.local_endpoint(); }

  void run() { do_accept(); }

  void stop() {
    net::post(acceptor_.get_executor(), [self = shared_from_this()] {
      beast::error_code ignored;
      self->acceptor_.close(ignored);
      self->pause_.cancel();
    });
  }

private:
  void do_accept() {
    acceptor_.async_accept(
      net::make_strand(ioc_),
      beast::bind_front_handler(&listener::on_accept, shared_from_this()));
  }

  void on_accept(beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor_.is_open())
      return;
    if (ec)
      return pause(ec);
    if (failed_ > 0) {
      spdlog::warn("accepting again after {} failed accepts", failed_);
      failed_ = 0;
    }
    if (st_->ctx.counters->conns.open >= st_->opts.max_connections) {
      refuse(socket);
    } else {
      if (refused_ > 0) {
        spdlog::info("below --max-connections again ({} refused)", refused_);
        refused_ = 0;
      }
      connection_slot slot{st_};
      if (tls_)
        std::make_shared<tls_detector>(std::move(socket), *tls_, st_,
                                       std::move(slot))
          ->run();
      else
        std::make_shared<session<beast::tcp_stream>>(
          beast::tcp_stream{std::move(socket)}, beast::flat_buffer{}, st_,
          std::move(slot), metrics_only_)
          ->run();
    }
    do_accept();
  }

  /// An accept failed (EMFILE, ENFILE, ENOBUFS...): the pending connection
  /// stays in the backlog and would fail again at once, so the next try
  /// waits `accept_pause`. One log line per episode.
  void pause(beast::error_code ec) {
    if (failed_++ == 0)
      spdlog::error("accept: {}: retrying every {} ms until it works",
                    ec.message(), accept_pause.count());
    ++st_->ctx.counters->conns.accept_pauses;
    pause_.expires_after(accept_pause);
    pause_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec || !self->acceptor_.is_open())
        return;
      self->do_accept();
    });
  }

  static constexpr std::chrono::milliseconds accept_pause{100};

  /// A connection over --max-connections: a plain port gets a 503 if the
  /// socket takes it at once (never waiting), then the connection is
  /// closed; nothing of it is kept. One log line per episode.
  void refuse(tcp::socket& socket) {
    if (refused_++ == 0)
      spdlog::warn("--max-connections {} reached: refusing connections",
                   st_->opts.max_connections);
    ++st_->ctx.counters->conns.refused;
    if (!tls_) {
      static const std::string body = error_body(
        "too_many_connections", "too many connections (--max-connections)");
      static const std::string reply =
        "HTTP/1.1 503 Service Unavailable\r\nServer: sv-serve\r\n"
        "Content-Type: application/json\r\nConnection: close\r\n"
        "Retry-After: 1\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
      [[maybe_unused]] auto n =
        ::send(socket.native_handle(), reply.data(), reply.size(),
               MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    beast::error_code ignored;
    socket.shutdown(tcp::socket::shutdown_send, ignored);
    socket.close(ignored);
  }

  net::io_context& ioc_;
  tcp::acceptor acceptor_;
  net::steady_timer pause_;
  std::shared_ptr<shared_state> st_;
  ssl::context* tls_; // null: plain HTTP
  bool metrics_only_ = false;
  /// Accepts failed in a row (`pause`).
  uint64_t failed_ = 0;
  /// Connections refused since the last one accepted.
  uint64_t refused_ = 0;
};

/// SIGTERM / SIGINT: drain; SIGHUP: re-read the tokens.
class signal_handler : public std::enable_shared_from_this<signal_handler> {
public:
  signal_handler(net::io_context& ioc, std::shared_ptr<shared_state> st,
                 std::vector<std::shared_ptr<listener>> lst)
      : ioc_(ioc), strand_(net::make_strand(ioc)),
        signals_(strand_, SIGTERM, SIGINT, SIGHUP), timer_(strand_),
        st_(std::move(st)), listeners_(std::move(lst)) {}

  void run() { wait(); }

  /// The last request in flight is answered (any thread).
  void wake() {
    net::post(strand_, [self = shared_from_this()] { self->check_drained(); });
  }

  int received() const { return received_; }

private:
  void wait() {
    signals_.async_wait(
      [self = shared_from_this()](beast::error_code ec, int sig) {
        if (ec)
          return;
        self->on_signal(sig);
      });
  }

  void on_signal(int sig) {
    if (sig == SIGHUP) {
      if (auto err = st_->ctx.tokens->reload(); !err.empty())
        spdlog::error("SIGHUP: keeping the old tokens: {}", err);
      else
        spdlog::info("SIGHUP: tokens re-read");
      return wait();
    }
    if (received_ != 0) {
      spdlog::warn("signal {} again: stopping now", sig);
      ioc_.stop();
      return;
    }
    received_ = sig;
    spdlog::warn("signal {}: draining ({} requests in flight)", sig,
                 st_->busy.load());
    st_->draining = true;
    if (st_->ctx.sandboxes)
      st_->ctx.sandboxes->drain();
    deadline_ = std::chrono::steady_clock::now() + st_->opts.drain_timeout;
    check_drained();
    wait();
  }

  /// Ends the drain when nothing is in flight (`wake`) or at its deadline
  /// (the timer), whichever comes first; no polling.
  void check_drained() {
    if (drained_ || received_ == 0)
      return;
    if (st_->busy == 0 || std::chrono::steady_clock::now() >= deadline_) {
      if (st_->busy != 0)
        spdlog::warn("drain deadline passed with {} requests in flight",
                     st_->busy.load());
      drained_ = true;
      timer_.cancel();
      for (auto& l : listeners_)
        l->stop();
      ioc_.stop();
      return;
    }
    if (timer_armed_)
      return;
    timer_armed_ = true;
    timer_.expires_at(deadline_);
    timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      self->timer_armed_ = false;
      if (!ec)
        self->check_drained();
    });
  }

  net::io_context& ioc_;
  /// Signals, the drain timer and `wake` run here, one at a time.
  net::strand<net::io_context::executor_type> strand_;
  net::signal_set signals_;
  net::steady_timer timer_;
  std::shared_ptr<shared_state> st_;
  std::vector<std::shared_ptr<listener>> listeners_;
  std::chrono::steady_clock::time_point deadline_;
  int received_ = 0;
  bool timer_armed_ = false;
  bool drained_ = false;
};

} // namespace

int run_server(const server_options& opts, const server_context& ctx) {
  auto st = std::make_shared<shared_state>();
  st->opts = opts;
  st->ctx = ctx;
  net::io_context ioc{static_cast<int>(opts.threads)};
  beast::error_code ec;
  auto addr = net::ip::make_address(opts.host, ec);
  if (ec)
    throw std::runtime_error("--listen " + opts.host + ": " + ec.message());
  std::optional<ssl::context> tls;
  if (!opts.tls_cert.empty()) {
    tls.emplace(ssl::context::tls_server);
    tls->set_options(ssl::context::default_workarounds |
                     ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                     ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                     ssl::context::single_dh_use);
    try {
      tls->use_certificate_chain_file(opts.tls_cert);
    } catch (const boost::system::system_error& e) {
      throw std::runtime_error("--tls-cert " + opts.tls_cert + ": " + e.what());
    }
    try {
      tls->use_private_key_file(opts.tls_key, ssl::context::pem);
    } catch (const boost::system::system_error& e) {
      throw std::runtime_error("--tls-key " + opts.tls_key + ": " + e.what());
    }
  }
  std::shared_ptr<listener> lst;
  try {
    lst = std::make_shared<listener>(ioc, tcp::endpoint{addr, opts.port}, st,
                                     tls ? &*tls : nullptr);
  } catch (const boost::system::system_error& e) {
    throw std::runtime_error("cannot listen on " + opts.host + ":" +
                             std::to_string(opts.port) + ": " + e.what());
  }
  std::shared_ptr<listener> metrics_lst;
  if (!opts.metrics_host.empty()) {
    auto maddr = net::ip::make_address(opts.metrics_host, ec);
    if (ec)
      throw std::runtime_error("--metrics-listen " + opts.metrics_host + ": " +
                               ec.message());
    try {
      metrics_lst = std::make_shared<listener>(
        ioc, tcp::endpoint{maddr, opts.metrics_port}, st, nullptr, true);
    } catch (const boost::system::system_error& e) {
      throw std::runtime_error("cannot listen on " + opts.metrics_host + ":" +
                               std::to_string(opts.metrics_port) + ": " +
                               e.what());
    }
  }
  std::vector<std::shared_ptr<listener>> all{lst};
  if (metrics_lst)
    all.push_back(metrics_lst);
  auto signals = std::make_shared<signal_handler>(ioc, st, all);
  st->on_idle = [weak = std::weak_ptr<signal_handler>{signals}] {
    if (auto handler = weak.lock())
      handler->wake();
  };
  signals->run();
  for (auto& l : all)
    l->run();
  auto where = [](const tcp::endpoint& ep) {
    auto host = ep.address().is_v6() ? "[" + ep.address().to_string() + "]"
                                     : ep.address().to_string();
    return host + ":" + std::to_string(ep.port());
  };
  if (ctx.announce) {
    ctx.announce("listening on " + where(lst->local()));
    if (metrics_lst)
      ctx.announce("metrics on " + where(metrics_lst->local()));
  }
  std::vector<std::thread> threads;
  for (size_t i = 1; i < std::max<size_t>(1, opts.threads); ++i)
    threads.emplace_back([&ioc] { ioc.run(); });
  ioc.run();
  for (auto& t : threads)
    t.join();
  // The sandbox API's and the grading clients' callbacks hold sessions (and
  // post to this io_context): end them before it goes.
  if (ctx.sandboxes)
    ctx.sandboxes->shut_down(ctx.sandboxes_stop_timeout);
  end_all_clients();
  if (!wait_clients_gone(std::chrono::seconds{10}))
    spdlog::warn("some clients did not end within 10 s");
  return signals->received();
}

} // namespace sv::serve
