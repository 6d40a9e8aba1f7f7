#!/usr/bin/env python3
"""sv-serve's built-in runner for /run_code and /execute (docs/compat.md).

Usage: python3 sandbox_runner.py request.json result.json
(in the call's directory, which holds the source file and the caller's
files). Standard library only.

request.json, mode "run":
  {"mode": "run", "compile": [argv] | null, "run": [argv],
   "compile_timeout": s, "run_timeout": s, "stdin": str | null,
   "fetch_files": [path], "max_output_bytes": n, "max_fetch_bytes": n,
   "max_result_bytes": n}
  In argv, "{python}" stands for this interpreter.
request.json, mode "probe": {"mode": "probe", "programs": [name]}

result.json:
  run:   {"compile_result": R | null, "run_result": R | null,
          "files": {path: base64}}, R = {"status": Finished |
          TimeLimitExceeded | Error, "execution_time", "return_code",
          "stdout", "stderr"}; the run is skipped when the compile did not
          finish with status 0 (SandboxFusion's rule).
         {"missing_program": name}: a program of the language is not here.
         {"refused": why}: the request asks more than the limits allow.
  probe: {"found": {name: path | null}}

The runner is a child subreaper and not dumpable: when a command ends (or
overruns), every process it left behind, setsid'd or not, is killed and
reaped before result.json is written, so nothing of the caller's program can
touch the result. A fault of the runner itself exits non-zero (sv-serve
answers 504: an infrastructure failure, masked, never a wrong answer).
"""

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36


def harden():
    """Subreaper (orphans come to us) and not dumpable (no ptrace of us by
    the caller's processes, which run as our uid)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: orphans are killed by group only


def children():
    """Our children (orphans reparented to us included)."""
    pids = set()
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return pids
    for tid in tasks:
        try:
            with open("/proc/self/task/%s/children" % tid) as f:
                pids.update(int(p) for p in f.read().split())
        except (OSError, ValueError):
            pass
    return pids


def kill_leftovers(pgid):
    """Kills the command's group and every process left behind, then reaps
    them; bounded (a fork bomb is capped by the sandbox's process limit)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
    for _ in range(1000):
        left = children()
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for pid in left:
            try:
                os.waitpid(pid, 0)
            except OSError:
                pass


class Capture(threading.Thread):
    """Reads a pipe to its end, keeping the first `cap` bytes."""

    def __init__(self, pipe, cap):
        super().__init__(daemon=True)
        self.pipe, self.cap = pipe, cap
        self.kept, self.size = [], 0

    def run(self):
        while True:
            try:
                chunk = os.read(self.pipe.fileno(), 65536)
            except OSError:
                break
            if not chunk:
                break
            room = self.cap - self.size
            if room > 0:
                self.kept.append(chunk[:room])
            self.size += len(chunk)
        self.pipe.close()

    def text(self):
        return b"".join(self.kept).decode("utf-8", "replace")


def feed(pipe, data):
    try:
        pipe.write(data)
    except OSError:
        pass  # the program stopped reading: its business
    try:
        pipe.close()
    except OSError:
        pass


def run_command(argv, timeout, stdin, cap):
    """Runs one command to its end or its deadline (SandboxFusion's
    CommandRunResult)."""
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True)
    except OSError as e:
        return {"status": "Error", "execution_time": None,
                "return_code": None, "stdout": None,
                "stderr": "cannot run %s: %s" % (argv[0], e)}
    out = Capture(proc.stdout, cap)
    err = Capture(proc.stderr, cap)
    out.start()
    err.start()
    if stdin is not None:
        threading.Thread(target=feed, daemon=True,
                         args=(proc.stdin, stdin.encode("utf-8"))).start()
    timed_out = False
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
    elapsed = time.monotonic() - start
    if timed_out:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
    proc.wait()  # reaped here, so its status is Popen's, not ours
    kill_leftovers(proc.pid)
    # Every writer is dead now, so the pipes end; the bound is a safety net.
    out.join(5)
    err.join(5)
    return {"status": "TimeLimitExceeded" if timed_out else "Finished",
            "execution_time": elapsed,
            "return_code": None if timed_out else proc.returncode,
            "stdout": out.text(), "stderr": err.text()}


def expand(argv):
    return [sys.executable if a == "{python}" else a for a in argv]


def missing_program(argv):
    """The program of `argv` when it cannot be found here, else None. A
    relative path (./main) is made by the compile: not looked for."""
    name = argv[0]
    if name.startswith("/"):
        return None if os.access(name, os.X_OK) else name
    if "/" in name:
        return None
    return None if shutil.which(name) else name


def fetch(paths, budget):
    """{path: base64} of the regular files in this directory among `paths`
    (missing ones are left out, as SandboxFusion does); a refusal when they
    hold more than `budget` bytes."""
    here = os.path.realpath(".")
    files, total = {}, 0
    for path in paths:
        real = os.path.realpath(path)
        if not real.startswith(here + "/") or not os.path.isfile(real):
            continue
        with open(real, "rb") as f:
            data = f.read(budget - total + 1)
        total += len(data)
        if total > budget:
            return None, ("fetch_files: the files hold more than %d bytes"
                          % budget)
        files[path] = base64.b64encode(data).decode("ascii")
    return files, None


def cut(result, cap):
    for key in ("compile_result", "run_result"):
        r = result.get(key)
        for stream in ("stdout", "stderr"):
            if r and isinstance(r.get(stream), str):
                r[stream] = r[stream][:cap]


def run(req):
    cap = int(req["max_output_bytes"])
    for argv in filter(None, (req.get("compile"), req["run"])):
        name = missing_program(expand(argv))
        if name:
            return {"missing_program": name}
    result = {"compile_result": None, "run_result": None, "files": {}}
    if req.get("compile"):
        result["compile_result"] = run_command(
            expand(req["compile"]), float(req["compile_timeout"]), None, cap)
    c = result["compile_result"]
    if c is None or (c["status"] == "Finished" and c["return_code"] == 0):
        result["run_result"] = run_command(
            expand(req["run"]), float(req["run_timeout"]), req.get("stdin"),
            cap)
    files, refused = fetch(req.get("fetch_files") or [],
                           int(req["max_fetch_bytes"]))
    if refused:
        return {"refused": refused}
    result["files"] = files
    return result


def probe(req):
    return {"found": {name: shutil.which(name) for name in req["programs"]}}


def write_result(path, result, max_bytes):
    """Atomically, over whatever the caller's program left at `path`."""
    text = json.dumps(result, ensure_ascii=False)
    cap = 1 << 20
    while len(text.encode("utf-8")) > max_bytes and cap > 0:
        cap //= 2
        cut(result, cap)
        text = json.dumps(result, ensure_ascii=False)
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    tmp = path + ".%d.tmp" % os.getpid()
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: sandbox_runner.py request.json result.json")
    with open(sys.argv[1], encoding="utf-8") as f:
        req = json.load(f)
    harden()
    if req.get("mode") == "probe":
        result = probe(req)
    else:
        result = run(req)
    write_result(sys.argv[2], result, int(req.get("max_result_bytes", 1 << 24)))


if __name__ == "__main__":
    main()
