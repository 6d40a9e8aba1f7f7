#include "providers/nodes/detail/transport/basp_gate.hpp"

#include "actors/detail/quiet.hpp"
#include "providers/nodes/detail/peer_identity.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/detail/sync_request_bouncer.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/io/basp_broker.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/network/multiplexer.hpp>
#include <caf/io/scribe.hpp>
#include <caf/scheduled_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <regex>
#include <set>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

namespace sv::transport {

namespace {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;
using tcp = asio::ip::tcp;
using local_socket = asio::local::stream_protocol::socket;
using boost::system::error_code;

using gate_dialed_atom = caf::atom_constant<caf::atom("gdialed")>;
using gate_failed_atom = caf::atom_constant<caf::atom("gfailed")>;
using gate_accepted_atom = caf::atom_constant<caf::atom("gaccepted")>;
using gate_listening_atom = caf::atom_constant<caf::atom("glistening")>;

const char* other_role(const std::string& role) {
  return role == node_role ? front_role : node_role;
}

bool valid_name(const std::string& x) {
  static const std::regex re{"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}"};
  return std::regex_match(x, re);
}

/// The one value of `nid` in `name` (empty and false when absent or
/// repeated).
bool subject_field(X509_NAME* name, int nid, std::string& out) {
  int idx = X509_NAME_get_index_by_NID(name, nid, -1);
  if (idx < 0 || X509_NAME_get_index_by_NID(name, nid, idx) >= 0)
    return false;
  auto* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, idx));
  unsigned char* utf8 = nullptr;
  int len = ASN1_STRING_to_UTF8(&utf8, data);
  if (len < 0)
    return false;
  out.assign(reinterpret_cast<char*>(utf8), static_cast<size_t>(len));
  OPENSSL_free(utf8);
  return true;
}

/// {CN, O} of `cert`, or why not.
bool identity_of(X509* cert, peer_identity& who, std::string& why) {
  if (cert == nullptr) {
    why = "no certificate";
    return false;
  }
  auto* subject = X509_get_subject_name(cert);
  if (!subject_field(subject, NID_commonName, who.name) ||
      !subject_field(subject, NID_organizationName, who.role)) {
    why = "the certificate's subject needs exactly one CN (the name) and "
          "one O (the role)";
    return false;
  }
  if (!valid_name(who.name)) {
    why = "certificate CN '" + who.name +
          "' is not a name (1-64 of A-Z a-z 0-9 . _ -)";
    return false;
  }
  if (who.role != node_role && who.role != front_role) {
    why = "certificate O '" + who.role + "' is not a role (sv-node, sv-front)";
    return false;
  }
  return true;
}

std::shared_ptr<ssl::context> make_context(const gate_settings& s) {
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls);
  auto step = [&](const char* what, const std::string& file, auto&& fn) {
    error_code ec;
    fn(ec);
    if (ec)
      throw std::runtime_error("TLS " + std::string{what} + " " + file + ": " +
                               ec.message());
  };
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                   ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                   ssl::context::no_tlsv1_1);
  step("CA", s.tls.ca,
       [&](error_code& ec) { ctx->load_verify_file(s.tls.ca, ec); });
  step("certificate", s.tls.cert, [&](error_code& ec) {
    ctx->use_certificate_chain_file(s.tls.cert, ec);
  });
  step("key", s.tls.key, [&](error_code& ec) {
    ctx->use_private_key_file(s.tls.key, ssl::context::pem, ec);
  });
  auto* native = ctx->native_handle();
  if (SSL_CTX_check_private_key(native) != 1)
    throw std::runtime_error("TLS key " + s.tls.key +
                             " does not match the certificate " + s.tls.cert);
  ctx->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
  // Our own certificate: it must chain to the CA and hold our role, or
  // every peer would refuse us with a less helpful message.
  auto* own = SSL_CTX_get0_certificate(native);
  auto* store_ctx = X509_STORE_CTX_new();
  bool chains = store_ctx != nullptr &&
                X509_STORE_CTX_init(store_ctx, SSL_CTX_get_cert_store(native),
                                    own, nullptr) == 1 &&
                X509_verify_cert(store_ctx) == 1;
  X509_STORE_CTX_free(store_ctx);
  if (!chains)
    throw std::runtime_error("TLS certificate " + s.tls.cert +
                             " is not signed by the CA " + s.tls.ca);
  peer_identity me;
  std::string why;
  if (!identity_of(own, me, why))
    throw std::runtime_error("TLS certificate " + s.tls.cert + ": " + why);
  if (me.role != s.role)
    throw std::runtime_error(
      "TLS certificate " + s.tls.cert + " is an " + me.role +
      " certificate; this side needs O=" + s.role +
      " (sv-certs issue DIR --role " + s.role + " --name NAME)");
  return ctx;
}

class gate;

/// One relayed connection; lives on the gate's I/O thread.
class relay_base {
public:
  virtual ~relay_base() = default;
  virtual void close(const std::string& why) = 0;
};

// -- the module ---------------------------------------------------------------

class gate final : public caf::actor_system::module {
public:
  gate(caf::actor_system& sys, gate_settings settings,
       std::shared_ptr<ssl::context> ctx)
      : sys_(sys), settings_(std::move(settings)), ctx_(std::move(ctx)),
        work_(asio::make_work_guard(ioc_)) {
    // nop
  }

  void start() override;
  void stop() override;
  void init(caf::actor_system_config&) override {}
  id_t id() const override { return network_manager; }
  void* subtype_ptr() override { return this; }

  // -- called on the I/O thread -------------------------------------------

  void dial(std::string host, uint16_t port, uint64_t id);
  void listen(std::string host, uint16_t port, bool reuse, uint64_t id);

  /// Binds the peer of a relay (identity from its certificate, node id from
  /// its handshake); false with `why` when the node id or (for a node) the
  /// name is connected already.
  bool bind(relay_base* r, const caf::node_id& nid, peer_identity& who,
            std::string& why);
  void unbind(relay_base* r);
  void forget(const std::shared_ptr<relay_base>& r) { relays_.erase(r); }

  const gate_settings& settings() const { return settings_; }
  const caf::node_id& self_node() const { return self_node_; }
  caf::actor actor() const { return actor_; }
  asio::io_context& ioc() { return ioc_; }

private:
  template <class Stream>
  void hand_over(Stream stream, peer_identity who, std::string where,
                 bool dialed, uint64_t id, uint16_t port);
  void accept_loop(std::shared_ptr<tcp::acceptor> acc, uint16_t port);

  caf::actor_system& sys_;
  gate_settings settings_;
  std::shared_ptr<ssl::context> ctx_;
  asio::io_context ioc_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::thread thread_;
  caf::actor actor_;
  caf::node_id self_node_;
  std::set<std::shared_ptr<relay_base>> relays_;
  std::vector<std::shared_ptr<tcp::acceptor>> acceptors_;
  size_t pending_handshakes_ = 0;
  struct binding {
    caf::node_id nid;
    peer_identity who;
  };
  std::map<relay_base*, binding> bound_;
  std::set<caf::node_id> live_ids_;
  std::set<std::string> live_node_names_;
};

std::mutex gates_mtx;
std::map<caf::actor_system*, caf::actor> gates;

// -- relays -------------------------------------------------------------------

template <class Stream>
class relay final : public relay_base,
                    public std::enable_shared_from_this<relay<Stream>> {
public:
  relay(gate& g, Stream stream, local_socket local, bool dialed,
        peer_identity who, std::string where)
      : g_(g), stream_(std::move(stream)), local_(std::move(local)),
        check_(dialed, g.self_node(), g.settings().limits),
        who_(std::move(who)), where_(std::move(where)) {
    // nop
  }

  void start() {
    read_peer();
    read_local();
  }

  void close(const std::string& why) override {
    if (closed_)
      return;
    closed_ = true;
    if (!why.empty())
      spdlog::info("gate: connection {} ({}) closed: {}", where_, who_.name,
                   why);
    error_code ec;
    stream_.lowest_layer().close(ec);
    local_.close(ec);
    g_.unbind(this);
    g_.forget(this->shared_from_this());
  }

private:
  void refuse(const std::string& why) {
    spdlog::warn("gate: refused {} {} ({}): {}", who_.role,
                 who_.name.empty() ? "(insecure)" : who_.name, where_, why);
    close("");
  }

  void read_peer() {
    auto self = this->shared_from_this();
    stream_.async_read_some(asio::buffer(in_), [self](error_code ec, size_t n) {
      self->on_peer(ec, n);
    });
  }

  void on_peer(error_code ec, size_t n) {
    if (closed_)
      return;
    if (ec) {
      close(ec == asio::error::eof ? "" : "peer: " + ec.message());
      return;
    }
    if (!check_.feed(in_.data(), n, to_local_)) {
      refuse(check_.refusal());
      return;
    }
    if (check_.take_learned()) {
      std::string why;
      if (!g_.bind(this, check_.peer(), who_, why)) {
        refuse(why);
        return;
      }
    }
    if (to_local_.empty()) {
      read_peer();
      return;
    }
    auto self = this->shared_from_this();
    asio::async_write(local_, asio::buffer(to_local_),
                      [self](error_code ec, size_t) {
                        if (self->closed_)
                          return;
                        if (ec) {
                          self->close("local: " + ec.message());
                          return;
                        }
                        self->to_local_.clear();
                        self->read_peer();
                      });
  }

  void read_local() {
    auto self = this->shared_from_this();
    local_.async_read_some(asio::buffer(out_), [self](error_code ec, size_t n) {
      if (self->closed_)
        return;
      if (ec) {
        self->close(""); // CAF closed it
        return;
      }
      asio::async_write(self->stream_, asio::buffer(self->out_.data(), n),
                        [self](error_code ec, size_t) {
                          if (self->closed_)
                            return;
                          if (ec) {
                            self->close("peer: " + ec.message());
                            return;
                          }
                          self->read_local();
                        });
    });
  }

  gate& g_;
  Stream stream_;
  local_socket local_;
  frame_check check_;
  peer_identity who_;
  std::string where_;
  bool closed_ = false;
  std::array<char, 65536> in_;
  std::array<char, 65536> out_;
  std::vector<char> to_local_;
};

// -- the gate actor -----------------------------------------------------------

struct gate_state {
  gate* g = nullptr;
  caf::actor broker;
  uint64_t next_id = 0;
  /// Dials in flight: id -> endpoint ("HOST:PORT").
  std::map<uint64_t, std::string> dials;
  /// Requests waiting for an endpoint's dial.
  std::map<std::string, std::vector<caf::response_promise>> waiting;
  /// Connected endpoints (like the middleman actor's cache): repeated
  /// connects answer at once while the remote actor lives.
  std::map<std::string, caf::message> cached;
  std::map<std::string, caf::actor_addr> cached_addr;
  struct publication {
    caf::response_promise rp;
    caf::strong_actor_ptr whom;
    std::set<std::string> sigs;
  };
  std::map<uint64_t, publication> listens;
  std::map<uint16_t, publication> published;
  static inline const char* name = "sv.basp_gate";
};

using gate_ptr = caf::stateful_actor<gate_state>*;

caf::timespan seconds_span(double s) {
  return std::chrono::duration_cast<caf::timespan>(
    std::chrono::duration<double>{s});
}

void answer_waiters(gate_ptr self, const std::string& key,
                    const caf::message& answer) {
  auto i = self->state.waiting.find(key);
  if (i == self->state.waiting.end())
    return;
  auto rps = std::move(i->second);
  self->state.waiting.erase(i);
  for (auto& rp : rps)
    rp.deliver(answer);
}

caf::behavior gate_actor_impl(gate_ptr self, gate* g, caf::actor broker) {
  self->state.g = g;
  self->state.broker = std::move(broker);
  self->set_default_handler(log_and_drop_unexpected);
  self->set_down_handler([=](caf::down_msg& dm) {
    auto& st = self->state;
    for (auto i = st.cached_addr.begin(); i != st.cached_addr.end();) {
      if (i->second == dm.source) {
        st.cached.erase(i->first);
        i = st.cached_addr.erase(i);
      } else {
        ++i;
      }
    }
  });
  return {
    [=](caf::connect_atom, std::string& host, uint16_t port) {
      auto& st = self->state;
      auto rp = self->make_response_promise();
      auto key = host + ":" + std::to_string(port);
      if (auto i = st.cached.find(key); i != st.cached.end()) {
        rp.deliver(i->second);
        return;
      }
      auto& waiters = st.waiting[key];
      waiters.push_back(rp);
      if (waiters.size() > 1)
        return; // a dial is in flight
      auto id = ++st.next_id;
      st.dials.emplace(id, key);
      asio::post(g->ioc(), [g, host, port, id] { g->dial(host, port, id); });
    },
    [=](gate_dialed_atom, uint64_t id, int fd, uint16_t port) {
      auto& st = self->state;
      auto i = st.dials.find(id);
      if (i == st.dials.end()) {
        ::close(fd);
        return;
      }
      auto key = i->second;
      st.dials.erase(i);
      auto scribe = self->system().middleman().backend().new_scribe(fd);
      self
        ->request(st.broker, seconds_span(st.g->settings().handshake_timeout_s),
                  caf::connect_atom::value, std::move(scribe), port)
        .then(
          [=](caf::node_id& nid, caf::strong_actor_ptr& addr,
              std::set<std::string>& sigs) {
            auto& st = self->state;
            if (nid && addr) {
              self->monitor(addr);
              st.cached_addr[key] = caf::actor_cast<caf::actor_addr>(addr);
              st.cached[key] = caf::make_message(nid, addr, sigs);
            }
            answer_waiters(self, key,
                           caf::make_message(std::move(nid), std::move(addr),
                                             std::move(sigs)));
          },
          [=](caf::error& err) {
            answer_waiters(self, key, caf::make_message(std::move(err)));
          });
    },
    [=](gate_failed_atom, uint64_t id, std::string& why) {
      auto& st = self->state;
      auto err = caf::make_error(caf::sec::cannot_connect_to_node, why);
      if (auto i = st.dials.find(id); i != st.dials.end()) {
        auto key = i->second;
        st.dials.erase(i);
        answer_waiters(self, key, caf::make_message(std::move(err)));
      } else if (auto j = st.listens.find(id); j != st.listens.end()) {
        j->second.rp.deliver(std::move(err));
        st.listens.erase(j);
      }
    },
    [=](caf::publish_atom, uint16_t port, caf::strong_actor_ptr& whom,
        std::set<std::string>& sigs, std::string& host, bool reuse) {
      auto& st = self->state;
      auto id = ++st.next_id;
      st.listens.emplace(
        id, gate_state::publication{self->make_response_promise(),
                                    std::move(whom), std::move(sigs)});
      asio::post(g->ioc(), [g, host, port, reuse, id] {
        g->listen(host, port, reuse, id);
      });
    },
    [=](gate_listening_atom, uint64_t id, uint16_t port) {
      auto& st = self->state;
      auto i = st.listens.find(id);
      if (i == st.listens.end())
        return;
      auto rp = i->second.rp;
      st.published[port] = std::move(i->second);
      st.listens.erase(i);
      rp.deliver(port);
    },
    [=](gate_accepted_atom, uint16_t port, int fd) {
      auto& st = self->state;
      auto i = st.published.find(port);
      if (i == st.published.end()) {
        ::close(fd);
        return;
      }
      auto scribe = self->system().middleman().backend().new_scribe(fd);
      // CAF's own way of serving a connection without its doorman: the
      // broker adds the scribe, serves `whom` on `port` and writes its
      // server handshake.
      self->send(st.broker, caf::publish_atom::value, std::move(scribe), port,
                 i->second.whom, i->second.sigs);
    },
  };
}

// -- gate: I/O thread ---------------------------------------------------------

/// What scheduled_actor::cleanup does for every actor but a broker: close
/// the mailbox (later messages are dropped at once), then drop what is in
/// it, answering requests with `reason`.
void close_mailbox(caf::scheduled_actor* self, const caf::error& reason) {
  auto& box = self->mailbox();
  if (box.closed())
    return;
  box.close();
  self->get_normal_queue().flush_cache();
  self->get_urgent_queue().flush_cache();
  caf::detail::sync_request_bouncer bounce{reason};
  while (box.queue().new_round(1000, bounce).consumed_items)
    ; // nop
}

void gate::start() {
  self_node_ = sys_.node();
  auto broker =
    sys_.middleman().named_broker<caf::io::basp_broker>(caf::atom("BASP"));
  // CAF 0.17.6 (and 0.18) brokers never close their mailbox when they stop:
  // abstract_broker::cleanup calls local_actor::cleanup, not
  // scheduled_actor::cleanup. Whatever reaches the BASP broker after the
  // middleman stopped it stays in its mailbox: the heartbeat tick it sends
  // itself (the actor clock runs until the scheduler stops, after the
  // middleman), the down messages of the spawn-server helpers its on_exit
  // kills. The tick's sender is the broker: a cycle, the broker and all it
  // holds never freed (LeakSanitizer after nodes_e2e_sigstop; the 1 ms
  // heartbeat of nodes_shutdown_test makes it certain). So we close it, on
  // the broker's thread, as the last step of its cleanup.
  auto* raw = dynamic_cast<caf::scheduled_actor*>(
    caf::actor_cast<caf::abstract_actor*>(broker));
  if (raw != nullptr)
    broker->attach_functor(
      [raw](const caf::error& reason) { close_mailbox(raw, reason); });
  actor_ = sys_.spawn<caf::hidden>(gate_actor_impl, this, broker);
  {
    std::lock_guard<std::mutex> guard{gates_mtx};
    gates[&sys_] = actor_;
  }
  thread_ = std::thread{[this] { ioc_.run(); }};
}

void gate::stop() {
  {
    std::lock_guard<std::mutex> guard{gates_mtx};
    gates.erase(&sys_);
  }
  // The gate actor is hidden: the system does not wait for it. Unless it
  // is gone before the scheduler stops, its exit message is never read and
  // its state (proxies of nodes, the broker's handle) outlives the process
  // (LeakSanitizer saw it once in five nodes_e2e_spread_and_kill runs).
  // The system's modules stop before its scheduler, so waiting is possible
  // here, on the thread that destroys the system.
  if (actor_) {
    caf::scoped_actor self{sys_};
    self->monitor(actor_);
    self->send_exit(actor_, caf::exit_reason::user_shutdown);
    self->receive(
      [](const caf::down_msg&) {},
      caf::after(std::chrono::seconds{5}) >>
        [] { spdlog::warn("gate: its actor did not stop within 5 s"); });
  }
  asio::post(ioc_, [this] {
    auto all = relays_;
    for (auto& r : all)
      r->close("");
    for (auto& acc : acceptors_) {
      error_code ec;
      acc->close(ec);
    }
    ioc_.stop();
  });
  work_.reset();
  if (thread_.joinable())
    thread_.join();
  actor_ = caf::actor{};
}

bool gate::bind(relay_base* r, const caf::node_id& nid, peer_identity& who,
                std::string& why) {
  if (settings_.insecure)
    who.name = "insecure/" + to_string(nid);
  if (live_ids_.count(nid) > 0) {
    why = "node id " + to_string(nid) + " is connected already";
    return false;
  }
  if (who.role == node_role && !settings_.insecure &&
      live_node_names_.count(who.name) > 0) {
    why = "a node named " + who.name + " is connected already";
    return false;
  }
  if (!peer_registry::bind(nid, who)) {
    why = "node id " + to_string(nid) + " is bound to another identity";
    return false;
  }
  live_ids_.insert(nid);
  if (who.role == node_role)
    live_node_names_.insert(who.name);
  bound_.emplace(r, binding{nid, who});
  spdlog::info("gate: {} {} is node {}", who.role, who.name, to_string(nid));
  return true;
}

void gate::unbind(relay_base* r) {
  auto i = bound_.find(r);
  if (i == bound_.end())
    return;
  peer_registry::unbind(i->second.nid);
  live_ids_.erase(i->second.nid);
  if (i->second.who.role == node_role)
    live_node_names_.erase(i->second.who.name);
  bound_.erase(i);
}

template <class Stream>
void gate::hand_over(Stream stream, peer_identity who, std::string where,
                     bool dialed, uint64_t id, uint16_t port) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0,
                   fds) != 0) {
    std::string why = "socketpair: " + std::string{strerror(errno)};
    spdlog::error("gate: {}", why);
    if (dialed)
      caf::anon_send(actor_, gate_failed_atom::value, id, why);
    return;
  }
  error_code ec;
  local_socket local{ioc_};
  local.assign(asio::local::stream_protocol{}, fds[0], ec);
  auto r =
    std::make_shared<relay<Stream>>(*this, std::move(stream), std::move(local),
                                    dialed, std::move(who), std::move(where));
  relays_.insert(r);
  r->start();
  if (dialed)
    caf::anon_send(actor_, gate_dialed_atom::value, id, fds[1], port);
  else
    caf::anon_send(actor_, gate_accepted_atom::value, port, fds[1]);
}

/// What a dial or an accept holds until its peer is through TLS.
struct handshake {
  explicit handshake(asio::io_context& ioc) : socket(ioc), timer(ioc) {}
  tcp::socket socket;
  asio::steady_timer timer;
  std::unique_ptr<ssl::stream<tcp::socket>> tls;
  bool done = false;
  std::string where;
};

void gate::dial(std::string host, uint16_t port, uint64_t id) {
  auto hs = std::make_shared<handshake>(ioc_);
  auto resolver = std::make_shared<tcp::resolver>(ioc_);
  hs->where = host + ":" + std::to_string(port);
  auto fail = [this, hs, id](const std::string& why) {
    if (hs->done)
      return;
    hs->done = true;
    hs->timer.cancel();
    error_code ec;
    if (hs->tls)
      hs->tls->lowest_layer().close(ec);
    else
      hs->socket.close(ec);
    caf::anon_send(actor_, gate_failed_atom::value, id, why);
  };
  hs->timer.expires_after(std::chrono::duration_cast<std::chrono::nanoseconds>(
    std::chrono::duration<double>{settings_.handshake_timeout_s}));
  hs->timer.async_wait([fail, resolver](error_code ec) {
    if (ec)
      return;
    resolver->cancel();
    fail("connect or TLS handshake timed out");
  });
  resolver->async_resolve(
    host, std::to_string(port),
    [this, hs, resolver, fail, id, port](error_code ec,
                                         tcp::resolver::results_type found) {
      if (hs->done)
        return;
      if (ec) {
        fail("cannot resolve: " + ec.message());
        return;
      }
      asio::async_connect(
        hs->socket, found,
        [this, hs, fail, id, port](error_code ec, const tcp::endpoint&) {
          if (hs->done)
            return;
          if (ec) {
            fail("cannot connect: " + ec.message());
            return;
          }
          error_code ignored;
          hs->socket.set_option(tcp::no_delay{true}, ignored);
          peer_identity who{"", other_role(settings_.role)};
          if (settings_.insecure) {
            hs->done = true;
            hs->timer.cancel();
            hand_over(std::move(hs->socket), who, hs->where, true, id, port);
            return;
          }
          hs->tls = std::make_unique<ssl::stream<tcp::socket>>(
            std::move(hs->socket), *ctx_);
          hs->tls->async_handshake(
            ssl::stream_base::client,
            [this, hs, fail, id, port](error_code ec) {
              if (hs->done)
                return;
              if (ec) {
                fail("TLS handshake refused (is each side's certificate signed "
                     "by the other's CA, and is it a " +
                     std::string{other_role(settings_.role)} +
                     " there?): " + ec.message());
                return;
              }
              peer_identity who;
              std::string why;
              auto* cert = SSL_get1_peer_certificate(hs->tls->native_handle());
              bool ok = identity_of(cert, who, why);
              X509_free(cert);
              if (ok && who.role != other_role(settings_.role)) {
                ok = false;
                why = "its certificate is an " + who.role +
                      " certificate; expected O=" + other_role(settings_.role);
              }
              if (!ok) {
                spdlog::warn("gate: refused {}: {}", hs->where, why);
                fail("TLS peer refused: " + why);
                return;
              }
              hs->done = true;
              hs->timer.cancel();
              hand_over(std::move(*hs->tls), who, hs->where, true, id, port);
            });
        });
    });
}

void gate::listen(std::string host, uint16_t port, bool reuse, uint64_t id) {
  auto fail = [this, id](const std::string& why) {
    caf::anon_send(actor_, gate_failed_atom::value, id, why);
  };
  error_code ec;
  tcp::endpoint ep;
  if (host.empty()) {
    ep = tcp::endpoint{tcp::v4(), port};
  } else {
    tcp::resolver resolver{ioc_};
    auto found =
      resolver.resolve(host, std::to_string(port), tcp::resolver::passive, ec);
    if (ec || found.empty()) {
      fail("cannot resolve " + host + ": " + ec.message());
      return;
    }
    ep = found.begin()->endpoint();
  }
  auto acc = std::make_shared<tcp::acceptor>(ioc_);
  acc->open(ep.protocol(), ec);
  if (!ec)
    acc->set_option(tcp::acceptor::reuse_address{reuse}, ec);
  if (!ec)
    acc->bind(ep, ec);
  if (!ec)
    acc->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    fail("cannot listen on " + host + ":" + std::to_string(port) + ": " +
         ec.message());
    return;
  }
  auto actual = acc->local_endpoint().port();
  acceptors_.push_back(acc);
  caf::anon_send(actor_, gate_listening_atom::value, id, actual);
  accept_loop(acc, actual);
}

void gate::accept_loop(std::shared_ptr<tcp::acceptor> acc, uint16_t port) {
  acc->async_accept([this, acc, port](error_code ec, tcp::socket sock) {
    if (ec == asio::error::operation_aborted || !acc->is_open())
      return;
    if (ec) {
      // Out of descriptors and the like: try again a little later.
      auto t = std::make_shared<asio::steady_timer>(ioc_);
      t->expires_after(std::chrono::milliseconds{100});
      t->async_wait(
        [this, acc, port, t](error_code) { accept_loop(acc, port); });
      return;
    }
    accept_loop(acc, port);
    error_code ignored;
    auto remote = sock.remote_endpoint(ignored);
    auto where =
      remote.address().to_string() + ":" + std::to_string(remote.port());
    if (pending_handshakes_ >= settings_.max_pending_handshakes) {
      spdlog::warn("gate: refused {}: {} TLS handshakes pending", where,
                   pending_handshakes_);
      sock.close(ignored);
      return;
    }
    sock.set_option(tcp::no_delay{true}, ignored);
    peer_identity who{"", other_role(settings_.role)};
    if (settings_.insecure) {
      hand_over(std::move(sock), who, where, false, 0, port);
      return;
    }
    ++pending_handshakes_;
    auto hs = std::make_shared<handshake>(ioc_);
    hs->where = where;
    hs->tls =
      std::make_unique<ssl::stream<tcp::socket>>(std::move(sock), *ctx_);
    auto finish = [this, hs](const std::string& why) {
      if (hs->done)
        return false;
      hs->done = true;
      --pending_handshakes_;
      hs->timer.cancel();
      if (!why.empty()) {
        spdlog::warn("gate: refused {}: {}", hs->where, why);
        error_code ec;
        hs->tls->lowest_layer().close(ec);
      }
      return true;
    };
    hs->timer.expires_after(
      std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::duration<double>{settings_.handshake_timeout_s}));
    hs->timer.async_wait([finish](error_code ec) {
      if (!ec)
        finish("TLS handshake timed out");
    });
    hs->tls->async_handshake(
      ssl::stream_base::server, [this, hs, finish, port](error_code ec) {
        if (hs->done)
          return;
        if (ec) {
          finish("TLS handshake failed: " + ec.message());
          return;
        }
        peer_identity who;
        std::string why;
        auto* cert = SSL_get1_peer_certificate(hs->tls->native_handle());
        bool ok = identity_of(cert, who, why);
        X509_free(cert);
        if (ok && who.role != other_role(settings_.role)) {
          ok = false;
          why = "an " + who.role + " certificate (CN " + who.name +
                ") cannot connect to an " + settings_.role + " as one";
        }
        if (!ok) {
          finish(why);
          return;
        }
        finish("");
        hand_over(std::move(*hs->tls), who, hs->where, false, 0, port);
      });
  });
}

} // namespace

void load_gate(caf::actor_system_config& cfg, const gate_settings& settings) {
  std::shared_ptr<ssl::context> ctx;
  if (!settings.insecure)
    ctx = make_context(settings);
  cfg.module_factories.push_back(
    [settings, ctx](caf::actor_system& sys) -> caf::actor_system::module* {
      return new gate(sys, settings, ctx);
    });
}

caf::actor gate_actor(caf::actor_system& sys) {
  std::lock_guard<std::mutex> guard{gates_mtx};
  auto i = gates.find(&sys);
  return i != gates.end() ? i->second : caf::actor{};
}

} // namespace sv::transport
