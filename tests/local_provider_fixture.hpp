#pragma once

// A real local provider in a fresh temporary root, driven by a scoped actor
// with generous deadlines. At the end the provider shuts down and no process
// marked by one of its sandboxes may be left.

#include "messages/errors.hpp"
#include "messages/provider.hpp"
#include "messages/registry.hpp"
#include "providers/local.hpp"
#include "providers/local/detail/registry.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/after.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/system_messages.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <dirent.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace sv::test {

inline constexpr std::chrono::seconds deadline{30};

/// A fresh directory, removed at the end.
struct temp_dir {
  std::string path;

  temp_dir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl =
      std::string{base && *base ? base : "/tmp"} + "/sv-local-test-XXXXXX";
    path = ::mkdtemp(tmpl.data()) ? tmpl : std::string{};
    REQUIRE(!path.empty());
  }

  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

inline std::string read_text(const std::string& path) {
  std::ifstream in{path};
  return {std::istreambuf_iterator<char>{in}, std::istreambuf_iterator<char>{}};
}

/// Whether `pid` runs (exists and is not a zombie).
inline bool process_alive(pid_t pid) {
  auto stat = read_text("/proc/" + std::to_string(pid) + "/stat");
  auto pos = stat.rfind(')');
  return pos != std::string::npos && pos + 2 < stat.size() &&
         stat[pos + 2] != 'Z' && stat[pos + 2] != 'X';
}

/// Pids whose environment holds an entry starting with `prefix`.
inline std::vector<pid_t> processes_with_env_prefix(const std::string& prefix) {
  std::vector<pid_t> out;
  auto* dir = ::opendir("/proc");
  while (dir != nullptr) {
    auto* e = ::readdir(dir);
    if (e == nullptr)
      break;
    auto pid = std::atoi(e->d_name);
    if (pid <= 0)
      continue;
    auto env = read_text("/proc/" + std::to_string(pid) + "/environ");
    for (size_t pos = 0; pos < env.size();) {
      auto end = env.find('\0', pos);
      if (env.compare(pos, prefix.size(), prefix) == 0) {
        out.push_back(pid);
        break;
      }
      pos = end == std::string::npos ? env.size() : end + 1;
    }
  }
  if (dir != nullptr)
    ::closedir(dir);
  return out;
}

/// Every sandbox process of this test process carries this prefix.
inline std::string own_marker_prefix() {
  return "SV_SANDBOX_ID=sb-" + std::to_string(::getpid()) + "-";
}

/// Waits until `pred` holds, checking every 5 ms for at most the test
/// deadline; false if it never did. For effects of real processes and
/// timers that no message announces.
template <class Pred>
bool eventually(Pred pred) {
  auto until = std::chrono::steady_clock::now() + deadline;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > until)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds{5});
  }
  return true;
}

struct test_config : caf::actor_system_config {
  test_config() { register_protocol(*this); }
};

/// A value or an error.
template <class T>
struct reply {
  std::optional<T> value;
  caf::error error;

  uint8_t code() const { return provider_error_code(error); }
  std::string message() const { return describe(error); }
};

struct fixture {
  temp_dir root;
  test_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  local_provider_config provider_cfg;
  std::shared_ptr<local_registry> registry;
  provider_actor provider;
  bool provider_down = false;

  explicit fixture(std::function<void(local_provider_config&)> tweak = {}) {
    provider_cfg.root = root.path;
    if (tweak)
      tweak(provider_cfg);
    registry = make_local_registry(provider_cfg);
    provider = spawn_local_provider(sys, registry);
  }

  ~fixture() {
    shutdown_provider();
    CHECK(processes_with_env_prefix(own_marker_prefix()).empty());
  }

  /// Stops the provider, waits until it is gone, then shuts the registry
  /// down (every sandbox stopped, the I/O threads joined).
  void shutdown_provider() {
    if (provider_down)
      return;
    provider_down = true;
    exit_and_wait(provider, caf::exit_reason::user_shutdown);
    shut_down_local_registry(*registry);
  }

  /// Sends `hdl` an exit and waits for its down message.
  void exit_and_wait(const provider_actor& hdl, caf::exit_reason reason) {
    self->monitor(hdl);
    caf::anon_send_exit(hdl, reason);
    bool down = false;
    self->receive([&](caf::down_msg&) { down = true; },
                  caf::after(deadline) >> [] {});
    CHECK(down);
  }

  template <class T, class... Ts>
  reply<T> ask(Ts&&... xs) {
    return ask_of<T>(provider, std::forward<Ts>(xs)...);
  }

  /// Asks provider `hdl`, this fixture's or another on its registry.
  template <class T, class... Ts>
  reply<T> ask_of(const provider_actor& hdl, Ts&&... xs) {
    reply<T> out;
    self->request(hdl, deadline, std::forward<Ts>(xs)...)
      .receive([&](T& x) { out.value = std::move(x); },
               [&](caf::error& e) { out.error = std::move(e); });
    return out;
  }

  sandbox_handle create() {
    // A named spec: GCC 12 warns (falsely) about a moved-from temporary.
    sandbox_spec spec;
    auto r = ask<sandbox_handle>(create_atom::value, spec);
    INFO(r.message());
    REQUIRE(r.value);
    return *r.value;
  }

  reply<ok_atom> upload(const sandbox_handle& h, const std::string& dir,
                        file_map files) {
    return ask<ok_atom>(upload_atom::value, h, dir, std::move(files));
  }

  reply<std::string> download(const sandbox_handle& h,
                              const std::string& path) {
    return ask<std::string>(download_atom::value, h, path);
  }

  reply<exec_result> exec(const sandbox_handle& h, exec_request x) {
    if (x.timeout_s == 0)
      x.timeout_s = 30;
    return ask<exec_result>(exec_atom::value, h, std::move(x));
  }

  /// Runs a shell command in the sandbox; requires that it ran at all.
  exec_result sh(const sandbox_handle& h, const std::string& script,
                 double timeout_s = 30) {
    auto r = exec(h, exec_request{{"sh", "-c", script}, "", {}, timeout_s, ""});
    INFO(r.message());
    REQUIRE(r.value);
    return *r.value;
  }

  reply<ok_atom> stop(const sandbox_handle& h) {
    return ask<ok_atom>(stop_atom::value, h);
  }

  std::string dir_of(const sandbox_handle& h) const {
    return provider_cfg.root + "/" + h.sandbox_id;
  }
};

/// A provider without isolation: its commands see host pids and paths,
/// which some tests of the process handling rely on.
struct unisolated_fixture : fixture {
  unisolated_fixture()
      : fixture([](local_provider_config& c) { c.isolation = "none"; }) {
    // nop
  }
};

inline uint8_t code(provider_errc x) {
  return static_cast<uint8_t>(x);
}

} // namespace sv::test
