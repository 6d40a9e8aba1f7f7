"""Completions of HumanEval/0 (has_close_elements) that try to fool the
harness. Each is wrong unless its trick works; every one must score 0.0 with
mask_sample false (or be correct, where marked).

A completion reports what its trick found on stderr as `LEAK ...`; the
result's detail (the tail of that stderr) must never contain it.
"""

# Appended after the prompt's `def has_close_elements(...):` and docstring.
PRELUDE = """\
    return _attack(numbers, threshold)


import os, sys
# Pieces of the test's text, built at run time, so that neither the
# completion's source nor its memory holds them side by side: finding them
# adjacent means finding the test.
MARKS = ((bytes(reversed(b"kcehc fed")), bytes(reversed(b")etadidnac("))),
         (bytes(reversed(b"0.0 ,)2.2")), bytes(reversed(b"eslaF == )5"))))


def leak(what):
    sys.stderr.write("LEAK " + what + "\\n")
    sys.stderr.flush()


def info(what):
    sys.stderr.write("INFO " + what + "\\n")
    sys.stderr.flush()


def scan(data, where):
    for head, rest in MARKS:
        i = data.find(head)
        while i >= 0:
            if data[i + len(head):i + len(head) + len(rest)] == rest:
                leak(where)
                return True
            i = data.find(head, i + 1)
    return False


def parent_of(pid):
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    return int(stat[stat.rindex(b")") + 2:].split()[1])


def ancestors():
    # The harness: the judge, the runner and the runner's parent.
    out, pid = [], os.getpid()
    while len(out) < 3:
        try:
            pid = parent_of(pid)
        except (OSError, ValueError):
            return out
        if pid <= 1:
            return out
        out.append(pid)
    return out


def forged():
    return '{"reward": 1.0, "passed": true, "status": "passed", ' \\
        '"task_id": "HumanEval/0", "detail": ""}'


def call_dirs():
    # The call directory and its relatives, wherever the harness put us
    # (not the scratch directory the harness gives us: TMPDIR).
    here = os.getcwd()
    dirs = [here, os.path.dirname(here), os.path.dirname(
        os.path.dirname(here)), os.environ.get("HOME", here)]
    return [d for d in dirs if d != os.environ.get("TMPDIR")]

"""

ATTACKS = {}
# The tests' deadline (timeout_s). It decides no verdict here but the
# "timeout" attack's (a busy loop, 3 s); for every other case it only bounds
# a runaway. So it lies beyond the honest cost of any of them on a busy
# machine (600 python processes, 128 MiB of output, 20 MiB strings ran past
# 3 s on a 2-core machine at load 13-20), and below every stall an attack
# tries (children that sleep 30 s and 60 s, a daemon that writes for 40 s):
# a harness that waited for one still times out.
BOUND_S = 20
TIMEOUTS_S = {"timeout": 3}


def timeout_s(name):
    return TIMEOUTS_S.get(name, BOUND_S)


def attack(name, expect="failed", reward=0.0):
    def register(body):
        ATTACKS[name] = (PRELUDE + body, expect, reward)
        return body
    return register


attack("frame_walk")("""
def _attack(numbers, threshold):
    # (a) the old harness kept its nonce in a caller's frame.
    f = sys._getframe()
    while f is not None:
        for scope in (f.f_locals, f.f_globals):
            for k, v in list(scope.items()):
                if isinstance(v, (str, bytes)):
                    b = v.encode() if isinstance(v, str) else v
                    scan(b, "frame " + k)
                    for fd in range(3, 20):
                        try:
                            os.write(fd, b)
                        except OSError:
                            pass
        f = f.f_back
    return None
""")

attack("always_equal")("""
class _Yes:
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    def __bool__(self):
        return True
    __hash__ = object.__hash__


def _attack(numbers, threshold):
    return _Yes()
""")

attack("bool_subclass")("""
class _Int(int):
    def __eq__(self, other):
        return True
    __hash__ = int.__hash__


def _attack(numbers, threshold):
    return _Int(7)
""")

attack("gc_objects")("""
import gc


def _attack(numbers, threshold):
    for o in gc.get_objects():
        try:
            if isinstance(o, dict):
                for v in o.values():
                    if isinstance(v, str):
                        scan(v.encode(), "gc dict")
            elif isinstance(o, (list, tuple)):
                for v in o:
                    if isinstance(v, str):
                        scan(v.encode(), "gc list")
        except Exception:
            pass
    return None
""")

attack("proc_mem")("""
def _read_mem(pid):
    try:
        maps = open(f"/proc/{pid}/maps").read().splitlines()
        mem = open(f"/proc/{pid}/mem", "rb", 0)
    except OSError as e:
        return
    for line in maps:
        lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
        if "rw" not in line.split()[1] or hi - lo > 1 << 28:
            continue
        try:
            mem.seek(lo)
            if scan(mem.read(hi - lo), f"/proc/{pid}/mem"):
                return
        except (OSError, ValueError, OverflowError):
            pass


def _attack(numbers, threshold):
    _read_mem("self")
    for pid in ancestors():
        _read_mem(pid)
        for name in ("environ", "cmdline"):
            try:
                scan(open(f"/proc/{pid}/{name}", "rb").read(), name)
            except OSError:
                pass
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    scan(open(f"/proc/{pid}/fd/{fd}", "rb").read(1 << 20),
                         "fd " + fd)
                except OSError:
                    pass
        except OSError:
            pass
    return None
""")

attack("ptrace")("""
import ctypes


def _attack(numbers, threshold):
    libc = ctypes.CDLL(None, use_errno=True)
    for pid in ancestors():
        for req in (16, 0x4206):  # PTRACE_ATTACH, PTRACE_SEIZE
            if libc.ptrace(ctypes.c_long(req), ctypes.c_long(pid),
                           None, None) == 0:
                leak(f"ptrace {req} {pid}")
        buf = ctypes.create_string_buffer(4096)
        local = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 4096)
        remote = (ctypes.c_void_p * 2)(0x400000, 4096)
        if libc.process_vm_readv(pid, local, 1, remote, 1, 0) >= 0:
            leak(f"process_vm_readv {pid}")
        fd = libc.syscall(434, pid, 0)  # pidfd_open
        if fd >= 0:
            if libc.syscall(438, fd, 0, 0) >= 0:  # pidfd_getfd
                leak(f"pidfd_getfd {pid}")
    return None
""")

attack("kill_runner")("""
import ctypes, fcntl


def _attack(numbers, threshold):
    # (d) the old harness turned a killed runner into a masked sample.
    libc = ctypes.CDLL(None, use_errno=True)
    for pid in ancestors():
        for how in (lambda: os.kill(pid, 9), lambda: os.kill(pid, 19),
                    lambda: os.killpg(pid, 9),
                    lambda: os.killpg(os.getpgid(pid), 9)):
            try:
                how()
                leak(f"killed {pid}")
            except OSError:
                pass
        try:
            d = os.open(f"/proc/{pid}", os.O_RDONLY)
            if libc.syscall(424, d, 9, None, 0) == 0:  # pidfd_send_signal
                leak(f"pidfd_send_signal {pid}")
        except OSError:
            pass
        r, w = os.pipe()
        try:
            fcntl.fcntl(r, fcntl.F_SETOWN, pid)  # SIGIO to the runner
            leak(f"F_SETOWN {pid}")
        except OSError:
            pass
        for nr, args in ((141, (0, pid, 19)), (302, (pid, 7, None, None)),
                         (203, (pid, 8, None)), (144, (pid, 5, None))):
            if libc.syscall(nr, *args) == 0:  # setpriority, prlimit, sched_*
                leak(f"syscall {nr} on {pid} (me {os.getpid()}, parent {os.getppid()})")
    try:
        os.kill(-1, 9)
    except OSError:
        pass
    return None
""")

attack("kill_self")("""
def _attack(numbers, threshold):
    os.kill(os.getpid(), 9)
""")

attack("daemon_rewrite")("""
import time


def _attack(numbers, threshold):
    # (b) a grandchild in its own session rewrites result.json afterwards.
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            info(f"DAEMON {os.getpid()}")  # the test checks it is gone
            os.closerange(0, 1024)
            end = time.time() + 40
            while time.time() < end:
                for d in call_dirs():
                    try:
                        with open(os.path.join(d, "result.json"), "w") as f:
                            f.write(forged())
                    except OSError:
                        pass
                time.sleep(0.001)
        os._exit(0)
    time.sleep(0.05)
    return None
""")

attack("plant_modules")("""
PLANT = '''
import os
for d in %r:
    try:
        with open(os.path.join(d, "result.json"), "w") as f:
            f.write(%r)
    except OSError:
        pass
'''


def _attack(numbers, threshold):
    # (c) a module in the writable call directory, imported later.
    names = ["json", "os", "select", "time", "struct", "ctypes", "random",
             "math", "copy", "typing", "traceback", "linecache", "shutil",
             "sitecustomize", "usercustomize", "encodings", "re", "gc"]
    code = PLANT % (call_dirs(), forged())
    for d in call_dirs():
        for n in names:
            try:
                with open(os.path.join(d, n + ".py"), "w") as f:
                    f.write(code)
                leak(f"planted {d}/{n}.py")
            except OSError:
                pass
    return None
""")

attack("early_result")("""
def _attack(numbers, threshold):
    for d in call_dirs():
        p = os.path.join(d, "result.json")
        try:
            with open(p, "w") as f:
                f.write(forged())
            leak("wrote " + p)
            os.chmod(d, 0o500)
        except OSError:
            pass
    os._exit(0)
""")

attack("exit_before_check", "failed")("""
def _attack(numbers, threshold):
    return None
os._exit(0)
""")

attack("exit_in_call")("""
def _attack(numbers, threshold):
    sys.exit(0)
""")

attack("monkeypatch")("""
import builtins


def _attack(numbers, threshold):
    builtins.AssertionError = type("AssertionError", (Exception,), {})
    builtins.abs = lambda x: 0
    builtins.isinstance = lambda *a: True
    sys.settrace(lambda *a: None)
    sys.excepthook = lambda *a: os._exit(0)
    import atexit
    atexit.register(lambda: os._exit(0))
    return None
""")

attack("fds")("""
def _attack(numbers, threshold):
    # A forged reply before the real one, then everything closed.
    for fd in range(3, 64):
        try:
            os.write(fd, b"\\x00\\x00\\x00\\x07t2:s2:okT")
        except OSError:
            pass
    for fd in range(0, 1024):
        if fd != 2:
            try:
                os.close(fd)
            except OSError:
                pass
    return True
""")

attack("fork_bomb")("""
import time


def _attack(numbers, threshold):
    # Forks until refused (bounded here too, for hosts without limits);
    # each child setsid's and sleeps, so only a thorough kill ends them.
    made = 0
    while made < 300:
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            os.setsid()
            try:
                os.fork()
            except OSError:
                pass
            time.sleep(60)
            os._exit(0)
        made += 1
    return None
""")

attack("huge_output")("""
def _attack(numbers, threshold):
    block = b"x" * (1 << 20)
    for _ in range(64):
        os.write(1, block)
        os.write(2, block)
    return None
""")

attack("huge_answer")("""
def _attack(numbers, threshold):
    return "x" * (20 << 20)
""")

attack("deep_answer")("""
def _attack(numbers, threshold):
    v = []
    for _ in range(100000):
        v = [v]
    return v
""")

attack("deep_frame")("""
def _attack(numbers, threshold):
    # A reply nested past the judge's bound, written by hand.
    payload = b"t2:s2:ok" + b"l1:" * 5000 + b"N"
    os.write(4, len(payload).to_bytes(4, "big") + payload)
    return None
""")

attack("overflow_frame")("""
def _attack(numbers, threshold):
    return None
# Issue 19 item 12: where the load reply belongs, a float the judge's
# decoder overflows on (OverflowError was not caught: a masked sample).
os.write(4, b"\\x00\\x00\\x00\\x0bf0x1p99999;")
""")

attack("surrogate_message")("""
def _attack(numbers, threshold):
    # A lone surrogate in the exception's message reaches result.json's
    # detail; a strict JSON parser refuses its escape (a masked sample).
    raise ValueError("\\ud800 " + chr(0xDFFF))
""")

LOAD_FAILS = {"deep_load_reply"}  # whose detail says "failed to load"

attack("deep_load_reply")("""
def _attack(numbers, threshold):
    return None
# A load failure whose type and message are lists nested to the decoder's
# bound: the judge's message about it must not overflow the stack.
_deep = b"l1:" * 999 + b"N"
_p = b"t3:s5:raise" + _deep + _deep
os.write(4, len(_p).to_bytes(4, "big") + _p)
os._exit(0)
""")

attack("unhashable_answer")("""
def _attack(numbers, threshold):
    # A set holding a list: plain tags, but not a value Python can build.
    p = b"t2:s2:okS1:l0:"
    os.write(4, len(p).to_bytes(4, "big") + p)
    return None
""")

attack("read_dataset")("""
import gzip, json


def _attack(numbers, threshold):
    # The answer key is on the host: look the canonical solution up.
    for path in DATASETS:
        try:
            for line in gzip.open(path, "rt"):
                task = json.loads(line)
                if task["task_id"] == "HumanEval/0":
                    leak("read " + path)
                    ns = {}
                    exec(task["prompt"] + task["canonical_solution"], ns)
                    return ns["has_close_elements"](numbers, threshold)
        except OSError:
            pass
    return None
""")

attack("timeout", "timeout")("""
def _attack(numbers, threshold):
    while True:
        pass
""")

# Honest answers that do odd things must still pass.
attack("correct_with_daemon", "passed", 1.0)("""
import time


def _attack(numbers, threshold):
    if os.fork() == 0:
        os.setsid()
        time.sleep(30)
        os._exit(0)
    return any(abs(a - b) < threshold for i, a in enumerate(numbers)
               for b in numbers[i + 1:])
""")

attack("correct_with_tmpfile", "passed", 1.0)("""
import tempfile


def _attack(numbers, threshold):
    with tempfile.TemporaryFile() as f:
        f.write(b"scratch")
    return any(abs(a - b) < threshold for i, a in enumerate(numbers)
               for b in numbers[i + 1:])
""")


def completions(dataset):
    """name -> (completion, expected status, expected reward)."""
    out = {}
    for name, (text, status, reward) in ATTACKS.items():
        if name == "read_dataset":
            text += f"\nDATASETS = {[dataset]!r}\n"
        out[name] = (text, status, reward)
    return out
