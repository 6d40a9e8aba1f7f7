// The HTTP client pool (http_client.hpp). Everything below runs on the
// pool's one I/O thread, except `http_pool`'s own members, which only post
// to it. A connection is a small I/O state machine (resolve → connect →
// write → read → idle), as in Beast's client examples; the pool owns the
// queue of requests, the idle list and the deadline of every request.

#include "providers/remote/detail/http_client.hpp"

#include <algorithm>
#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <cerrno>
#include <deque>
#include <mutex>
#include <optional>
#include <set>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

namespace sv::remote {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using steady = std::chrono::steady_clock;

const char* to_string(http_failure_kind x) {
  switch (x) {
  case http_failure_kind::connect:
    return "connect";
  case http_failure_kind::lost:
    return "lost";
  case http_failure_kind::timeout:
    return "timeout";
  case http_failure_kind::too_large:
    return "too_large";
  case http_failure_kind::protocol:
    return "protocol";
  case http_failure_kind::shutdown:
    return "shutdown";
  }
  return "?";
}

namespace detail {

class connection;

/// One request on its way: queued, then on a connection, then finished.
struct http_job {
  http_request req;
  http_callback done;
  std::unique_ptr<asio::steady_timer> timer; // its deadline
  std::weak_ptr<connection> conn;            // while it runs on one
  bool finished = false;
  bool retried = false;
};

using job_ptr = std::shared_ptr<http_job>;

http_outcome failure(http_failure_kind kind, std::string message,
                     bool maybe_sent) {
  http_outcome out;
  out.failure = kind;
  out.message = std::move(message);
  out.maybe_sent = maybe_sent;
  return out;
}

class http_pool_impl : public std::enable_shared_from_this<http_pool_impl> {
public:
  explicit http_pool_impl(http_pool_settings s)
      : settings(std::move(s)), work(asio::make_work_guard(ioc)) {
    if (settings.tls) {
      // TLS 1.2+, the server's certificate checked against the CA file (or
      // the system's CAs) and the host name.
      tls = std::make_unique<ssl::context>(ssl::context::tls_client);
      tls->set_options(ssl::context::default_workarounds |
                       ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                       ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
      tls->set_verify_mode(ssl::verify_peer);
      if (settings.ca_file.empty())
        tls->set_default_verify_paths();
      else
        tls->load_verify_file(settings.ca_file); // throws when unreadable
    }
  }

  // Declared first: destroyed last, after the sockets that use it.
  asio::io_context ioc;
  const http_pool_settings settings;
  /// Null: plain HTTP.
  std::unique_ptr<ssl::context> tls;
  asio::executor_work_guard<asio::io_context::executor_type> work;
  std::deque<job_ptr> queue;
  std::vector<std::shared_ptr<connection>> idle;
  /// Every open (or opening) connection: idle ones and busy ones.
  std::set<std::shared_ptr<connection>> all;
  std::set<std::shared_ptr<asio::steady_timer>> timers;
  bool closed = false;
  /// Set (by the handle) before the shut down is posted: later submits are
  /// answered on the caller's thread, since nothing may run them.
  std::mutex stop_mtx;
  bool stopping = false;
  std::atomic<uint64_t> connects{0};
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> reused{0};
  std::atomic<uint64_t> retried{0};

  void submit(job_ptr job);
  void dispatch();
  void finish(const job_ptr& job, http_outcome out);
  /// A connection is done with its job: back to the idle list or closed.
  void release(const std::shared_ptr<connection>& c, bool keep);
  /// Sends a job that failed on a stale reused connection once more.
  void retry(job_ptr job);
  void shut_down();
  void run_after(std::chrono::milliseconds delay, std::function<void()> fn);
};

class connection : public std::enable_shared_from_this<connection> {
public:
  explicit connection(http_pool_impl& pool) : pool_(pool), resolver_(pool.ioc) {
    if (pool.tls)
      tls_.emplace(pool.ioc, *pool.tls);
    else
      plain_.emplace(pool.ioc);
  }

  void start(job_ptr job) {
    job_ = std::move(job);
    reused_ = connected_;
    if (reused_) {
      ++pool_.reused;
      do_write();
    } else {
      do_resolve();
    }
  }

  /// Usable again: idle for less than the limit, and the server has not
  /// closed it (no EOF or stray bytes waiting).
  bool fresh(steady::time_point now) {
    if (now - last_used_ >= pool_.settings.max_idle || !socket().is_open())
      return false;
    char byte;
    auto n =
      ::recv(socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }

  /// The job it runs, if any.
  const job_ptr& current() const noexcept { return job_; }

  /// Ends whatever runs (its handlers see operation_aborted).
  void abort() {
    beast::error_code ignored;
    resolver_.cancel();
    socket().shutdown(tcp::socket::shutdown_both, ignored);
    socket().close(ignored);
  }

private:
  void do_resolve() {
    resolver_.async_resolve(
      pool_.settings.host, std::to_string(pool_.settings.port),
      [self{shared_from_this()}](beast::error_code ec,
                                 tcp::resolver::results_type results) {
        self->on_resolve(ec, std::move(results));
      });
  }

  void on_resolve(beast::error_code ec, tcp::resolver::results_type results) {
    if (gone())
      return;
    if (ec)
      return fail(failure(
        http_failure_kind::connect,
        "cannot resolve " + pool_.settings.host + ": " + ec.message(), false));
    asio::async_connect(
      socket(), results,
      [self{shared_from_this()}](beast::error_code ec, const tcp::endpoint&) {
        self->on_connect(ec);
      });
  }

  void on_connect(beast::error_code ec) {
    if (gone())
      return;
    if (ec)
      return fail(failure(http_failure_kind::connect,
                          "cannot connect to " + where() + ": " + ec.message(),
                          false));
    connected_ = true;
    ++pool_.connects;
    beast::error_code ignored;
    socket().set_option(tcp::no_delay{true}, ignored);
    if (!tls_)
      return do_write();
    auto& host = pool_.settings.host;
    beast::error_code not_ip;
    asio::ip::make_address(host, not_ip);
    if (not_ip) // SNI names hosts, never addresses (RFC 6066)
      SSL_set_tlsext_host_name(tls_->native_handle(), host.c_str());
    tls_->set_verify_callback(ssl::host_name_verification(host));
    tls_->async_handshake(ssl::stream_base::client,
                          [self{shared_from_this()}](beast::error_code ec) {
                            self->on_handshake(ec);
                          });
  }

  void on_handshake(beast::error_code ec) {
    if (gone())
      return;
    if (ec)
      return fail(failure(
        http_failure_kind::connect,
        "TLS handshake with " + where() + " failed: " + ec.message(), false));
    do_write();
  }

  void do_write() {
    auto& r = job_->req;
    req_.emplace(http::string_to_verb(r.method), r.target, 11);
    req_->set(http::field::host, where());
    req_->set(http::field::user_agent, "sv-remote-provider");
    for (auto& [name, value] : r.headers)
      req_->set(name, value);
    if (!r.content_type.empty())
      req_->set(http::field::content_type, r.content_type);
    req_->body() = r.body; // a copy: a retry sends it again
    req_->keep_alive(true);
    req_->prepare_payload();
    ++pool_.requests;
    with_stream([this](auto& stream) {
      http::async_write(
        stream, *req_,
        [self{shared_from_this()}](beast::error_code ec, size_t) {
          self->on_write(ec);
        });
    });
  }

  void on_write(beast::error_code ec) {
    req_.reset();
    if (gone())
      return;
    if (ec)
      return broken(ec, false);
    parser_.emplace();
    parser_->header_limit(64 * 1024);
    parser_->body_limit(pool_.settings.max_response_bytes);
    with_stream([this](auto& stream) {
      http::async_read(stream, buffer_, *parser_,
                       [self{shared_from_this()}](
                         beast::error_code ec, size_t) { self->on_read(ec); });
    });
  }

  void on_read(beast::error_code ec) {
    if (gone())
      return;
    if (ec == http::error::body_limit || ec == http::error::header_limit)
      return fail(failure(http_failure_kind::too_large,
                          "the answer of " + where() + " exceeds " +
                            std::to_string(pool_.settings.max_response_bytes) +
                            " bytes",
                          true));
    if (ec)
      return broken(ec, parser_->got_some());
    auto res = parser_->release();
    parser_.reset();
    http_outcome out;
    out.ok = true;
    out.maybe_sent = true;
    out.response.status = res.result_int();
    out.response.retry_after = std::string{res[http::field::retry_after]};
    out.response.body = std::move(res.body());
    auto keep = res.keep_alive();
    auto job = std::move(job_);
    pool_.finish(job, std::move(out));
    last_used_ = steady::now();
    pool_.release(shared_from_this(), keep);
  }

  /// The connection broke after connecting. On a reused connection before
  /// any byte of the answer, the server most likely closed it idle: a
  /// request safe to repeat goes once more on a fresh one.
  void broken(beast::error_code ec, bool got_some) {
    auto& r = job_->req;
    if (reused_ && !got_some && buffer_.size() == 0 && r.idempotent &&
        !job_->retried) {
      auto job = std::move(job_);
      close_self();
      pool_.retry(std::move(job));
      return;
    }
    if (ec == http::error::end_of_stream || ec == asio::error::eof ||
        ec == asio::error::connection_reset || ec == asio::error::broken_pipe ||
        ec == asio::error::connection_aborted)
      return fail(failure(http_failure_kind::lost,
                          "the connection to " + where() +
                            " broke before its answer: " + ec.message(),
                          true));
    beast::error_code http_sample = http::error::bad_version;
    auto kind = ec.category() == http_sample.category()
                  ? http_failure_kind::protocol
                  : http_failure_kind::lost;
    fail(failure(kind, "request to " + where() + " failed: " + ec.message(),
                 true));
  }

  /// The job's deadline (or a shut down) already finished it: close.
  bool gone() {
    if (job_ && !job_->finished)
      return false;
    job_.reset();
    close_self();
    return true;
  }

  void fail(http_outcome out) {
    auto job = std::move(job_);
    pool_.finish(job, std::move(out));
    close_self();
  }

  void close_self() {
    abort();
    connected_ = false;
    pool_.release(shared_from_this(), false);
  }

  std::string where() const {
    return pool_.settings.host + ":" + std::to_string(pool_.settings.port);
  }

  tcp::socket& socket() {
    return tls_ ? beast::get_lowest_layer(*tls_) : *plain_;
  }

  template <class F>
  void with_stream(F f) {
    if (tls_)
      f(*tls_);
    else
      f(*plain_);
  }

  http_pool_impl& pool_;
  tcp::resolver resolver_;
  // One of them: the connection's stream.
  std::optional<tcp::socket> plain_;
  std::optional<beast::ssl_stream<tcp::socket>> tls_;
  beast::flat_buffer buffer_;
  std::optional<http::request<http::string_body>> req_;
  std::optional<http::response_parser<http::string_body>> parser_;
  job_ptr job_;
  steady::time_point last_used_;
  bool connected_ = false;
  bool reused_ = false;
};

void http_pool_impl::submit(job_ptr job) {
  if (closed) {
    finish(job, failure(http_failure_kind::shutdown,
                        "the HTTP client is shutting down", false));
    return;
  }
  job->timer = std::make_unique<asio::steady_timer>(ioc);
  job->timer->expires_after(job->req.deadline);
  job->timer->async_wait(
    [self{shared_from_this()},
     weak{std::weak_ptr<http_job>{job}}](beast::error_code ec) {
      auto job = weak.lock();
      if (ec || !job || job->finished)
        return;
      auto conn = job->conn.lock();
      self->finish(job,
                   failure(http_failure_kind::timeout,
                           "no answer within " +
                             std::to_string(job->req.deadline.count()) + " ms",
                           conn != nullptr));
      if (conn)
        conn->abort(); // its handlers see the job finished and close it
      else
        self->queue.erase(
          std::remove(self->queue.begin(), self->queue.end(), job),
          self->queue.end());
    });
  queue.push_back(std::move(job));
  dispatch();
}

void http_pool_impl::dispatch() {
  auto now = steady::now();
  while (!queue.empty() && !closed) {
    std::shared_ptr<connection> c;
    while (!idle.empty() && !c) {
      auto candidate = std::move(idle.back());
      idle.pop_back();
      if (candidate->fresh(now)) {
        c = std::move(candidate);
      } else {
        candidate->abort();
        all.erase(candidate);
      }
    }
    if (!c) {
      if (all.size() >= settings.connections)
        return; // a busy connection picks the next job when it is done
      c = std::make_shared<connection>(*this);
      all.insert(c);
    }
    auto job = std::move(queue.front());
    queue.pop_front();
    job->conn = c;
    c->start(std::move(job));
  }
}

void http_pool_impl::finish(const job_ptr& job, http_outcome out) {
  if (!job || job->finished)
    return;
  job->finished = true;
  job->conn.reset();
  if (job->timer)
    job->timer->cancel();
  auto done = std::move(job->done);
  try {
    done(std::move(out));
  } catch (const std::exception& e) {
    spdlog::error("remote provider: an HTTP callback threw: {}", e.what());
  }
}

void http_pool_impl::release(const std::shared_ptr<connection>& c, bool keep) {
  if (keep && !closed) {
    idle.push_back(c);
  } else {
    all.erase(c);
    // An idle entry of a closed connection is dropped by dispatch.
  }
  dispatch();
}

void http_pool_impl::retry(job_ptr job) {
  if (closed) {
    finish(job, failure(http_failure_kind::shutdown,
                        "the HTTP client is shutting down", true));
    return;
  }
  job->retried = true;
  job->conn.reset();
  ++retried;
  queue.push_front(std::move(job));
  dispatch();
}

void http_pool_impl::shut_down() {
  if (closed)
    return;
  closed = true;
  auto waiting = std::move(queue);
  queue.clear();
  for (auto& job : waiting)
    finish(job, failure(http_failure_kind::shutdown,
                        "the HTTP client is shutting down", false));
  auto open = std::move(all);
  all.clear();
  idle.clear();
  for (auto& c : open) {
    if (auto job = c->current())
      finish(job, failure(http_failure_kind::shutdown,
                          "the HTTP client is shutting down", true));
    c->abort(); // its handlers see the job finished and close it
  }
  for (auto& t : timers)
    t->cancel();
  timers.clear();
  work.reset();
}

void http_pool_impl::run_after(std::chrono::milliseconds delay,
                               std::function<void()> fn) {
  if (closed)
    return;
  auto t = std::make_shared<asio::steady_timer>(ioc);
  t->expires_after(delay);
  timers.insert(t);
  t->async_wait(
    [self{shared_from_this()}, t, fn{std::move(fn)}](beast::error_code ec) {
      self->timers.erase(t);
      if (!ec && !self->closed)
        fn();
    });
}

} // namespace detail

// -- the handle ---------------------------------------------------------------

http_pool::http_pool(http_pool_settings settings)
    : impl_(std::make_shared<detail::http_pool_impl>(std::move(settings))) {
  thread_ = std::thread{[impl{impl_}] {
    for (;;) {
      try {
        impl->ioc.run();
        return;
      } catch (const std::exception& e) {
        spdlog::error("remote provider: the HTTP I/O thread caught: {}",
                      e.what());
      }
    }
  }};
}

http_pool::~http_pool() {
  if (!thread_.joinable())
    return;
  {
    std::lock_guard<std::mutex> guard{impl_->stop_mtx};
    impl_->stopping = true;
  }
  asio::post(impl_->ioc, [impl{impl_}] { impl->shut_down(); });
  // The thread holds the pool's state and ends when the last handler ran.
  thread_.detach();
}

void http_pool::submit(http_request req, http_callback done) {
  {
    std::lock_guard<std::mutex> guard{impl_->stop_mtx};
    if (!impl_->stopping) {
      auto job = std::make_shared<detail::http_job>();
      job->req = std::move(req);
      job->done = std::move(done);
      asio::post(impl_->ioc,
                 [impl{impl_}, job{std::move(job)}] { impl->submit(job); });
      return;
    }
  }
  // The I/O thread may be gone: answer here.
  done(detail::failure(http_failure_kind::shutdown,
                       "the HTTP client is shut down", false));
}

void http_pool::after(std::chrono::milliseconds delay,
                      std::function<void()> fn) {
  asio::post(impl_->ioc, [impl{impl_}, delay, fn{std::move(fn)}]() mutable {
    impl->run_after(delay, std::move(fn));
  });
}

void http_pool::shut_down() {
  if (!thread_.joinable())
    return;
  {
    std::lock_guard<std::mutex> guard{impl_->stop_mtx};
    impl_->stopping = true;
  }
  asio::post(impl_->ioc, [impl{impl_}] { impl->shut_down(); });
  thread_.join();
}

const http_pool_settings& http_pool::settings() const noexcept {
  return impl_->settings;
}

http_pool::counters http_pool::stats() const {
  counters out;
  out.connects = impl_->connects.load();
  out.requests = impl_->requests.load();
  out.reused = impl_->reused.load();
  out.retried = impl_->retried.load();
  return out;
}

} // namespace sv::remote
