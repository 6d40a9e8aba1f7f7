/* sv-drop: the local provider's uid drop inside a bwrap sandbox (what
 * `setpriv --reuid=U --regid=G --clear-groups --inh-caps=-all
 * --bounding-set=-all --no-new-privs --` did), without libc.
 *
 *   sv-drop UID GID -- PROGRAM [ARG...]
 *
 * bwrap, run as root without a user namespace, starts its command as root
 * with most capabilities. This program clears the supplementary groups,
 * sets the real, effective and saved gid and uid to GID and UID (neither
 * may be 0), empties the bounding set (every capability up to the kernel's
 * last), the ambient, inheritable, permitted and effective sets, sets
 * no_new_privs, checks that each of these holds, and only then execs
 * PROGRAM (a path: no PATH search) with the arguments and the environment
 * it got.
 *
 * Freestanding: no libc, no loader, no start-up code, raw system calls, so
 * nothing in the environment steers it while it is root, and an exec of it
 * costs ~0.07 ms where a dynamic binary costs ~0.8 ms on a VM whose cpuid
 * traps (glibc's start-up runs ~80 of them).
 *
 * Exit status: 125 when a step of the drop failed or the arguments are
 * wrong (a message on stderr names the step and the errno), 127 when
 * PROGRAM does not exist, 126 when it cannot be executed (as setpriv and a
 * shell do). */

#if !defined(__x86_64__) && !defined(__aarch64__)
#error "sv-drop: only x86_64 and aarch64 (CMake falls back to setpriv)"
#endif

typedef unsigned long size_t;

#if defined(__x86_64__)
enum {
  nr_write = 1,
  nr_execve = 59,
  nr_getgroups = 115,
  nr_setgroups = 116,
  nr_setresuid = 117,
  nr_getresuid = 118,
  nr_setresgid = 119,
  nr_getresgid = 120,
  nr_capget = 125,
  nr_capset = 126,
  nr_prctl = 157,
  nr_exit_group = 231,
};

static long sys5(long n, long a, long b, long c, long d, long e) {
  long ret;
  register long r10 __asm__("r10") = d;
  register long r8 __asm__("r8") = e;
  __asm__ volatile("syscall"
                   : "=a"(ret)
                   : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8)
                   : "rcx", "r11", "memory");
  return ret;
}

__asm__(".text\n"
        ".global _start\n"
        ".type _start,@function\n"
        "_start:\n"
        "  xor %rbp, %rbp\n"
        "  mov %rsp, %rdi\n"
        "  and $-16, %rsp\n"
        "  call sv_drop_main\n"
        "  hlt\n");
#else
enum {
  nr_write = 64,
  nr_execve = 221,
  nr_getgroups = 158,
  nr_setgroups = 159,
  nr_setresuid = 147,
  nr_getresuid = 148,
  nr_setresgid = 149,
  nr_getresgid = 150,
  nr_capget = 90,
  nr_capset = 91,
  nr_prctl = 167,
  nr_exit_group = 94,
};

static long sys5(long n, long a, long b, long c, long d, long e) {
  register long x8 __asm__("x8") = n;
  register long x0 __asm__("x0") = a;
  register long x1 __asm__("x1") = b;
  register long x2 __asm__("x2") = c;
  register long x3 __asm__("x3") = d;
  register long x4 __asm__("x4") = e;
  __asm__ volatile("svc 0"
                   : "+r"(x0)
                   : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4)
                   : "memory");
  return x0;
}

__asm__(".text\n"
        ".global _start\n"
        ".type _start,%function\n"
        "_start:\n"
        "  mov x29, #0\n"
        "  mov x30, #0\n"
        "  mov x0, sp\n"
        "  bl sv_drop_main\n"
        "  brk #0\n");
#endif

#define sys(n, a, b, c) sys5((n), (long)(a), (long)(b), (long)(c), 0, 0)

enum {
  e_perm = 1,
  e_noent = 2,
  e_inval = 22,
  pr_capbset_read = 23,
  pr_capbset_drop = 24,
  pr_set_no_new_privs = 38,
  pr_get_no_new_privs = 39,
  pr_cap_ambient = 47,
  pr_cap_ambient_is_set = 1,
  pr_cap_ambient_clear_all = 4,
  /* _LINUX_CAPABILITY_VERSION_3: two 32-bit words per set. */
  cap_version_3 = 0x20080522,
  /* Far above any kernel's last capability (40 in Linux 6.x): a bound. */
  cap_limit = 1024,
  exit_drop_failed = 125,
  exit_cannot_exec = 126,
  exit_not_found = 127,
};

struct cap_header {
  unsigned version;
  int pid;
};

struct cap_data {
  unsigned effective;
  unsigned permitted;
  unsigned inheritable;
};

static size_t length(const char* s) {
  size_t n = 0;
  while (s[n] != 0)
    ++n;
  return n;
}

static void say(const char* s) {
  size_t n = length(s);
  while (n > 0) {
    long w = sys(nr_write, 2, s, n);
    if (w <= 0)
      return;
    s += w;
    n -= (size_t)w;
  }
}

static void say_number(unsigned long x) {
  char buf[24];
  int i = (int)sizeof buf - 1;
  buf[i] = 0;
  do {
    buf[--i] = (char)('0' + x % 10);
    x /= 10;
  } while (x != 0 && i > 0);
  say(buf + i);
}

__attribute__((noreturn)) static void finish(int status) {
  for (;;)
    sys(nr_exit_group, status, 0, 0);
}

/* A failed step: says which and why (errno, or "" for a check), exits. */
__attribute__((noreturn)) static void fail(const char* step, long err) {
  say("sv-drop: ");
  say(step);
  if (err != 0) {
    say(" failed, errno ");
    say_number((unsigned long)err);
  } else {
    say(" does not hold");
  }
  say("; the command was not run\n");
  finish(exit_drop_failed);
}

static void check(long ret, const char* step) {
  if (ret < 0)
    fail(step, -ret);
}

/* A decimal id in 1 .. 2^32-2 (0 is root: no drop; -1 means "unchanged"). */
static unsigned parse_id(const char* s, const char* what) {
  unsigned long v = 0;
  if (*s == 0)
    fail(what, e_inval);
  for (; *s != 0; ++s) {
    if (*s < '0' || *s > '9')
      fail(what, e_inval);
    v = v * 10 + (unsigned long)(*s - '0');
    if (v > 0xfffffffeUL)
      fail(what, e_inval);
  }
  if (v == 0)
    fail(what, e_perm);
  return (unsigned)v;
}

static int caps_empty(void) {
  struct cap_header h = {cap_version_3, 0};
  struct cap_data d[2] = {{1, 1, 1}, {1, 1, 1}};
  check(sys(nr_capget, &h, d, 0), "capget");
  return (d[0].effective | d[0].permitted | d[0].inheritable | d[1].effective |
          d[1].permitted | d[1].inheritable) == 0;
}

__attribute__((noreturn, used)) void sv_drop_main(long* sp) {
  long argc = sp[0];
  char** argv = (char**)(sp + 1);
  char** envp = argv + argc + 1;
  if (argc < 5 || argv[3][0] != '-' || argv[3][1] != '-' || argv[3][2] != 0) {
    say("usage: sv-drop UID GID -- PROGRAM [ARG...]\n");
    finish(exit_drop_failed);
  }
  unsigned uid = parse_id(argv[1], "the uid argument");
  unsigned gid = parse_id(argv[2], "the gid argument");

  /* As root, with CAP_SETGID, CAP_SETPCAP and CAP_SETUID: first what needs
   * them. */
  check(sys(nr_setgroups, 0, 0, 0), "setgroups(0) (clearing the groups)");
  check(sys(nr_setresgid, gid, gid, gid), "setresgid");
  int cap = 0;
  for (;; ++cap) {
    long r = sys(nr_prctl, pr_capbset_drop, cap, 0);
    if (r == -e_inval)
      break; /* past the kernel's last capability */
    check(r, "prctl(PR_CAPBSET_DROP)");
    if (cap >= cap_limit)
      fail("prctl(PR_CAPBSET_DROP) ending", 0);
  }
  int last_cap = cap; /* exclusive */
  check(sys5(nr_prctl, pr_cap_ambient, pr_cap_ambient_clear_all, 0, 0, 0),
        "prctl(PR_CAP_AMBIENT_CLEAR_ALL)");
  check(sys(nr_setresuid, uid, uid, uid), "setresuid");
  /* The uid change from 0 cleared the permitted and effective sets; the
   * inheritable one stays unless cleared. */
  {
    struct cap_header h = {cap_version_3, 0};
    struct cap_data d[2] = {{0, 0, 0}, {0, 0, 0}};
    check(sys(nr_capset, &h, d, 0), "capset (clearing the capabilities)");
  }
  check(sys5(nr_prctl, pr_set_no_new_privs, 1, 0, 0, 0),
        "prctl(PR_SET_NO_NEW_PRIVS)");

  /* Fail closed: each of it holds, read back from the kernel. */
  {
    unsigned r = 1, e = 1, s = 1;
    check(sys(nr_getresuid, &r, &e, &s), "getresuid");
    if (r != uid || e != uid || s != uid)
      fail("the uid", 0);
    r = e = s = 1;
    check(sys(nr_getresgid, &r, &e, &s), "getresgid");
    if (r != gid || e != gid || s != gid)
      fail("the gid", 0);
  }
  {
    long n = sys(nr_getgroups, 0, 0, 0);
    check(n, "getgroups");
    if (n != 0)
      fail("no supplementary group", 0);
  }
  if (!caps_empty())
    fail("no effective, permitted or inheritable capability", 0);
  for (cap = 0; cap < last_cap; ++cap) {
    long r = sys(nr_prctl, pr_capbset_read, cap, 0);
    check(r, "prctl(PR_CAPBSET_READ)");
    if (r != 0)
      fail("an empty bounding set", 0);
    r = sys5(nr_prctl, pr_cap_ambient, pr_cap_ambient_is_set, cap, 0, 0);
    check(r, "prctl(PR_CAP_AMBIENT_IS_SET)");
    if (r != 0)
      fail("an empty ambient set", 0);
  }
  {
    long r = sys5(nr_prctl, pr_get_no_new_privs, 0, 0, 0, 0);
    check(r, "prctl(PR_GET_NO_NEW_PRIVS)");
    if (r != 1)
      fail("no_new_privs", 0);
  }

  long r = sys(nr_execve, argv[4], argv + 4, envp);
  say("sv-drop: cannot run ");
  say(argv[4]);
  say(": errno ");
  say_number((unsigned long)-r);
  say("\n");
  finish(r == -e_noent ? exit_not_found : exit_cannot_exec);
}
