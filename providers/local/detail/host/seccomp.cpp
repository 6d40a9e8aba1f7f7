#include "providers/local/detail/host/seccomp.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <linux/netlink.h>
#include <sched.h>
#include <seccomp.h>
#include <stdexcept>
#include <sys/mman.h>
#include <sys/socket.h>

namespace sv::detail {

namespace {

/// Families a runner may open: local IPC, and IP (its own empty network
/// namespace). Netlink only for NETLINK_ROUTE, which glibc's getaddrinfo
/// uses; every other family (AF_VSOCK, AF_ALG, AF_PACKET, ...) is denied.
/// Linux 6.x knows 46 families (AF_MAX); anything at or above is denied.
constexpr int highest_family = 46;

bool allowed_family(int f) {
  return f == AF_UNIX || f == AF_INET || f == AF_INET6 || f == AF_NETLINK;
}

class seccomp_ctx {
public:
  seccomp_ctx() : ctx_(seccomp_init(SCMP_ACT_ALLOW)) {
    if (ctx_ == nullptr)
      throw std::runtime_error("seccomp: cannot initialize libseccomp");
  }
  ~seccomp_ctx() { seccomp_release(ctx_); }
  seccomp_ctx(const seccomp_ctx&) = delete;
  seccomp_ctx& operator=(const seccomp_ctx&) = delete;

  scmp_filter_ctx get() const { return ctx_; }

  void check(int rc, const char* what) const {
    if (rc < 0)
      throw std::runtime_error(std::string{"seccomp: "} + what + ": " +
                               std::strerror(-rc));
  }

  /// Denies `name` (any arguments) with `err`; a call this kernel's
  /// libseccomp does not know is skipped.
  void deny(const char* name, int err = EPERM) {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR)
      return;
    check(seccomp_rule_add(ctx_, SCMP_ACT_ERRNO(err), nr, 0), name);
  }

private:
  scmp_filter_ctx ctx_;
};

void deny_families(seccomp_ctx& c, std::vector<std::string>& denied) {
  for (int f = 0; f < highest_family; ++f) {
    if (allowed_family(f))
      continue;
    c.check(
      seccomp_rule_add(c.get(), SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 1,
                       SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(f))),
      "socket");
  }
  c.check(seccomp_rule_add(c.get(), SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 1,
                           SCMP_A0(SCMP_CMP_GE, highest_family)),
          "socket");
  c.check(seccomp_rule_add(c.get(), SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 2,
                           SCMP_A0(SCMP_CMP_EQ, AF_NETLINK),
                           SCMP_A2(SCMP_CMP_NE, NETLINK_ROUTE)),
          "socket");
  c.check(seccomp_rule_add(c.get(), SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socketpair),
                           1, SCMP_A0(SCMP_CMP_NE, AF_UNIX)),
          "socketpair");
  denied.emplace_back("socket() families other than AF_UNIX, AF_INET, "
                      "AF_INET6, AF_NETLINK/NETLINK_ROUTE (so AF_VSOCK, "
                      "AF_ALG, AF_PACKET, ...)");
  denied.emplace_back("socketpair() other than AF_UNIX");
}

void deny_user_namespaces(seccomp_ctx& c, std::vector<std::string>& denied) {
  for (auto nr : {SCMP_SYS(unshare), SCMP_SYS(clone)}) {
    // clone's flags are its first argument on x86_64 and aarch64.
    c.check(seccomp_rule_add(
              c.get(), SCMP_ACT_ERRNO(EPERM), nr, 1,
              SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER)),
            "clone/unshare");
  }
  // clone3 passes its flags in memory, out of the filter's sight: ENOSYS
  // makes glibc (2.34+) fall back to clone.
  c.deny("clone3", ENOSYS);
  denied.emplace_back("new user namespaces (unshare/clone with "
                      "CLONE_NEWUSER; clone3 fails with ENOSYS)");
}

} // namespace

seccomp_filter::seccomp_filter(bool allow_user_namespaces) {
  seccomp_ctx c;
  // A call from another ABI (i386 int 0x80, x32) fails too: the rules
  // below are written for the native one only.
  c.check(
    seccomp_attr_set(c.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_ERRNO(EPERM)),
    "bad-arch action");
  struct group {
    const char* what;
    std::vector<const char*> calls;
  };
  const group groups[] = {
    {"kernel keyrings (add_key, request_key, keyctl)",
     {"add_key", "request_key", "keyctl"}},
    {"io_uring (io_uring_setup, io_uring_enter, io_uring_register)",
     {"io_uring_setup", "io_uring_enter", "io_uring_register"}},
    {"userfaultfd", {"userfaultfd"}},
    {"perf_event_open", {"perf_event_open"}},
    {"bpf", {"bpf"}},
    {"kexec_load, kexec_file_load", {"kexec_load", "kexec_file_load"}},
    {"module loading (init_module, finit_module, delete_module)",
     {"init_module", "finit_module", "delete_module"}},
  };
  for (auto& g : groups) {
    for (auto* name : g.calls)
      c.deny(name);
    denied_.emplace_back(g.what);
  }
  deny_families(c, denied_);
  if (!allow_user_namespaces)
    deny_user_namespaces(c, denied_);
  denied_.emplace_back("calls of a non-native ABI (i386, x32)");
  memfd_.reset(::memfd_create("sv-seccomp", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!memfd_)
    throw std::runtime_error(std::string{"seccomp: memfd_create: "} +
                             std::strerror(errno));
  c.check(seccomp_export_bpf(c.get(), memfd_.get()), "export");
  if (::fcntl(memfd_.get(), F_ADD_SEALS,
              F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) != 0)
    throw std::runtime_error(std::string{"seccomp: sealing the program: "} +
                             std::strerror(errno));
}

int seccomp_filter::open_program() const {
  // Each exec reads from offset 0: a new open file description, not a dup
  // (which would share the offset with concurrent execs).
  auto path = "/proc/self/fd/" + std::to_string(memfd_.get());
  return ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
}

} // namespace sv::detail
