// Adversarial tests of bwrap isolation: what a runner sees of the host, and
// what it cannot reach (files, network, processes). Real processes; each
// test ends by checking that nothing of its sandboxes is left.

#include "isolation_fixture.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <netinet/in.h>
#include <set>
#include <sys/socket.h>

using namespace sv;
using namespace sv::test;

namespace {

/// A TCP listener on the host's 127.0.0.1, on a free port.
struct host_listener {
  // Non-blocking: has_pending() must never wait for a connection.
  detail::unique_fd fd{
    ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)};
  uint16_t port = 0;

  host_listener() {
    REQUIRE(fd);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) ==
            0);
    REQUIRE(::listen(fd.get(), 16) == 0);
    socklen_t len = sizeof addr;
    REQUIRE(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) ==
            0);
    port = ntohs(addr.sin_port);
  }

  /// Whether a connection waits to be accepted.
  bool has_pending() const {
    detail::unique_fd conn{
      ::accept4(fd.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC)};
    return static_cast<bool>(conn);
  }
};

/// Connects from the test process itself: the listener works.
bool host_can_connect(uint16_t port) {
  detail::unique_fd s{::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return ::connect(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) ==
         0;
}

/// What `ls -A /root | tr '\n' ' '` prints in a sandbox: /root is hidden
/// but for the entries below it that lead to the interpreter (a pyenv under
/// /root, say), if the interpreter lives there on this machine.
std::string visible_in_root() {
  std::set<std::string> names;
  for (auto& dir : detail::resolve_python_install("python3").roots)
    if (dir.rfind("/root/", 0) == 0)
      names.insert(dir.substr(6, dir.find('/', 6) - 6));
  std::string out;
  for (auto& name : names)
    out += name + " ";
  return out;
}

} // namespace

TEST_CASE("a runner sees a read-only host, its own uid and hidden homes") {
  auto f = make_isolated();
  auto h = f->create();
  auto uid = f->uid_of(h);
  CHECK(uid >= 100000);
  auto r = f->sh(h, "id -u; id -g; id -G; pwd; echo $HOME; hostname; "
                    "ls -A /root | tr '\\n' ' '; echo; ls -A /home | wc -l; "
                    "touch /etc/sv-pwned 2>&1; cat /etc/shadow 2>&1; "
                    "echo x > ok.txt && cat ok.txt; touch /tmp/t && echo tmp");
  INFO(r.stdout_text << r.stderr_text);
  auto u = std::to_string(uid);
  auto expected = u + "\n" + u + "\n" + u + "\n/sandbox\n/sandbox\nsandbox\n" +
                  visible_in_root() + "\n0\n";
  CHECK(r.stdout_text.rfind(expected, 0) == 0);
  CHECK(r.stdout_text.find("Read-only file system") != std::string::npos);
  CHECK(r.stdout_text.find("shadow: Permission denied") != std::string::npos);
  CHECK(r.stdout_text.find("x\ntmp\n") != std::string::npos);
  CHECK(r.return_code == 0);
  // The runner's files belong to its uid on the host too.
  struct stat st;
  REQUIRE(::stat((f->dir_of(h) + "/ok.txt").c_str(), &st) == 0);
  CHECK(st.st_uid == uid);
  f->stop_and_expect_gone(h);
}

TEST_CASE("python runs as the sandbox uid with its interpreter reachable") {
  auto f = make_isolated();
  auto h = f->create();
  REQUIRE(f->upload(h, "calls/c1",
                    {{"r.py", "import os, sys\n"
                              "print(os.getuid(), sys.prefix)\n"
                              "open('result.json', 'w')"
                              ".write('{}')\n"}})
            .value);
  auto r = f->exec(
    h, exec_request{
         {"python3", "r.py"}, "calls/c1", {}, 30, "calls/c1/runner.log"});
  REQUIRE(r.value);
  INFO(r.value->log_tail);
  CHECK(r.value->error_type == exec_error_type::none);
  CHECK(r.value->return_code == 0);
  CHECK(r.value->log_tail.rfind(std::to_string(f->uid_of(h)) + " ", 0) == 0);
  CHECK(f->download(h, "calls/c1/result.json").value == "{}");
  f->stop_and_expect_gone(h);
}

TEST_CASE("a write outside the sandbox fails, the host path stays absent") {
  auto f = make_isolated();
  // A host directory outside /tmp (private in the sandbox), visible
  // read-only inside.
  std::string host_dir = "/var/tmp/sv-iso-" + std::to_string(::getpid());
  REQUIRE(::mkdir(host_dir.c_str(), 0777) == 0);
  ::chmod(host_dir.c_str(), 0777);
  auto h = f->create();
  auto r =
    f->sh(h, "for p in " + host_dir + "/pwned /sv-pwned " + f->root.path +
               "/pwned /usr/local/sv-pwned; do "
               "echo x > $p && echo WROTE $p; done; mkdir " +
               host_dir + "/d && echo MADE; exit 0");
  INFO(r.stderr_text);
  CHECK(r.stdout_text.empty());
  CHECK(r.stderr_text.find("Read-only file system") != std::string::npos);
  for (auto p : {host_dir + "/pwned", host_dir + "/d", std::string{"/sv-pwned"},
                 f->root.path + "/pwned", std::string{"/usr/local/sv-pwned"}})
    CHECK(!path_exists(p));
  f->stop_and_expect_gone(h);
  ::rmdir(host_dir.c_str());
}

TEST_CASE("a connect to a listener on the host's 127.0.0.1 fails") {
  auto f = make_isolated();
  host_listener listener;
  REQUIRE(host_can_connect(listener.port));
  REQUIRE(listener.has_pending());
  auto h = f->create();
  auto port = std::to_string(listener.port);
  auto r =
    f->exec(h, exec_request{{"python3", "-c",
                             "import socket\n"
                             "try:\n"
                             "  socket.create_connection(('127.0.0.1', " +
                               port +
                               "), timeout=5)\n"
                               "  print('CONNECTED')\n"
                               "except OSError as e:\n"
                               "  print(type(e).__name__)\n"},
                            "",
                            {},
                            30,
                            ""});
  REQUIRE(r.value);
  CHECK(r.value->stdout_text == "ConnectionRefusedError\n");
  CHECK(!listener.has_pending());
  f->stop_and_expect_gone(h);
}

TEST_CASE("sandbox processes cannot see or signal host processes") {
  auto f = make_isolated();
  auto h = f->create();
  auto me = std::to_string(::getpid());
  auto r = f->sh(h, "kill -0 " + me +
                      " 2>/dev/null && echo SEEN; "
                      "kill -9 " +
                      me +
                      " 2>/dev/null && echo SIGNALLED; "
                      "ls /proc | grep -c '^[0-9]'; echo $$");
  INFO(r.stderr_text);
  // Only the sandbox's own: bwrap's init, the shell and its pipeline.
  std::istringstream out{r.stdout_text};
  int visible = 0;
  int shell = 0;
  out >> visible >> shell;
  CHECK(visible > 0);
  CHECK(visible <= 5);
  CHECK(shell < 10);
  CHECK(r.stdout_text.find("SEEN") == std::string::npos);
  CHECK(r.stdout_text.find("SIGNALLED") == std::string::npos);
  f->stop_and_expect_gone(h);
}

TEST_CASE("a runner that kills its process group, all it can and the "
          "provider is killed alone") {
  auto f = make_isolated();
  auto h = f->create();
  auto bystander = f->create();
  auto me = std::to_string(::getpid());
  auto r = f->sh(h, "kill -9 " + me + "; kill -9 -" + me +
                      "; kill -9 -1; "
                      "kill -9 0; echo SURVIVED");
  CHECK(r.error_type == exec_error_type::killed);
  CHECK(r.message == "killed by signal 9 (SIGKILL)");
  CHECK(r.stdout_text.empty());
  // The provider and the other sandbox are fine.
  CHECK(process_alive(::getpid()));
  CHECK(f->sh(bystander, "echo ok").stdout_text == "ok\n");
  CHECK(f->sh(h, "echo again").stdout_text == "again\n");
  f->stop_and_expect_gone(h);
  f->stop_and_expect_gone(bystander);
}

TEST_CASE("a symlink planted to leak a host file is never followed") {
  auto f = make_isolated();
  auto h = f->create();
  auto r = f->sh(h, "mkdir calls && ln -s /etc/passwd calls/result.json && "
                    "ln -s /etc calls/etc && "
                    "(ln /etc/passwd hard.json 2>/dev/null || echo NOLINK)");
  CHECK(r.return_code == 0);
  CHECK(r.stdout_text == "NOLINK\n");
  auto link = f->download(h, "calls/result.json");
  CHECK(link.code() == code(provider_errc::not_regular_file));
  CHECK(link.message() ==
        "calls/result.json is a symlink, refusing to follow it");
  auto through = f->download(h, "calls/etc/passwd");
  CHECK(through.code() == code(provider_errc::invalid_path));
  CHECK(through.message() == "calls/etc is a symlink, refusing to follow it");
  f->stop_and_expect_gone(h);
}

TEST_CASE("nothing a command started outlives it, even a setsid daemon") {
  auto f = make_isolated();
  auto h = f->create();
  auto r = f->sh(h, "setsid sh -c 'sleep 1000' </dev/null >/dev/null 2>&1 & "
                    "(sleep 1000 &) ; echo started");
  CHECK(r.stdout_text == "started\n");
  // The pid namespace died with the command.
  CHECK(detail::cgroup_processes(cgroup_dir("pids", h.sandbox_id)).empty());
  f->stop_and_expect_gone(h);
}

TEST_CASE("an isolated exec over its deadline is a timeout, all of it") {
  auto f = make_isolated();
  auto h = f->create();
  auto r = f->sh(h, "sleep 1000 & sleep 1000", 1);
  CHECK(r.error_type == exec_error_type::timeout);
  CHECK(r.message == "killed at its 1 s deadline");
  CHECK(detail::cgroup_processes(cgroup_dir("pids", h.sandbox_id)).empty());
  f->stop_and_expect_gone(h);
}

TEST_CASE("a workdir the read-only host cannot hold is refused at create") {
  auto f = make_isolated();
  sandbox_spec spec;
  spec.workdir = "/usr/sandbox";
  auto r = f->ask<sandbox_handle>(create_atom::value, spec);
  CHECK(r.code() == code(provider_errc::invalid_argument));
  CHECK(r.message() == "workdir \"/usr/sandbox\": the host's file system is "
                       "read-only in the sandbox: use a new top-level "
                       "directory (like /sandbox) or one below /tmp");
  spec.workdir = "/tmp/work";
  auto h = f->create_with(spec);
  CHECK(f->sh(h, "pwd").stdout_text == "/tmp/work\n");
  f->stop_and_expect_gone(h);
}

TEST_CASE("absolute /tmp and /dev/shm paths are the sandbox's own, outlive "
          "each command and stay confined") {
  auto f = make_isolated();
  temp_dir outside;
  auto h = f->create();
  auto other = f->create();
  std::string bytes{"\0\xff\0bin\xfe\n", 8};
  REQUIRE(f->upload(h, "/tmp/x", {{"bin.dat", bytes}}).value);
  REQUIRE(f->upload(h, "/dev/shm", {{"s.dat", "shm"}}).value);
  // The command sees them where they were put; its writes stay there.
  auto r = f->sh(h, "wc -c < /tmp/x/bin.dat && cat /dev/shm/s.dat && "
                    "echo made > /tmp/x/made.txt");
  CHECK(r.stdout_text == "8\nshm");
  CHECK(f->download(h, "/tmp/x/bin.dat").value == bytes);
  CHECK(f->download(h, "/tmp/x/made.txt").value == "made\n");
  // A call in /tmp: cwd and log there.
  auto in_tmp =
    f->exec(h, exec_request{{"sh", "-c", "pwd; cat bin.dat | wc -c"},
                            "/tmp/x",
                            {},
                            30,
                            "/tmp/x/run.log"});
  REQUIRE(in_tmp.value);
  CHECK(in_tmp.value->log_tail == "/tmp/x\n8\n");
  // Another sandbox's /tmp is its own.
  CHECK(f->download(other, "/tmp/x/bin.dat").code() ==
        code(provider_errc::not_found));
  // Escapes: '..' and symlinks the runner plants, named by their path.
  auto dotdot = f->download(h, "/tmp/../etc/passwd");
  CHECK(dotdot.code() == code(provider_errc::invalid_path));
  CHECK(dotdot.message().find("\"/tmp/../etc/passwd\" escapes the sandbox") !=
        std::string::npos);
  REQUIRE(f->sh(h, "ln -s /etc /tmp/etc && ln -s " + outside.path +
                     " /tmp/out && ln -s /etc/passwd /tmp/x/pw")
            .return_code == 0);
  auto link = f->download(h, "/tmp/etc/passwd");
  CHECK(link.code() == code(provider_errc::invalid_path));
  CHECK(link.message() == "/tmp/etc is a symlink, refusing to follow it");
  auto final_link = f->download(h, "/tmp/x/pw");
  CHECK(final_link.code() == code(provider_errc::not_regular_file));
  CHECK(final_link.message() ==
        "/tmp/x/pw is a symlink, refusing to follow it");
  auto up = f->upload(h, "/tmp/out", {{"y.txt", "pwned"}});
  CHECK(up.code() == code(provider_errc::invalid_path));
  CHECK(up.message() == "/tmp/out is a symlink, refusing to follow it");
  CHECK(!path_exists(outside.path + "/y.txt"));
  f->stop_and_expect_gone(h);
  f->stop_and_expect_gone(other);
}

TEST_CASE("a workdir below /tmp is the sandbox's directory, bound over its "
          "/tmp") {
  auto f = make_isolated();
  sandbox_spec spec;
  spec.workdir = "/tmp/work";
  auto h = f->create_with(spec);
  REQUIRE(f->upload(h, "/tmp/work/a", {{"f.txt", "in workdir"}}).value);
  REQUIRE(f->upload(h, "/tmp/side", {{"g.txt", "in tmp"}}).value);
  CHECK(read_text(f->dir_of(h) + "/a/f.txt") == "in workdir");
  auto r = f->sh(h, "cat /tmp/work/a/f.txt a/f.txt /tmp/side/g.txt");
  CHECK(r.stdout_text == "in workdirin workdirin tmp");
  f->stop_and_expect_gone(h);
}

TEST_CASE("an argv[0] only the host has is answered as one nobody has") {
  // Issue 19 item 21: argv[0] is resolved in the sandbox's view, never
  // checked on the host as root. /tmp is the sandbox's own: a program
  // under the host's /tmp is not there.
  auto f = make_isolated();
  std::string host_dir = "/tmp/sv-iso-argv0-" + std::to_string(::getpid());
  REQUIRE(::mkdir(host_dir.c_str(), 0755) == 0);
  auto host_only = host_dir + "/run";
  {
    std::ofstream out{host_only};
    out << "#!/bin/sh\necho ran\n";
  }
  REQUIRE(::chmod(host_only.c_str(), 0755) == 0);
  REQUIRE(::access(host_only.c_str(), X_OK) == 0);
  auto nowhere = host_dir + "-absent/run";
  auto h = f->create();
  auto run = [&](const std::string& program) {
    auto r = f->exec(h, exec_request{{program}, "", {}, 30, ""});
    INFO(r.message());
    REQUIRE(r.value);
    return *r.value;
  };
  auto hidden = run(host_only);
  auto absent = run(nowhere);
  INFO(hidden.message << " / " << absent.message);
  CHECK(hidden.stdout_text.empty());
  CHECK(hidden.error_type == absent.error_type);
  CHECK(hidden.return_code == absent.return_code);
  CHECK(hidden.return_code == 127);
  // The messages differ only by the path each names.
  auto unnamed = [](std::string text, const std::string& path) {
    for (auto pos = text.find(path); pos != std::string::npos;
         pos = text.find(path))
      text.replace(pos, path.size(), "PATH");
    return text;
  };
  CHECK(unnamed(hidden.message, host_only) == unnamed(absent.message, nowhere));
  CHECK(unnamed(hidden.stderr_text, host_only) ==
        unnamed(absent.stderr_text, nowhere));
  f->stop_and_expect_gone(h);
  ::unlink(host_only.c_str());
  ::rmdir(host_dir.c_str());
}
