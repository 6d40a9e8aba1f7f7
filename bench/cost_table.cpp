// The cost table of one local sandbox (issue 13, direction 1): every piece
// the local provider spends on a sandbox, each timed alone, `--reps` times,
// medians of wall and CPU time. Run as root (mounts, cgroups, uids) from the
// repository root after a build: build/bench/sv-bench-cost-table [--reps 50]
//
// In-process pieces: CPU is the calling thread's (CLOCK_THREAD_CPUTIME_ID).
// Processes (bwrap, python, /bin/true): CPU is what a cpuacct cgroup that
// the child joins before its exec counts, so every process of the tree
// (inside bwrap's pid namespace too). Kernel work deferred to kernel
// threads (a network namespace's cleanup, a memory cgroup's offlining) is in
// neither; the `host` column (all CPUs' busy time from /proc/stat over the
// reps, per rep) shows it, with whatever else the shared machine ran.

#include "providers/local.hpp"
#include "providers/local/detail/host/cgroups.hpp"
#include "providers/local/detail/host/mounts.hpp"
#include "providers/local/detail/host/netns.hpp"
#include "providers/local/detail/host/process.hpp"
#include "providers/local/detail/host/seccomp.hpp"
#include "providers/local/detail/host/uid_pool.hpp"
#include "providers/local/detail/isolation.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <functional>
#include <iostream>
#include <sched.h>
#include <sstream>
#include <string>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <vector>

using namespace sv;
using namespace sv::detail;

namespace {

int reps = 50;
/// cpuacct cgroup every timed process joins; its usage file.
std::string acct_procs;
std::string acct_usage;

double acct_us() {
  std::ifstream in{acct_usage};
  double ns = 0;
  in >> ns;
  return ns / 1e3;
}

double now_us() {
  return std::chrono::duration<double, std::micro>(
           std::chrono::steady_clock::now().time_since_epoch())
    .count();
}

double tv_us(const timeval& tv) {
  return static_cast<double>(tv.tv_sec) * 1e6 + static_cast<double>(tv.tv_usec);
}

double thread_cpu_us() {
  timespec ts;
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 +
         static_cast<double>(ts.tv_nsec) / 1e3;
}

/// Busy jiffies of all CPUs, in microseconds.
double host_busy_us() {
  std::ifstream in{"/proc/stat"};
  std::string cpu;
  uint64_t user, nice, sys, idle, iowait, irq, softirq, steal;
  in >> cpu >> user >> nice >> sys >> idle >> iowait >> irq >> softirq >> steal;
  auto hz = static_cast<double>(::sysconf(_SC_CLK_TCK));
  return static_cast<double>(user + nice + sys + irq + softirq) * 1e6 / hz;
}

double median(std::vector<double> xs) {
  if (xs.empty())
    return 0;
  std::sort(xs.begin(), xs.end());
  auto n = xs.size();
  return n % 2 ? xs[n / 2] : (xs[n / 2 - 1] + xs[n / 2]) / 2;
}

struct sample {
  double wall = 0;
  double cpu = 0;
};

void print_row(const std::string& name, const std::vector<sample>& xs,
               double host_per_rep) {
  std::vector<double> wall, cpu;
  for (auto& x : xs) {
    wall.push_back(x.wall);
    cpu.push_back(x.cpu);
  }
  std::printf("| %s | %.0f | %.0f | %.0f |\n", name.c_str(), median(wall),
              median(cpu), host_per_rep);
  std::fflush(stdout);
}

/// Times `piece` alone; `before` and `after` (untimed) set it up and undo it.
void time_piece(const std::string& name, const std::function<void()>& piece,
                const std::function<void()>& before = {},
                const std::function<void()>& after = {}) {
  std::vector<sample> xs;
  double host = 0;
  for (int i = 0; i < reps; ++i) {
    if (before)
      before();
    auto h0 = host_busy_us();
    auto w0 = now_us();
    auto c0 = thread_cpu_us();
    piece();
    auto c1 = thread_cpu_us();
    auto w1 = now_us();
    host += host_busy_us() - h0;
    xs.push_back({w1 - w0, c1 - c0});
    if (after)
      after();
  }
  print_row(name, xs, host / reps);
}

/// Runs argv (fork, execve, wait4) with `extra_fds` at 3, 4, ...; returns
/// wall and the child tree's CPU.
sample run_process(const std::vector<std::string>& argv,
                   const std::vector<int>& extra_fds = {}, int netns = -1) {
  std::vector<char*> args;
  for (auto& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  char env0[] = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";
  char* envp[] = {env0, nullptr};
  int acct =
    acct_procs.empty() ? -1 : ::open(acct_procs.c_str(), O_WRONLY | O_CLOEXEC);
  auto a0 = acct_us();
  auto w0 = now_us();
  auto pid = ::fork();
  if (pid == 0) {
    if (acct >= 0 && ::write(acct, "0", 1) != 1)
      ::_exit(126);
    if (netns >= 0 && ::setns(netns, CLONE_NEWNET) != 0)
      ::_exit(126);
    int devnull = ::open("/dev/null", O_RDWR);
    ::dup2(devnull, 0);
    ::dup2(devnull, 1);
    // fds to 3, 4, ... (dup first, above the targets, then place)
    std::vector<int> high;
    for (auto fd : extra_fds)
      high.push_back(::fcntl(fd, F_DUPFD, 100));
    for (size_t i = 0; i < high.size(); ++i)
      ::dup2(high[i], static_cast<int>(3 + i));
    ::execve(args[0], args.data(), envp);
    ::_exit(127);
  }
  int status = 0;
  rusage ru;
  ::wait4(pid, &status, 0, &ru);
  auto w1 = now_us();
  if (acct >= 0)
    ::close(acct);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::cerr << "failed (status " << status << "):";
    for (auto& a : argv)
      std::cerr << ' ' << a;
    std::cerr << '\n';
    std::exit(1);
  }
  if (!acct_usage.empty())
    return {w1 - w0, acct_us() - a0};
  return {w1 - w0, tv_us(ru.ru_utime) + tv_us(ru.ru_stime)};
}

void time_process(const std::string& name,
                  const std::function<std::vector<std::string>()>& argv,
                  const std::function<std::vector<int>()>& fds = {},
                  int netns = -1) {
  std::vector<sample> xs;
  double host = 0;
  for (int i = 0; i < reps; ++i) {
    auto a = argv();
    std::vector<int> f = fds ? fds() : std::vector<int>{};
    auto h0 = host_busy_us();
    xs.push_back(run_process(a, f, netns));
    host += host_busy_us() - h0;
    for (auto fd : f)
      ::close(fd);
  }
  print_row(name, xs, host / reps);
}

std::vector<std::string> join(std::vector<std::string> a,
                              const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::string load_average() {
  std::ifstream in{"/proc/loadavg"};
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

} // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string{argv[i]} == "--reps" && i + 1 < argc)
      reps = std::atoi(argv[++i]);
  if (::geteuid() != 0) {
    std::cerr << "run as root (mounts, cgroups, uids)\n";
    return 1;
  }
  std::string acct_dir = "/sys/fs/cgroup/cpuacct/sv-cost-table";
  if (::mkdir(acct_dir.c_str(), 0755) == 0 || errno == EEXIST) {
    acct_procs = acct_dir + "/cgroup.procs";
    acct_usage = acct_dir + "/cpuacct.usage";
  }
  std::string root = "/tmp/sv-cost-table";
  ::mkdir(root.c_str(), 0700);
  int root_fd = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);

  local_provider_config cfg;
  cfg.isolation = "bwrap";
  cfg.root = root;
  auto python = resolve_python_install("/usr/bin/python3");
  auto iso = prepare_isolation(cfg, root, python);
  std::printf("load average at start: %s; %d reps; medians in microseconds\n\n",
              load_average().c_str(), reps);
  std::printf(
    "| piece | wall µs | CPU µs | host CPU µs |\n|---|---|---|---|\n");

  if (std::getenv("SV_COST_PRINT_COMMAND"))
    reps = 0;
  // -- sandbox create / teardown pieces --------------------------------------
  std::string dir = root + "/sb";
  time_piece("mkdir + rmdir of the sandbox directory", [&] {
    ::mkdir(dir.c_str(), 0700);
    ::rmdir(dir.c_str());
  });
  ::mkdir(dir.c_str(), 0700);
  time_piece(
    "mount the sandbox tmpfs (1 GiB)",
    [&] { mount_sandbox_tmpfs(dir, uint64_t{1} << 30, 65536); }, {},
    [&] { ::umount2(dir.c_str(), MNT_DETACH); });
  time_piece(
    "unmount an empty sandbox tmpfs", [&] { ::umount2(dir.c_str(), 0); },
    [&] { mount_sandbox_tmpfs(dir, uint64_t{1} << 30, 65536); });
  time_piece(
    "unmount_tree (reads mountinfo) of a tmpfs", [&] { unmount_tree(dir); },
    [&] { mount_sandbox_tmpfs(dir, uint64_t{1} << 30, 65536); });
  ::rmdir(dir.c_str());
  time_piece(
    "teardown's remove_sandbox_dir ×3 (dir, .tmp, .shm: mountinfo, umount, "
    "rmdir)",
    [&] {
      for (auto* s : {"sb", "sb.tmp", "sb.shm"})
        remove_sandbox_dir(root_fd, root, s);
    },
    [&] {
      for (auto* s : {"sb", "sb.tmp", "sb.shm"}) {
        auto p = root + "/" + s;
        ::mkdir(p.c_str(), 0700);
        mount_sandbox_tmpfs(p, uint64_t{256} << 20, -1);
      }
    });

  cgroup_limits limits;
  limits.max_processes = 256;
  limits.memory_bytes = uint64_t{2} << 30;
  std::unique_ptr<sandbox_cgroups> cg;
  int n = 0;
  time_piece(
    "cgroups create (pids + memory, limits written)",
    [&] {
      cg = std::make_unique<sandbox_cgroups>(
        iso.cgroups, "sv-cost-" + std::to_string(n++), limits);
    },
    {}, [&] { cg->remove(); });
  time_piece(
    "cgroups kill_all (empty) + remove (nothing charged)",
    [&] {
      cg->kill_all(false);
      cg->remove();
    },
    [&] {
      cg = std::make_unique<sandbox_cgroups>(
        iso.cgroups, "sv-cost-" + std::to_string(n++), limits);
    });
  time_piece(
    "cgroups remove after a python ran in them (charged pages)",
    [&] {
      cg->kill_all(false);
      cg->remove();
    },
    [&] {
      cg = std::make_unique<sandbox_cgroups>(
        iso.cgroups, "sv-cost-" + std::to_string(n++), limits);
      auto pid = ::fork();
      if (pid == 0) {
        for (auto fd : cg->join_fds())
          if (::write(fd, "0", 1) != 1)
            ::_exit(1);
        ::execl("/usr/bin/python3", "python3", "-c", "x = bytearray(32 << 20)",
                nullptr);
        ::_exit(127);
      }
      ::waitpid(pid, nullptr, 0);
    });
  if (iso.uids) {
    uid_lease lease;
    time_piece(
      "uid lease (flock + uid_in_use scan + keyring clear helper)",
      [&] { lease = iso.uids->lease(); }, {}, [&] { lease.release(); });
    time_piece(
      "uid release", [&] { lease.release(); },
      [&] { lease = iso.uids->lease(); });
    time_piece("uid_in_use scan of /proc alone",
               [&] { (void)uid_in_use(iso.uids->base()); });
    time_piece("clear_keyrings helper alone",
               [&] { (void)clear_keyrings(iso.uids->base()); });
  }
  time_piece("3 pipes (pipe2, close)", [&] {
    int p[3][2];
    for (auto& x : p)
      if (::pipe2(x, O_CLOEXEC) != 0)
        std::abort();
    for (auto& x : p) {
      ::close(x[0]);
      ::close(x[1]);
    }
  });
  if (iso.seccomp)
    time_piece("seccomp open_program (per exec)",
               [&] { ::close(iso.seccomp->open_program()); });
  time_piece("compile the seccomp filter (once per provider)",
             [&] { seccomp_filter f{false}; });
  {
    unique_fd ns;
    time_piece(
      "an empty network namespace, loopback up (make_empty_netns)",
      [&] { ns = make_empty_netns(); }, {}, [&] { ns.reset(); });
  }
  time_piece("kill_matching sweep of /proc by marker (no cgroups only)", [&] {
    kill_matching([](pid_t p) { return has_env_entry(p, "SV_SANDBOX_ID=x"); });
  });

  // -- processes
  // ---------------------------------------------------------------
  const std::string bw = iso.bwrap;
  const std::vector<std::string> cmd{"/bin/true"};
  time_process("/bin/true, bare (fork + exec + wait)", [&] { return cmd; });
  time_process("/usr/bin/python3 -c pass, bare", [&] {
    return std::vector<std::string>{"/usr/bin/python3", "-c", "pass"};
  });
  std::vector<std::string> base{bw, "--ro-bind", "/", "/"};
  auto run = [&](const std::string& name, std::vector<std::string> opts) {
    time_process(name, [&] { return join(join(opts, {"--"}), cmd); });
  };
  run("bwrap --ro-bind / / (a mount namespace, one recursive bind)", base);
  run("  + --unshare-pid", join(base, {"--unshare-pid"}));
  run("  + --unshare-ipc --unshare-uts --unshare-cgroup-try",
      join(base, {"--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"}));
  run("  + --unshare-net", join(base, {"--unshare-net"}));
  run("  + --proc /proc", join(base, {"--proc", "/proc"}));
  run("  + --dev /dev", join(base, {"--dev", "/dev"}));
  run("  + --dev-bind of a prepared /dev (bind of the host's /dev)",
      join(base, {"--dev-bind", "/dev", "/dev"}));
  run("  + --tmpfs /tmp --tmpfs /dev/shm (bwrap's own)",
      join(base, {"--tmpfs", "/tmp", "--tmpfs", "/dev/shm"}));
  ::mkdir((root + "/x.tmp").c_str(), 0700);
  ::mkdir((root + "/x.shm").c_str(), 0700);
  ::mkdir((root + "/x").c_str(), 0700);
  run("  + --bind of the sandbox's dir, /tmp, /dev/shm (3 binds)",
      join(base, {"--bind", root + "/x.tmp", "/tmp", "--bind", root + "/x.shm",
                  "/dev/shm", "--bind", root + "/x", "/mnt"}));
  run("  + 3 hidden --tmpfs (/root /home /run)",
      join(base, {"--tmpfs", "/root", "--tmpfs", "/home", "--tmpfs", "/run"}));
  run("  + --die-with-parent --new-session --clearenv --hostname",
      join(base, {"--unshare-uts", "--hostname", "sandbox", "--die-with-parent",
                  "--new-session", "--clearenv"}));
  if (iso.seccomp)
    time_process(
      "  + --seccomp (load the filter)",
      [&] {
        return join(join(base, {"--seccomp", "3", "--"}), cmd);
      },
      [&] { return std::vector<int>{iso.seccomp->open_program()}; });
  if (iso.uids)
    run("  + setpriv to the sandbox uid (the command through setpriv)",
        join(base,
             {"--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--",
              iso.setpriv, "--reuid=65536", "--regid=65536", "--clear-groups",
              "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"}));
  // The same drop by sv-drop (freestanding, no libc), at its host path.
  auto drop = find_drop_stub();
  if (iso.uids && !drop.empty())
    run("  + sv-drop to the sandbox uid (the command through sv-drop)",
        join(base, {"--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--",
                    drop, "65536", "65536"}));
  // The provider's own view alone: one --ro-bind per top-level entry.
  std::vector<std::string> view_only{bw};
  int top_binds = 0;
  for (size_t i = 0; i < iso.host_view.size(); ++i) {
    auto& a = iso.host_view[i];
    if (a == "--proc" || a == "--dev") {
      ++i;
      continue;
    }
    top_binds += a == "--ro-bind";
    view_only.push_back(a);
  }
  run("bwrap with the provider's host view (" + std::to_string(top_binds) +
        " --ro-bind, one per top-level entry, + hidden tmpfs), no --proc/--dev",
      view_only);
  // The same view prepared once (what the provider does as root): one
  // --ro-bind of it, + the hidden tmpfs.
  if (iso.view) {
    std::vector<std::string> one{bw, "--ro-bind", iso.view->path(), "/"};
    for (size_t i = 0; i < iso.view_tail.size(); ++i) {
      auto& a = iso.view_tail[i];
      if (a == "--proc" || a == "--dev") {
        ++i;
        continue;
      }
      one.push_back(a);
    }
    run("bwrap with the prepared view (one --ro-bind of it, + hidden tmpfs), "
        "no --proc/--dev",
        one);
  }
  if (!drop.empty())
    run("  + --ro-bind of one file (sv-drop at " +
          std::string{drop_mount_point} + ")",
        join(view_only, {"--ro-bind", drop, drop_mount_point}));
  // The provider's whole command, as an exec runs it.
  auto full = bwrap_command(iso, root + "/x", "/sandbox", "", -1, cmd,
                            {{"PATH", "/usr/bin:/bin"}}, true);
  auto full_opts = full.options;
  auto no_view = iso;
  no_view.view.reset();
  auto full_no_view = bwrap_command(no_view, root + "/x", "/sandbox", "", -1,
                                    cmd, {{"PATH", "/usr/bin:/bin"}}, true);
  if (iso.seccomp)
    for (int pass = 0; pass < 2; ++pass) {
      // Alternating: without and with the prepared view.
      auto& opts = pass == 0 ? full_no_view.options : full_opts;
      time_process(
        std::string{"the provider's whole bwrap command (no uid drop), "} +
          (pass == 0 || !iso.view ? "a --ro-bind per top-level entry"
                                  : "the prepared view"),
        [&] { return join(join(opts, {"--"}), cmd); },
        [&] {
          return std::vector<int>{::open("/dev/null", O_WRONLY),
                                  iso.seccomp->open_program()};
        });
    }
  // What a python start costs inside: the same bwrap with and without the
  // filter, and the whole command without and with setpriv.
  std::vector<std::string> py_cmd{python.executable, "-c", "pass"};
  time_process("python3 -c pass, bwrap --ro-bind / /",
               [&] { return join(join(base, {"--"}), py_cmd); });
  if (iso.seccomp)
    time_process(
      "python3 -c pass, bwrap --ro-bind / / --seccomp",
      [&] {
        return join(join(base, {"--seccomp", "3", "--"}), py_cmd);
      },
      [&] { return std::vector<int>{iso.seccomp->open_program()}; });
  if (iso.seccomp) {
    auto py0 = bwrap_command(iso, root + "/x", "/sandbox", "", -1, py_cmd,
                             {{"PATH", "/usr/bin:/bin"}}, true);
    time_process(
      "python3 -c pass through the provider's whole command (no setpriv)",
      [&] { return py0.flat(); },
      [&] {
        return std::vector<int>{::open("/dev/null", O_WRONLY),
                                iso.seccomp->open_program()};
      });
  }
  if (iso.seccomp) {
    auto own = bwrap_command(iso, root + "/x", "/sandbox", "", -1, cmd,
                             {{"PATH", "/usr/bin:/bin"}}, true, true);
    auto ns = make_empty_netns();
    time_process(
      "the provider's whole bwrap command in a prepared network namespace "
      "(setns, no --unshare-net)",
      [&] { return join(join(own.options, {"--"}), cmd); },
      [&] {
        return std::vector<int>{::open("/dev/null", O_WRONLY),
                                iso.seccomp->open_program()};
      },
      ns.get());
  }
  // The drop: setpriv, sv-drop where the view shows it, sv-drop bound at
  // drop_mount_point (a build or install the view hides, like /tmp).
  auto with_setpriv = iso;
  with_setpriv.drop.clear();
  with_setpriv.drop_inside.clear();
  // (The prepared view has no mount point for it unless the provider chose
  // that placement: bound at drop_mount_point, the binds per entry.)
  auto with_bound_drop = iso;
  if (!iso.drop.empty() && iso.drop_inside != drop_mount_point) {
    with_bound_drop.drop_inside = drop_mount_point;
    with_bound_drop.view.reset();
  }
  if (iso.seccomp && iso.uids && !iso.drop.empty())
    for (auto* variant : {&iso, &with_bound_drop}) {
      auto py = bwrap_command(
        *variant, root + "/x", "/sandbox", "", iso.uids->base(),
        {python.executable, "-c", "pass"}, {{"PATH", "/usr/bin:/bin"}}, true);
      time_process(
        "python3 -c pass through the provider's whole command (with "
        "sv-drop at " +
          variant->drop_inside +
          (variant->view ? ", the prepared view)"
                         : ", a --ro-bind per top-level entry)"),
        [&] { return py.flat(); },
        [&] {
          return std::vector<int>{::open("/dev/null", O_WRONLY),
                                  iso.seccomp->open_program()};
        });
    }
  if (iso.seccomp && iso.uids && !with_setpriv.setpriv.empty()) {
    auto py = bwrap_command(with_setpriv, root + "/x", "/sandbox", "",
                            iso.uids->base(), {python.executable, "-c", "pass"},
                            {{"PATH", "/usr/bin:/bin"}}, true);
    if (std::getenv("SV_COST_PRINT_COMMAND")) {
      for (auto& a : py.flat())
        std::printf("%s\n", a.c_str());
      return 0;
    }
    time_process(
      "python3 -c pass through the provider's whole command (with setpriv)",
      [&] { return py.flat(); },
      [&] {
        return std::vector<int>{::open("/dev/null", O_WRONLY),
                                iso.seccomp->open_program()};
      });
    // As before sv-drop and the prepared view: setpriv, a --ro-bind per
    // top-level entry.
    auto before = with_setpriv;
    before.view.reset();
    auto py_before = bwrap_command(
      before, root + "/x", "/sandbox", "", iso.uids->base(),
      {python.executable, "-c", "pass"}, {{"PATH", "/usr/bin:/bin"}}, true);
    time_process(
      "python3 -c pass through the provider's whole command (with setpriv, "
      "a --ro-bind per top-level entry: before)",
      [&] { return py_before.flat(); },
      [&] {
        return std::vector<int>{::open("/dev/null", O_WRONLY),
                                iso.seccomp->open_program()};
      });
  }
  for (auto* s : {"/x.tmp", "/x.shm", "/x"})
    ::rmdir((root + s).c_str());
  ::close(root_fd);
  ::rmdir(root.c_str());
  if (!acct_procs.empty()) {
    // Back to the root cgroup, then the bench's one goes.
    std::ofstream{"/sys/fs/cgroup/cpuacct/cgroup.procs"} << ::getpid();
    ::rmdir(acct_dir.c_str());
  }
  std::printf("\nload average at the end: %s\n", load_average().c_str());
  return 0;
}
