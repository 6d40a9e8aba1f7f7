#include "providers/local/registry.hpp"

#include "messages/atoms.hpp"
#include "messages/errors.hpp"
#include "providers/local/host/process.hpp"
#include "providers/local/sandbox/confined_fs.hpp"
#include "providers/local/sandbox/exec.hpp"
#include "providers/local/sandbox/lifecycle.hpp"
#include "providers/local/sandbox/sandbox.hpp"

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <caf/actor.hpp>
#include <caf/actor_addr.hpp>
#include <caf/actor_cast.hpp>
#include <caf/send.hpp>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <mutex>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <thread>
#include <vector>

namespace sv::detail {

namespace asio = boost::asio;

namespace {

/// How long provider shutdown waits for the I/O threads to finish the last
/// stops before it abandons what is left.
constexpr std::chrono::seconds shutdown_wait{30};

caf::message error_reply(provider_errc code, std::string what) {
  return caf::make_message(make_error(code, std::move(what)));
}

caf::message no_such_sandbox(const std::string& id) {
  return error_reply(provider_errc::no_such_sandbox,
                     "no sandbox " + id + " (never created, or stopped)");
}

std::chrono::steady_clock::duration to_duration(double seconds) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
    std::chrono::duration<double>(seconds));
}

} // namespace

struct local_runtime::impl {
  impl(runtime_settings settings, const caf::actor_addr& addr)
      : cfg(std::move(settings)), provider(addr),
        work(asio::make_work_guard(io)) {
    exec_cfg.python_name = cfg.python_name;
    exec_cfg.python_path = cfg.python_path;
    exec_cfg.isolation = cfg.isolation;
  }

  runtime_settings cfg;
  exec_settings exec_cfg;
  caf::actor_addr provider;
  unique_fd root;
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work;
  std::vector<std::thread> threads;

  std::mutex mtx;
  std::condition_variable idle;
  size_t running_threads = 0;
  std::map<std::string, std::shared_ptr<local_sandbox>> sandboxes;
  bool shutting_down = false;

  // -- talking to the provider actor ----------------------------------------

  void send(caf::message msg) {
    // A weak handle: in-flight I/O must not keep a dead provider alive.
    if (auto hdl = caf::actor_cast<caf::actor>(provider))
      caf::anon_send(hdl, std::move(msg));
  }

  void reply(uint64_t req, caf::message msg) {
    send(caf::make_message(io_done_atom::value, req, std::move(msg)));
  }

  // -- the registry ----------------------------------------------------------

  std::shared_ptr<local_sandbox> find(const std::string& id) {
    std::lock_guard<std::mutex> guard{mtx};
    auto i = sandboxes.find(id);
    return i == sandboxes.end() ? nullptr : i->second;
  }

  std::shared_ptr<local_sandbox> take(const std::string& id) {
    std::lock_guard<std::mutex> guard{mtx};
    auto i = sandboxes.find(id);
    if (i == sandboxes.end())
      return nullptr;
    auto sb = std::move(i->second);
    sandboxes.erase(i);
    return sb;
  }

  /// Runs `f(sandbox)` on the sandbox's strand and replies what it returns
  /// (an empty message: `f` replies later itself).
  template <class F>
  void on_strand(uint64_t req, const std::string& id, F f) {
    auto sb = find(id);
    if (!sb)
      return reply(req, no_such_sandbox(id));
    asio::post(sb->strand, [this, req, sb, f{std::move(f)}]() mutable {
      if (sb->stopped)
        return reply(req, no_such_sandbox(sb->id));
      caf::message out;
      try {
        out = f(sb);
      } catch (const fs_error& e) {
        out = error_reply(e.code(), e.what());
      } catch (const std::exception& e) {
        out = error_reply(provider_errc::io_error, e.what());
      }
      if (!out.empty())
        reply(req, std::move(out));
    });
  }

  // -- sandboxes -------------------------------------------------------------

  bool is_shutting_down() {
    std::lock_guard<std::mutex> guard{mtx};
    return shutting_down;
  }

  caf::message make_sandbox(const std::string& id, const sandbox_spec& spec) {
    auto unavailable = [] {
      return error_reply(provider_errc::unavailable,
                         "the local provider is shutting down");
    };
    if (is_shutting_down())
      return unavailable();
    // The file system work happens outside the lock: the actor takes it too.
    std::shared_ptr<local_sandbox> sb;
    try {
      sb = make_local_sandbox(*cfg.isolation, root.get(), cfg.root, id, spec,
                              asio::make_strand(io));
    } catch (const fs_error& e) {
      return error_reply(e.code(), e.what());
    } catch (const std::exception& e) {
      return error_reply(provider_errc::sandbox_error,
                         "cannot create sandbox " + id + ": " + e.what());
    }
    {
      std::lock_guard<std::mutex> guard{mtx};
      if (!shutting_down) {
        sandboxes.emplace(id, sb);
        if (spec.ttl_s > 0)
          asio::post(sb->strand,
                     [this, sb, ttl{spec.ttl_s}] { arm_ttl(sb, ttl); });
        return caf::make_message(ok_atom::value);
      }
    }
    // Shutdown began meanwhile and will not see this sandbox.
    teardown_local_sandbox(*sb);
    return unavailable();
  }

  /// Reaps a sandbox its caller forgot: the actor stops it like a call.
  void arm_ttl(const std::shared_ptr<local_sandbox>& sb, double ttl_s) {
    if (sb->stopped)
      return;
    sb->ttl.expires_after(to_duration(ttl_s));
    sb->ttl.async_wait(asio::bind_executor(
      sb->strand, [this, id{sb->id}](boost::system::error_code ec) {
        if (!ec)
          send(caf::make_message(expired_atom::value, id));
      }));
  }

  /// Kills every process of `sb` and removes it. Runs on the sandbox's
  /// strand (or alone, at shutdown).
  caf::error stop_sandbox(local_sandbox& sb) {
    return teardown_local_sandbox(sb);
  }

  // -- threads ---------------------------------------------------------------

  void start_threads() {
    std::lock_guard<std::mutex> guard{mtx};
    for (size_t i = 0; i < cfg.io_threads; ++i) {
      ++running_threads;
      threads.emplace_back([this] { run_thread(); });
    }
  }

  void run_thread() {
    for (;;) {
      try {
        io.run();
        break;
      } catch (const std::exception& e) {
        spdlog::error("local provider: I/O handler failed: {}", e.what());
      }
    }
    std::lock_guard<std::mutex> guard{mtx};
    --running_threads;
    idle.notify_all();
  }

  bool on_io_thread() const {
    for (auto& t : threads)
      if (t.get_id() == std::this_thread::get_id())
        return true;
    return false;
  }

  void shutdown() {
    std::map<std::string, std::shared_ptr<local_sandbox>> all;
    {
      std::lock_guard<std::mutex> guard{mtx};
      shutting_down = true;
      all.swap(sandboxes);
    }
    for (auto& entry : all) {
      auto sb = entry.second;
      asio::post(sb->strand, [this, sb] {
        if (auto err = stop_sandbox(*sb))
          spdlog::warn("local provider: stopping {} at shutdown: {}", sb->id,
                       describe(err));
      });
    }
    // Without the guard, run() returns once the stops and the execs they
    // kill are done.
    work.reset();
    {
      std::unique_lock<std::mutex> guard{mtx};
      if (!idle.wait_for(guard, shutdown_wait,
                         [this] { return running_threads == 0; })) {
        spdlog::error("local provider: I/O still busy after {} s at "
                      "shutdown, abandoning it",
                      shutdown_wait.count());
        io.stop();
      }
    }
    for (auto& t : threads)
      if (t.joinable())
        t.join();
  }
};

local_runtime::local_runtime(runtime_settings cfg,
                             const caf::actor_addr& provider)
    : impl_(std::make_shared<impl>(std::move(cfg), provider)) {
  impl_->root.reset(
    ::open(impl_->cfg.root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!impl_->root)
    throw std::runtime_error("local provider: cannot open root " +
                             impl_->cfg.root + ": " + std::strerror(errno));
  impl_->start_threads();
}

local_runtime::~local_runtime() {
  if (impl_->on_io_thread()) {
    // The actor died on one of our own threads (its last handle was
    // released there): that thread cannot join itself, so another does.
    std::thread([p = impl_] { p->shutdown(); }).detach();
    return;
  }
  impl_->shutdown();
}

void local_runtime::create(uint64_t req, const std::string& id,
                           const sandbox_spec& spec) {
  asio::post(impl_->io, [p = impl_.get(), req, id, spec] {
    p->reply(req, p->make_sandbox(id, spec));
  });
}

void local_runtime::upload(uint64_t req, const std::string& id, std::string dir,
                           file_map files) {
  impl_->on_strand(req, id,
                   [dir{std::move(dir)}, files{std::move(files)}](
                     const std::shared_ptr<local_sandbox>& sb) {
                     for (auto& [path, content] : files)
                       write_confined_file(
                         sb->dir.get(), dir.empty() ? path : dir + "/" + path,
                         content, sb->confinement.uid.uid);
                     return caf::make_message(ok_atom::value);
                   });
}

void local_runtime::exec(uint64_t req, const std::string& id, exec_request x) {
  auto* p = impl_.get();
  p->on_strand(
    req, id,
    [p, req, x{std::move(x)}](const std::shared_ptr<local_sandbox>& sb) {
      auto plan = make_launch_plan(*sb, x, p->exec_cfg);
      start_exec(sb, req, std::move(plan), [p, req](exec_result r) {
        p->reply(req, caf::make_message(std::move(r)));
      });
      return caf::message{};
    });
}

void local_runtime::download(uint64_t req, const std::string& id,
                             std::string path) {
  auto max = impl_->cfg.max_download_bytes;
  impl_->on_strand(
    req, id,
    [path{std::move(path)}, max](const std::shared_ptr<local_sandbox>& sb) {
      return caf::make_message(read_confined_file(sb->dir.get(), path, max));
    });
}

void local_runtime::stop(uint64_t req, const std::string& id) {
  auto* p = impl_.get();
  auto sb = p->take(id);
  if (!sb)
    return p->reply(req, no_such_sandbox(id));
  asio::post(sb->strand, [p, req, sb] {
    auto err = p->stop_sandbox(*sb);
    p->reply(req, err ? caf::make_message(std::move(err))
                      : caf::make_message(ok_atom::value));
  });
}

} // namespace sv::detail
