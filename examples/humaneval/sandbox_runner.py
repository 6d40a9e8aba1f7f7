#!/usr/bin/env python3
"""Grades one HumanEval completion inside a sandbox, in a way it cannot fool.

Usage: python sandbox_runner.py request.json result.json

request.json: {"task_id", "prompt", "completion", "test", "entry_point",
"timeout_s", "site_packages": false}. It is deleted before anything of the
submission runs.

Three processes and one interpreter start (README.md has what each defence
stops and what it costs):

- the runner (this process): a child subreaper, not dumpable. It forks the
  judge *before* it reads the request, then reads and deletes request.json,
  hands the request to the judge over a pipe, waits for its verdict
  (bounded: START_S until the candidate is ready, then timeout_s + grace:
  a slow start is not the candidate's time), kills and reaps every descendant, setsid'd or not, and only then
  writes result.json itself: into a file reserved before the candidate ran
  (O_TMPFILE, preallocated), linked under a fresh name and renamed over
  whatever is there. It imports nothing after the judge starts, and its
  sys.path holds no directory the candidate can write (the script's, the
  working directory, the user site are dropped).
- the judge (a fork of the runner, so also not dumpable, made before the
  runner read the request): takes the prompt alone from the runner and runs
  it, forks the candidate, and only then takes the completion and the
  tests; it runs prompt + test + check(entry_point) where `entry_point` is
  a proxy that sends the arguments to the candidate and decodes the
  answer. Only plain
  data crosses (None, bool, int, float, complex, str, bytes, list, tuple,
  dict, set, frozenset), so no object of the candidate ever runs in the
  judge: no __eq__ that is always true, no patched builtins, no frames. Any
  frame it cannot decode is the candidate's fault (0.0, not masked).
- the candidate (a fork of the judge, so its memory is a copy of the
  runner's from before the request was read, plus the prompt: nothing of
  the tests): confines itself before it reads anything of the submission (no_new_privs,
  Landlock: no writes outside its scratch directory, no reads outside the
  system and Python directories, no TCP, no signals or ptrace out of its
  domain; a seccomp filter: no ptrace, process_vm_*, no signals, priorities,
  limits or pidfds aimed at the runner or judge, no F_SETOWN, chmod or
  chown), then runs prompt + completion and answers calls. It never sees the
  test. It is killed with everything it started.

result.json: {"reward", "passed", "status": passed|failed|timeout, "task_id",
"detail", "confinement"}. A wrong answer, an exception, a dead candidate, a
timeout or garbage on the channel is a normal result (exit 0); a bad request
or a fault of the harness exits non-zero (the caller masks it).

Standard library only, and only what every job needs is imported (no
subprocess, signal, traceback: each costs milliseconds on every start).
"""

import sys

# Before any other import: no directory the candidate could write may stay on
# the path (the script's, the working directory, the user site in HOME).
_user = getattr(sys.modules.get("site"), "USER_BASE", None) or ""


def _safe_path_entry(p, os=__import__("os")):
    if not p or not os.path.isabs(p):
        return False
    here = os.path.dirname(os.path.abspath(__file__))
    for d in (here, os.getcwd(), _user):
        if d and (p == d or p.startswith(d.rstrip("/") + "/")):
            return False
    # The interpreter's own directories stay (the candidate cannot write
    # them under Landlock or a read-only host); as root everything is
    # writable anyway (`none` mode guarantees less).
    for d in {sys.prefix, sys.base_prefix, sys.exec_prefix}:
        if p == d or p.startswith(d.rstrip("/") + "/"):
            return True
    if os.geteuid() == 0:
        return True
    while not os.path.exists(p):
        p = os.path.dirname(p)
    return not os.access(p, os.W_OK)


sys.path[:] = [p for p in sys.path if _safe_path_entry(p)]

import ctypes  # noqa: E402
import gc  # noqa: E402
import os  # noqa: E402
import select  # noqa: E402
import struct  # noqa: E402
import time  # noqa: E402

try:
    import _json  # noqa: E402  json's own C scanner and escaper
except ImportError:  # an interpreter without it: json itself, below
    _json = None

SIGKILL = 9  # Linux's number; importing `signal` costs ~5 ms
DETAIL_CHARS = 1000
TAIL_BYTES = 4 * DETAIL_CHARS
MAX_REPLY = 16 << 20  # bytes of one answer of the candidate
JUDGE_GRACE_S = 2.0  # the judge's own work past the tests' deadline
START_S = 30.0  # bound on the candidate's start: past it, the harness's fault
READY = b"R"  # the judge to the runner: the candidate started, timeout_s runs
KILL_S = 5.0  # bound on ending every descendant
RESERVE_BYTES = 64 << 10  # result.json's blocks, taken before the candidate
CONFINE_FAILED = 125  # exit status of a candidate that could not be confined
F_DUPFD = 0  # fcntl's, without importing fcntl

# -- the codec: plain data only, both sides of the channel -------------------


def encode(v, out=None):
    """Plain data to bytes; anything else raises TypeError."""
    top = out is None
    if top:
        out = []
    if v is None:
        out.append(b"N")
    elif v is True or v is False:
        out.append(b"T" if v else b"F")
    elif isinstance(v, int):
        out.append(b"i%x;" % int.__int__(v) if int.__int__(v) >= 0
                   else b"i-%x;" % -int.__int__(v))
    elif isinstance(v, float):
        out.append(b"f" + float.hex(float.__float__(v)).encode() + b";")
    elif isinstance(v, complex):
        c = complex.__complex__(v)
        out.append(b"c" + float.hex(c.real).encode() + b";"
                   + float.hex(c.imag).encode() + b";")
    elif isinstance(v, (str, bytes)):
        b = str.encode(v, "utf-8", "surrogatepass") if isinstance(v, str) \
            else bytes(v)
        out.append(b"%c%d:" % (b"s"[0] if isinstance(v, str) else b"b"[0],
                               len(b)))
        out.append(b)
    elif isinstance(v, dict):
        items = list(dict.items(v))
        out.append(b"d%d:" % len(items))
        for k, x in items:
            encode(k, out)
            encode(x, out)
    elif isinstance(v, (list, tuple, set, frozenset)):
        tag = b"l" if isinstance(v, list) else b"t" if isinstance(v, tuple) \
            else b"S" if isinstance(v, set) else b"z"
        items = list(v)
        out.append(tag + b"%d:" % len(items))
        for x in items:
            encode(x, out)
    else:
        raise TypeError(f"a {type(v).__name__} cannot cross to the tests "
                        "(plain data only)")
    return b"".join(out) if top else None


def decode(data):
    """Bytes to plain data, iteratively; raises ValueError on bad input."""
    pos, n, stack = 0, len(data), []  # stack: [tag, items left, items]
    build = {b"l": list, b"t": tuple, b"S": set, b"z": frozenset,
             b"d": lambda xs: dict(zip(xs[::2], xs[1::2]))}

    def upto(end):
        nonlocal pos
        k = data.index(end, pos)
        s = data[pos:k].decode("ascii")
        pos = k + 1
        return s

    while True:
        tag = data[pos:pos + 1]
        pos += 1
        if tag == b"N":
            v = None
        elif tag == b"T" or tag == b"F":
            v = tag == b"T"
        elif tag == b"i":
            s = upto(b";")
            v = -int(s[1:], 16) if s.startswith("-") else int(s, 16)
        elif tag == b"f":
            v = float.fromhex(upto(b";"))
        elif tag == b"c":
            v = complex(float.fromhex(upto(b";")), float.fromhex(upto(b";")))
        elif tag == b"s" or tag == b"b":
            k = int(upto(b":"))
            if not 0 <= k <= n - pos:
                raise ValueError("bad length")
            v = data[pos:pos + k]
            pos += k
            if tag == b"s":
                v = v.decode("utf-8", "surrogatepass")
        elif tag in build:
            k = int(upto(b":")) * (2 if tag == b"d" else 1)
            if not 0 <= k <= n - pos or len(stack) > 1000:
                raise ValueError("bad count or nested too deeply")
            if k:
                stack.append([tag, k, []])
                continue
            v = build[tag]([])
        else:
            raise ValueError("bad tag")
        while stack:  # attach v to its parent, closing what is complete
            top = stack[-1]
            top[2].append(v)
            top[1] -= 1
            if top[1]:
                break
            stack.pop()
            v = build[top[0]](top[2])
        else:
            if pos != n:
                raise ValueError("trailing bytes")
            return v


def frame(payload):
    return len(payload).to_bytes(4, "big") + payload


# -- confinement of the candidate (in its process, before the submission) ---

_libc = ctypes.CDLL(None, use_errno=True)

# x86_64 and aarch64 numbers: (audit arch, always denied, denied when the
# first argument names a protected pid, setpriority, ioprio_set, fcntl, ioctl)
_SYSCALLS = {
    "x86_64": (0xC000003E, [
        101, 310, 311, 424, 438, 440, 448, 312, 274, 256, 279, 298,  # ptrace..
        90, 91, 268, 452, 92, 93, 94, 260],  # chmod, chown families
        [62, 200, 234, 129, 297, 434, 302, 203, 144, 142, 314],
        141, 251, 72, 16),
    "aarch64": (0xC00000B7, [
        117, 270, 271, 424, 438, 440, 448, 272, 100, 238, 239, 241,
        52, 53, 452, 55, 54],
        [129, 130, 131, 138, 240, 434, 261, 122, 119, 118, 274],
        140, 30, 25, 29),
}
F_SETOWN, F_SETOWN_EX, FIOSETOWN, SIOCSPGRP = 8, 15, 0x8901, 0x8902


def _prctl(*args):
    args = [ctypes.c_ulong(a) if isinstance(a, int) else a for a in args]
    args += [ctypes.c_ulong(0)] * (5 - len(args))
    if _libc.prctl(*args) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({args[0].value})")


def _syscall(nr, *args):
    r = _libc.syscall(ctypes.c_long(nr), *args)
    if r < 0:
        raise OSError(ctypes.get_errno(), f"syscall {nr}")
    return r


def seccomp_program(protected):
    """A classic BPF filter: EPERM for the calls above, allow the rest."""
    arch, always, pid_arg0, prio, ioprio, fcntl_nr, ioctl_nr = \
        _SYSCALLS[os.uname().machine]
    code = []  # (opcode, k, true label, false label) or (label,)
    LD, JEQ, JGE, RET = 0x20, 0x15, 0x35, 0x06
    ALLOW, DENY = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ERRNO | EPERM
    code += [(LD, 4, None, None), (JEQ, arch, None, "deny"),
             (LD, 0, None, None)]
    if arch == 0xC000003E:
        code.append((JGE, 0x40000000, "deny", None))  # x32 calls
    code += [(JEQ, nr, "deny", None) for nr in always]
    code += [(JEQ, nr, "pid", None) for nr in pid_arg0]
    code += [(JEQ, prio, "prio", None), (JEQ, ioprio, "ioprio", None),
             (JEQ, fcntl_nr, "fcntl", None), (JEQ, ioctl_nr, "ioctl", None),
             (RET, ALLOW, None, None),
             ("pid",), (LD, 16, None, None)]
    code += [(JEQ, p & 0xFFFFFFFF, "deny", None) for p in sorted(protected)]
    code += [(RET, ALLOW, None, None),
             ("prio",), (LD, 16, None, None), (JEQ, 0, None, "deny"),
             (LD, 24, None, None), (JEQ, 0, "allow", "deny"),
             ("ioprio",), (LD, 16, None, None), (JEQ, 1, None, "deny"),
             (LD, 24, None, None), (JEQ, 0, "allow", "deny"),
             ("fcntl",), (LD, 24, None, None), (JEQ, F_SETOWN, "deny", None),
             (JEQ, F_SETOWN_EX, "deny", "allow"),
             ("ioctl",), (LD, 24, None, None), (JEQ, FIOSETOWN, "deny", None),
             (JEQ, SIOCSPGRP, "deny", "allow"),
             ("allow",), (RET, ALLOW, None, None),
             ("deny",), (RET, DENY, None, None)]
    labels, i = {}, 0
    for ins in code:
        if len(ins) == 1:
            labels[ins[0]] = i
        else:
            i += 1
    out, i = [], 0
    for ins in code:
        if len(ins) == 1:
            continue
        op, k, jt, jf = ins
        rel = [labels[x] - i - 1 if x else 0 for x in (jt, jf)]
        out.append(struct.pack("=HBBI", op, rel[0], rel[1], k))
        i += 1
    return b"".join(out), i


LL_FS_WRITE = (1 << 1) | (0xFF << 4) | (1 << 12)  # write_file, remove/make_*
LL_FS_READ = (1 << 2) | (1 << 3)  # read_file, read_dir
LL_FILE_RIGHTS = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 14) | (1 << 15)


def landlock(scratch, read_roots):
    """Returns the features it applied ([] when Landlock is unavailable)."""
    try:
        abi = _syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    except OSError:
        return []
    fs = LL_FS_WRITE | LL_FS_READ | (1 << 13 if abi >= 2 else 0) \
        | (1 << 14 if abi >= 3 else 0) | (1 << 15 if abi >= 5 else 0)
    net = 3 if abi >= 4 else 0  # bind and connect TCP
    scoped = 3 if abi >= 6 else 0  # abstract unix sockets, signals
    attr = struct.pack("=QQQ", fs, net, scoped)[:8 if abi < 4 else
                                                 16 if abi < 6 else 24]
    ruleset = _syscall(444, attr, ctypes.c_size_t(len(attr)),
                       ctypes.c_uint32(0))

    def allow(path, access):
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return
        try:
            if not os.path.isdir(path):
                access &= LL_FILE_RIGHTS
            rule = struct.pack("=Qi", access & fs, fd)
            _syscall(445, ctypes.c_int(ruleset), ctypes.c_int(1), rule,
                     ctypes.c_uint32(0))
        finally:
            os.close(fd)

    allow(scratch, fs)
    for path in read_roots:
        allow(path, LL_FS_READ)
    allow("/dev/null", fs)
    _syscall(446, ctypes.c_int(ruleset), ctypes.c_uint32(0))
    os.close(ruleset)
    return ["landlock-fs"] + (["landlock-net"] if net else []) \
        + (["landlock-scope"] if scoped else [])


def confine(scratch, read_roots, protected):
    """no_new_privs, then Landlock, then seccomp; raises if seccomp fails."""
    _prctl(38, 1)  # PR_SET_NO_NEW_PRIVS
    applied = landlock(scratch, read_roots)
    prog, n = seccomp_program(protected)
    buf = ctypes.create_string_buffer(prog, len(prog))
    fprog = ctypes.create_string_buffer(
        struct.pack("=HxxxxxxQ", n, ctypes.addressof(buf)), 16)
    _prctl(22, 2, fprog)  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
    return applied + ["seccomp"]


def python_roots():
    """What the candidate's interpreter reads: the system and Python dirs."""
    roots = ["/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin",
             "/etc", "/proc", "/sys", "/dev/null", "/dev/zero", "/dev/full",
             "/dev/random", "/dev/urandom"]
    for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
              sys.base_exec_prefix,
              os.path.dirname(os.path.realpath(sys.executable))):
        if p and p not in roots:
            roots.append(p)
    return roots


# -- the candidate: a fork of the judge, confined before the submission -------


def candidate_main(scratch, protected, ends):
    """The candidate process (never returns): fds 0 and 1 /dev/null, 2 its
    stderr, 3 the calls, 4 the answers, nothing else; confined, then serves."""
    try:
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        # Copies above the targets first: no target overwritten unread.
        high = [_libc.fcntl(fd, F_DUPFD, 10) for fd in (null, null) + ends]
        if min(high) < 0:
            raise OSError(ctypes.get_errno(), "fcntl(F_DUPFD)")
        for target, fd in enumerate(high):
            os.dup2(fd, target)
        os.closerange(5, 1 << 16)
        # Only the runner and the judge exist yet: our /proc files may be
        # ours again (a non-dumpable process's are root's).
        _prctl(4, 1)  # PR_SET_DUMPABLE
        try:
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("1000")  # the OOM killer takes the candidate first
        except OSError:
            pass
        os.chdir(scratch)
        applied = confine(scratch, python_roots() + [scratch],
                          protected | {os.getppid()})
        os.environ["TMPDIR"] = os.environ["HOME"] = scratch
    except BaseException as e:
        os.write(2, f"sandbox_runner: cannot start the candidate: "
                    f"{e}\n".encode())
        os._exit(CONFINE_FAILED)
    try:
        serve(applied)
    finally:
        os._exit(0)


def serve(features):
    """Says it is ready, loads the program, answers calls until the judge
    closes the pipe. Nothing of the submission runs before the first recv."""
    def read(k):
        b = b""
        while len(b) < k:
            chunk = os.read(3, k - len(b))
            if not chunk:
                os._exit(0)
            b += chunk
        return b

    def recv():
        return decode(read(int.from_bytes(read(4), "big")))

    def send(data):
        while data:
            data = data[os.write(4, data):]

    send(frame(encode(("ready", features))))
    _, src, entry, site = recv()
    if not site:
        drop_site()
    main = type(sys)("__main__")
    sys.modules["__main__"] = main
    sys.argv[:] = ["-c"]
    try:
        exec(compile(src, "<submission>", "exec"), main.__dict__)
        fn = main.__dict__[entry]
        reply = ("loaded",)
    except BaseException as e:
        reply = failure(e)
    send(frame(encode(reply)))
    while reply[0] != "raise":
        msg = recv()
        try:
            data = frame(encode(("ok", fn(*msg[1], **msg[2]))))
        except BaseException as e:  # the next call may well work
            data = frame(encode(failure(e)))
        send(data)


def failure(e):
    """The traceback on stderr (the detail's tail); the exception's reply."""
    try:
        sys.__excepthook__(type(e), e, e.__traceback__)  # imports nothing
    except BaseException:
        pass
    try:
        message = str(e)[:DETAIL_CHARS]
    except BaseException:
        message = ""
    return ("raise", type(e).__name__, message)


def drop_site():
    """What a `python -I -S` would not have: site-packages on the path, the
    modules and import hooks from there, site's builtins (exit, quit, ...)."""
    def from_site(path):
        parts = path.split("/")
        return "site-packages" in parts or "dist-packages" in parts

    def module_from_site(name):
        return from_site(getattr(sys.modules.get(name), "__file__", None)
                         or "")

    roots = {sys.base_prefix.rstrip("/") + "/",
             sys.base_exec_prefix.rstrip("/") + "/"}
    sys.path[:] = [p for p in sys.path if not from_site(p) and any(
        (p + "/").startswith(r) for r in roots)]
    sys.meta_path[:] = [f for f in sys.meta_path if not module_from_site(
        getattr(f, "__module__", None))]
    for name in [n for n in sys.modules if module_from_site(n)]:
        del sys.modules[name]
    builtins = sys.modules["builtins"]
    for name in ("exit", "quit", "help", "copyright", "credits", "license"):
        builtins.__dict__.pop(name, None)


# -- the judge ----------------------------------------------------------------


class CandidateGone(BaseException):
    """The candidate died, hung or spoke garbage: not catchable by tests."""


class Channel:
    """The judge's side of the candidate's pipes, every wait bounded."""

    def __init__(self, pid, to_c, from_c, err, deadline):
        self.pid, self.to_c, self.from_c, self.err = pid, to_c, from_c, err
        self.deadline, self.buf, self.tail = deadline, bytearray(), b""
        for fd in (to_c, from_c, err):
            os.set_blocking(fd, False)
        self.poller = select.poll()
        self.poller.register(from_c, select.POLLIN)
        self.poller.register(err, select.POLLIN)

    def _pump(self, want_out):
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise CandidateGone("timeout")
        if want_out:
            self.poller.register(self.to_c, select.POLLOUT)
        events = self.poller.poll(left * 1000)
        if want_out:
            self.poller.unregister(self.to_c)
        ready = {fd for fd, _ in events}
        if self.err in ready:
            chunk = os.read(self.err, 65536)
            if chunk:
                self.tail = (self.tail + chunk)[-TAIL_BYTES:]
            else:
                self.poller.unregister(self.err)
        if self.from_c in ready:
            chunk = os.read(self.from_c, 65536)
            if not chunk:
                raise CandidateGone("exited")
            self.buf += chunk
            if len(self.buf) > MAX_REPLY + 4:
                raise CandidateGone(f"sent more than {MAX_REPLY} bytes")
        return ready

    def drain_stderr(self, within_s):
        """The candidate's stderr tail, read until EOF or `within_s`."""
        poller, end = select.poll(), time.monotonic() + within_s
        poller.register(self.err, select.POLLIN)
        while True:
            left = end - time.monotonic()
            if left <= 0 or not poller.poll(left * 1000):
                return self.tail
            chunk = os.read(self.err, 65536)
            if not chunk:
                return self.tail
            self.tail = (self.tail + chunk)[-TAIL_BYTES:]

    def send(self, value):
        data = frame(encode(value))
        while data:
            if self.to_c in self._pump(True):
                try:
                    data = data[os.write(self.to_c, data):]
                except BlockingIOError:
                    pass
                except BrokenPipeError:
                    raise CandidateGone("exited") from None

    def recv(self):
        while True:
            if len(self.buf) >= 4:
                k = int.from_bytes(self.buf[:4], "big")
                if k > MAX_REPLY:
                    raise CandidateGone(f"sent more than {MAX_REPLY} bytes")
                if len(self.buf) >= 4 + k:
                    payload = bytes(self.buf[4:4 + k])
                    del self.buf[:4 + k]
                    try:
                        return decode(payload)
                    except Exception as e:  # any frame we cannot decode
                        # (OverflowError of f0x1p99999;, unhashable set
                        # items, ...) is the candidate's fault, not ours.
                        raise CandidateGone(f"sent garbage ({shown(e)})") \
                            from None
            self._pump(False)


def spawn_candidate(scratch, protected):
    """Forks the candidate, which confines itself; returns its pid and the
    judge's ends of its pipes (calls, answers, stderr)."""
    req_r, req_w = os.pipe()
    rep_r, rep_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        candidate_main(scratch, protected, (err_w, req_r, rep_w))
    for fd in (req_r, rep_w, err_w):
        os.close(fd)
    return pid, req_w, rep_r, err_r


def shown(v, limit=200):
    """str of an exception or repr of a value, whatever it holds: what the
    candidate sent may be nested past the recursion limit or huge."""
    try:
        text = f"{type(v).__name__}: {v}" if isinstance(v, BaseException) \
            else v if type(v) is str else repr(v)
    except Exception:
        text = f"a {type(v).__name__} that cannot be shown"
    return text[:limit]


def describe(e, test):
    """One line for an exception of the tests: type, message, test line."""
    line, tb = None, e.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<test>":
            line = tb.tb_lineno
        tb = tb.tb_next
    text = shown(e, DETAIL_CHARS).strip()
    if line is not None:
        src = test.splitlines()[line - 1].strip() if 0 < line <= len(
            test.splitlines()) else ""
        text += f" (test line {line}: {src})"
    return text


def make_proxy(chan, name):
    builtins = __builtins__ if isinstance(__builtins__, dict) \
        else vars(__builtins__)

    def candidate(*args, **kwargs):
        try:
            chan.send(("call", args, kwargs))
        except TypeError as e:
            raise TypeError(f"the judge cannot pass this to {name}: {e}")
        reply = chan.recv()
        if type(reply) is tuple and reply[:1] == ("ok",) and len(reply) == 2:
            return reply[1]
        if type(reply) is tuple and len(reply) == 3 and reply[0] == "raise" \
                and type(reply[1]) is str and type(reply[2]) is str:
            kind = builtins.get(reply[1])
            if not (isinstance(kind, type) and issubclass(kind, Exception)):
                kind = RuntimeError
            raise kind(reply[2] if kind is not RuntimeError
                       else f"{reply[1]}: {reply[2]}")
        raise CandidateGone("sent an answer that is not one")

    candidate.__name__ = candidate.__qualname__ = name
    return candidate


def judge(chan, ns, req, on_ready):
    """(status, detail) of the tests against the candidate behind `chan`;
    `ns` holds what the prompt defined."""
    # While the candidate confines itself: the tests, with the entry point
    # bound to the proxy.
    proxy = make_proxy(chan, req["entry_point"])
    ns[req["entry_point"]] = proxy
    exec(compile(req["test"], "<test>", "exec"), ns)
    hello = chan.recv()
    if type(hello) is not tuple or hello[:1] != ("ready",):
        raise CandidateGone("did not start")
    chan.features = list(hello[1])
    chan.started = True  # from here on, whatever happens is the candidate's
    # ... and its time runs: a start slowed by the machine's load is not.
    chan.deadline = time.monotonic() + req["timeout_s"]
    on_ready()
    chan.send(("load", ns["__prompt__"] + req["completion"],
               req["entry_point"], req["site_packages"]))
    reply = chan.recv()
    if type(reply) is not tuple or reply != ("loaded",):
        return "failed", "the program failed to load: " + (
            f"{shown(reply[1])}: {shown(reply[2], DETAIL_CHARS)}"
            if type(reply) is tuple and len(reply) == 3 else shown(reply))
    try:
        ns["check"](proxy)
    except CandidateGone:
        raise
    except BaseException as e:
        return "failed", describe(e, req["test"])
    return "passed", ""


def reap(pid, within_s):
    """Exit code (negative signal) of a child, or None if it lingers."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        pidfd = None  # a zombie already: waitpid has it
    except (AttributeError, OSError):
        pidfd = -1  # no pidfds: poll every millisecond
    end = time.monotonic() + within_s
    try:
        while True:
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                return None
            if done:
                return os.waitstatus_to_exitcode(status)
            left = end - time.monotonic()
            if left <= 0:
                return None
            if pidfd is None or pidfd < 0:
                time.sleep(min(left, 0.001))
            else:
                select.select([pidfd], [], [], left)
    finally:
        if pidfd is not None and pidfd >= 0:
            os.close(pidfd)


def read_exactly(fd, k):
    """k bytes, not one more (the rest of the pipe is not ours yet)."""
    data = b""
    while len(data) < k:
        chunk = os.read(fd, k - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def read_all(fd):
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def write_all(fd, data):
    while data:
        data = data[os.write(fd, data):]


def judge_main(req_r, verdict_w, scratch, protected):
    """The judge process: forks the candidate, then takes the request from
    the runner, runs the tests, reports on `verdict_w` and exits."""
    try:
        # The prompt first, alone: the candidate gets it anyway, and what it
        # imports (typing, ...) is then imported once, for both.
        size = read_exactly(req_r, 4)
        if size is None:  # the runner refused the request
            os._exit(0)
        ns = {"__name__": "__main__", "__builtins__": __builtins__,
              "__prompt__": decode(read_exactly(req_r, int.from_bytes(
                  size, "big")))}
        exec(compile(ns["__prompt__"], "<prompt>", "exec"), ns)
        gc.freeze()  # no collection in the candidate touches (copies) these
        pid, to_c, from_c, err = spawn_candidate(scratch, protected)
        # Only now the tests and the completion: the candidate has none.
        req = decode(read_all(req_r))
        os.close(req_r)
        chan = Channel(pid, to_c, from_c, err, time.monotonic() + START_S)
        chan.started, chan.features = False, []
        try:
            status, detail = judge(chan, ns, req,
                                   lambda: write_all(verdict_w, READY))
        except CandidateGone as e:
            if not chan.started:
                raise RuntimeError(f"the candidate did not start: {e}") \
                    from None
            status, detail = ("timeout", "") if str(e) == "timeout" else (
                "failed", f"the candidate {e} before the tests ended")
        finally:
            try:
                os.kill(pid, SIGKILL)
            except OSError:
                pass
            code = reap(pid, 1.0)
            tail = chan.drain_stderr(0.2).decode("utf-8", "replace")
        if status == "failed" and "before the tests ended" in detail:
            detail = detail.replace("the candidate ", "the candidate "
                                    f"(exit {code}) ", 1)
        if status != "passed":
            detail = (detail + "\n" + tail).strip()
        verdict = ("verdict", status, detail[-DETAIL_CHARS:], chan.features)
    except BaseException as e:
        why = f"{type(e).__name__}: {e}"
        if "chan" in locals():
            why += " " + chan.drain_stderr(1.0).decode("utf-8", "replace")
        verdict = ("error", why.strip()[-DETAIL_CHARS:])
    try:
        write_all(verdict_w, encode(verdict))
    finally:
        os._exit(0)


# -- the runner: processes ----------------------------------------------------


def descendants(me):
    """Every process below `me`, from /proc (no children file needed)."""
    kids = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fd = os.open(f"/proc/{name}/stat", os.O_RDONLY)
            try:
                stat = os.read(fd, 1024)
            finally:
                os.close(fd)
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2:].split(b" ", 2)[1])
        kids.setdefault(ppid, []).append(int(name))
    out, todo = [], [me]
    while todo:
        for pid in kids.get(todo.pop(), ()):
            out.append(pid)
            todo.append(pid)
    return out


def children(me):
    """Our children, from the kernel's list (else every descendant)."""
    try:
        fd = os.open(f"/proc/{me}/task/{me}/children", os.O_RDONLY)
    except OSError:
        return descendants(me)
    try:
        return [int(pid) for pid in read_all(fd).split()]
    finally:
        os.close(fd)


def end_everything():
    """Kills and reaps every descendant; True once none is left. Waits on
    events, not a clock: our children are killed and awaited on their
    pidfds, their orphans come to us (the subreaper), and again, a
    generation at a time, until no child is left."""
    me, end = os.getpid(), time.monotonic() + KILL_S
    while True:
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            return True  # a subreaper without children has no descendants
        if time.monotonic() >= end:
            return False
        fds = []
        for pid in children(me):
            try:
                fds.append(os.pidfd_open(pid))
            except (AttributeError, OSError):
                pass
            try:
                os.kill(pid, SIGKILL)
            except OSError:
                pass
        if not fds:  # no pidfds (or a child that just ended): a short nap
            time.sleep(0.0005)
        for fd in fds:  # readable once that process has ended
            select.select([fd], [], [], max(0.0, end - time.monotonic()))
            os.close(fd)


def await_verdict(verdict_r, judge_pid, timeout):
    """The judge's verdict (None if it died or overran its deadline), its
    exit status (None if it overran) and whether the candidate started: the
    tests' `timeout` runs from then; before, START_S bounds the wait."""
    poller = select.poll()
    poller.register(verdict_r, select.POLLIN)
    data, started = b"", False
    deadline = time.monotonic() + START_S + JUDGE_GRACE_S
    while len(data) < (1 << 20):
        left = deadline - time.monotonic()
        if left <= 0 or not poller.poll(left * 1000):
            return None, None, started
        chunk = os.read(verdict_r, 65536)
        if not chunk:
            break
        if not started and not data and chunk[:1] == READY:
            started, chunk = True, chunk[1:]
            deadline = time.monotonic() + timeout + JUDGE_GRACE_S
        data += chunk
    status = reap(judge_pid, 1.0)
    try:
        verdict = decode(data)
    except Exception:
        return None, status, started
    ok = type(verdict) is tuple and (
        len(verdict) == 4 and verdict[0] == "verdict"
        and all(type(x) is t for x, t in zip(verdict[1:], (str, str, list)))
        or len(verdict) == 2 and verdict[0] == "error")
    return verdict if ok else None, status, started


# -- the runner: files --------------------------------------------------------


class BadRequest(Exception):
    pass


class _JSONSpec:
    """What _json.make_scanner reads: json's defaults, without NaN."""
    strict = True
    object_hook = object_pairs_hook = None
    parse_float, parse_int = float, int

    @staticmethod
    def parse_constant(name):
        raise ValueError(f"{name} is not JSON")


def json_loads(text):
    """`json.loads` without importing json (re, enum, ...: ~500 page faults
    a job), by json's own C scanner; json itself only to say what is wrong
    with a text the scanner refused."""
    if _json is not None:
        ws = " \t\n\r"
        try:
            value, end = _json.make_scanner(_JSONSpec)(
                text, len(text) - len(text.lstrip(ws)))
            if not text[end:].strip(ws):
                return value
        except Exception:  # 3.11 raises SystemError without json.decoder
            pass
    return __import__("json").loads(text,
                                    parse_constant=_JSONSpec.parse_constant)


def json_dumps(v):
    """`json.dumps` of what json_loads makes (ASCII, no NaN)."""
    if _json is None:
        return __import__("json").dumps(v)
    if v is None or v is True or v is False:
        return "null" if v is None else "true" if v else "false"
    if type(v) is int:
        return repr(v)
    if type(v) is float:
        return repr(v) if v - v == 0 else "null"  # inf, nan: not JSON
    if type(v) is str:
        return _json.encode_basestring_ascii(v)
    if type(v) is list:
        return "[" + ", ".join(map(json_dumps, v)) + "]"
    if type(v) is dict:
        return "{" + ", ".join(json_dumps(str(k)) + ": " + json_dumps(x)
                               for k, x in v.items()) + "}"
    raise TypeError(f"a {type(v).__name__} is not JSON")


def read_request(path):
    try:
        with open(path, encoding="utf-8") as f:
            req = json_loads(f.read())
    finally:
        # Before anything runs: the code under test must not read the tests.
        os.remove(path)
    if not isinstance(req, dict):
        raise BadRequest("expected a JSON object")
    for key in ("prompt", "completion", "test", "entry_point"):
        if not isinstance(req.get(key), str):
            raise BadRequest(f"{key}: expected a string")
    if not req["entry_point"].isidentifier():
        raise BadRequest("entry_point: not an identifier")
    timeout = req.get("timeout_s", 10)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) \
            or not 0 < timeout <= 3600:
        raise BadRequest("timeout_s: expected seconds in (0, 3600]")
    return req


def reserve_result():
    """An unnamed file for result.json, its blocks taken now: the candidate
    can neither see it nor fill the disk before it is written."""
    try:
        fd = os.open(".", os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o644)
    except (AttributeError, OSError):
        return None
    try:
        os.posix_fallocate(fd, 0, RESERVE_BYTES)
    except OSError:
        pass
    return fd


def remove_tree(path):
    """Removes a file or directory tree without following symlinks."""
    try:
        os.unlink(path)
        return
    except IsADirectoryError:
        pass
    except FileNotFoundError:
        return
    for entry in os.scandir(path):
        remove_tree(os.path.join(path, entry.name))
    os.rmdir(path)


def write_result(reserved, path, result):
    """Replaces whatever is at `path` with the verdict, written last."""
    data = json_dumps(result).encode()
    tmp = f".result-{os.urandom(8).hex()}.tmp"
    if reserved is not None:
        os.pwrite(reserved, data, 0)
        os.ftruncate(reserved, len(data))
        # linkat(AT_SYMLINK_FOLLOW) of /proc/self/fd/N names the unnamed
        # file; os.link uses linkat only with a directory fd.
        fds = os.open("/proc/self/fd", os.O_PATH | os.O_CLOEXEC)
        try:
            os.link(str(reserved), tmp, src_dir_fd=fds)
        finally:
            os.close(fds)
    else:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                     | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        with open(fd, "wb") as f:
            f.write(data)
    try:
        os.replace(tmp, path)
    except OSError:  # a directory there, or a path made unusable
        remove_tree(path)
        os.replace(tmp, path)


# -- the runner ---------------------------------------------------------------


def start_judge(scratch):
    """Forks the judge (which forks the candidate) before the request is
    read; returns its pid, the request pipe and the verdict pipe."""
    # What the candidate must not signal, renice, limit or open a pidfd of:
    # us, the judge, our parent, and their process groups; -1 is everyone.
    me, parent = os.getpid(), os.getppid()
    protected = {me, parent, -1, -me, -os.getpgid(0)}
    try:
        protected.add(-os.getpgid(parent))
    except OSError:
        pass
    req_r, req_w = os.pipe()
    verdict_r, verdict_w = os.pipe()
    gc.freeze()  # no collection in the judge touches (copies) these
    pid = os.fork()
    if pid == 0:
        os.close(req_w)
        os.close(verdict_r)
        judge_main(req_r, verdict_w, scratch,
                   protected | {os.getpid(), -os.getpid()})
    os.close(req_r)
    os.close(verdict_w)
    return pid, req_w, verdict_r


def run(req, judge_pid, req_w, verdict_r):
    """Hands the request to the judge, ends everything, returns (status,
    detail, features)."""
    timeout = float(req.get("timeout_s", 10))
    tests = {k: req[k] for k in ("completion", "test", "entry_point")}
    tests["site_packages"] = req.get("site_packages") is True
    tests["timeout_s"] = timeout
    try:
        write_all(req_w, frame(encode(req["prompt"])) + encode(tests))
    except OSError:
        pass  # the judge is gone: it has no verdict below
    os.close(req_w)
    verdict, status, started = await_verdict(verdict_r, judge_pid, timeout)
    os.close(verdict_r)
    if not end_everything():
        raise RuntimeError("could not end the candidate's processes")
    if verdict is None and not started:  # no code of the submission ran
        raise RuntimeError("the judge " + (
            f"overran {START_S:g} s" if status is None
            else f"died (exit {status})") + " before the candidate started")
    if verdict is None:
        if status is None:
            return "timeout", f"timed out after {timeout:g} s", []
        return "failed", (f"the judge died (exit {status}) on the "
                          "candidate's output"), []
    if verdict[0] == "error":
        raise RuntimeError(f"the judge failed: {verdict[1]}")
    _, status, detail, features = verdict
    if status == "timeout":
        detail = f"timed out after {timeout:g} s\n{detail}".strip()
    return status, detail, features


def main(argv):
    if len(argv) != 3:
        print("usage: sandbox_runner.py request.json result.json",
              file=sys.stderr)
        return 2
    _prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: orphans come back to us
    _prctl(4, 0)  # PR_SET_DUMPABLE: no ptrace, /proc/<pid>/mem, ... of us
    scratch = os.path.abspath(f".candidate-{os.urandom(6).hex()}")
    os.mkdir(scratch, 0o700)
    judge_pid, req_w, verdict_r = start_judge(scratch)
    try:
        req = read_request(argv[1])
    except (BadRequest, ValueError, OSError, RecursionError) as e:
        os.close(req_w)
        end_everything()
        remove_tree(scratch)
        print(f"sandbox_runner: bad {argv[1]}: {e}", file=sys.stderr)
        return 2
    reserved = reserve_result()
    here, home = os.getcwd(), os.stat(".")
    try:
        status, detail, features = run(req, judge_pid, req_w, verdict_r)
    except Exception as e:
        print(f"sandbox_runner: {type(e).__name__}: {e}", file=sys.stderr)
        return 3
    try:
        now = os.stat(here, follow_symlinks=False)
        moved = (now.st_dev, now.st_ino) != (home.st_dev, home.st_ino)
    except OSError:
        moved = True
    if moved:
        # Only possible without Landlock: the directory was swapped.
        status, detail = "failed", "the candidate moved the call directory"
    passed = status == "passed"
    # The candidate's strings may hold lone surrogates: a strict JSON parser
    # (the caller's) rejects their escapes, which would mask the sample.
    detail = detail.encode("utf-8", "backslashreplace").decode("utf-8")
    write_result(reserved, argv[2], {
        "reward": 1.0 if passed else 0.0,
        "passed": passed,
        "status": status,
        "task_id": req.get("task_id"),
        "detail": detail,
        "confinement": features,
    })
    return 0


if __name__ == "__main__":
    code = main(sys.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no interpreter teardown (~20 ms): nothing left to do
