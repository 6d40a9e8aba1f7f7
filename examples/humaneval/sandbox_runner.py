#!/usr/bin/env python3
"""Grades one HumanEval completion inside a sandbox.

Usage: python sandbox_runner.py request.json result.json

request.json: {"task_id", "prompt", "completion", "test", "entry_point",
"timeout_s"}. It is deleted before the submission runs, so the submission
cannot read the tests from disk. The program prompt + completion + test +
check(entry_point) runs in a child process in its own session (stdin and
stdout /dev/null) under timeout_s; then the whole process group is killed, so
nothing the submission started can rewrite result.json afterwards.

result.json: {"reward", "passed", "status": passed|failed|timeout, "task_id",
"detail": tail of the child's stderr}. A wrong answer, an exception or a
timeout is a normal result (exit status 0); only a bad request or a fault of
this runner exits non-zero.

Standard library only, and no subprocess/signal/selectors imports: together
they add ~15 ms to every start.
"""

import fcntl
import json
import os
import select
import sys
import time

SIGKILL = 9  # Linux's number; importing `signal` costs ~5 ms
DETAIL_CHARS = 1000
TAIL_BYTES = 4 * DETAIL_CHARS
DRAIN_S = 1.0  # how long stderr may take to reach EOF once the group is dead

# Runs in the child. The program arrives on fd 3 behind a random nonce line;
# the nonce goes back on fd 4 only if the program ran to its end, so a
# submission that calls exit(0) or os._exit(0) before check() has run fails.
# The names live in a function's frame, not in a module the program sees.
BOOTSTRAP = """\
import os, sys
def _bootstrap():
    with open(3, 'rb') as f:
        nonce, _, src = f.read().partition(b'\\n')
    main = type(sys)('__main__')
    sys.modules['__main__'] = main
    exec(compile(src, '<submission>', 'exec'), main.__dict__)
    os.write(4, nonce)
_bootstrap()
"""


class BadRequest(Exception):
    pass


def read_request(path):
    try:
        with open(path, encoding="utf-8") as f:
            req = json.load(f)
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


def program_text(req):
    return (req["prompt"] + req["completion"] + "\n" + req["test"] + "\n"
            + f"check({req['entry_point']})\n")


def pipe_above_4():
    """A pipe whose ends are above fd 4, so the child's dup2s cannot clash."""
    ends = []
    for fd in os.pipe():
        ends.append(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 5))
        os.close(fd)
    return ends


def spawn(prog_r, err_w, done_w):
    """Starts the bootstrap in its own session: pid == its process group."""
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
        (os.POSIX_SPAWN_DUP2, err_w, 2),
        (os.POSIX_SPAWN_DUP2, prog_r, 3),
        (os.POSIX_SPAWN_DUP2, done_w, 4),
    ]
    argv = [sys.executable, "-c", BOOTSTRAP]
    return os.posix_spawn(sys.executable, argv, os.environ,
                          file_actions=actions, setsid=True)


def send_all(fd, data):
    try:
        while data:  # the child reads all of it before running anything
            data = data[os.write(fd, data):]
    except BrokenPipeError:
        pass  # it died at start; its exit status tells
    finally:
        os.close(fd)


def watch(pid, err_r, deadline):
    """Reads stderr until the child exits or the deadline passes.

    Returns (wait status, or None at the deadline; stderr tail). Waits on a
    pidfd so the exit is seen at once; without one, polls every 10 ms.
    """
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    poller = select.poll()
    poller.register(err_r, select.POLLIN)
    if pidfd is not None:
        poller.register(pidfd, select.POLLIN)
    tail, status = b"", None
    while status is None:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        wait_s = left if pidfd is not None else min(left, 0.01)
        for fd, _ in poller.poll(wait_s * 1000):
            if fd == err_r:
                chunk = os.read(err_r, 65536)
                if chunk:
                    tail = (tail + chunk)[-TAIL_BYTES:]
                else:
                    poller.unregister(err_r)  # EOF; the exit follows
        done, wait_status = os.waitpid(pid, os.WNOHANG)
        if done:
            status = wait_status
    if pidfd is not None:
        os.close(pidfd)
    return status, tail


def drain(fd, tail, deadline):
    """The rest of a pipe whose writers were killed, until EOF or deadline."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not poller.poll(left * 1000):
            return tail
        chunk = os.read(fd, 65536)
        if not chunk:
            return tail
        tail = (tail + chunk)[-TAIL_BYTES:]


def kill_group(pid):
    try:
        os.killpg(pid, SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone already


def read_nonce(fd):
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return os.read(fd, 64) if poller.poll(0) else b""


def run_program(program, timeout):
    """Runs the program; returns (status word, stderr tail as text)."""
    nonce = os.urandom(16).hex().encode()
    prog_r, prog_w = pipe_above_4()
    err_r, err_w = pipe_above_4()
    done_r, done_w = pipe_above_4()
    try:
        pid = spawn(prog_r, err_w, done_w)
    finally:
        for fd in (prog_r, err_w, done_w):
            os.close(fd)
    send_all(prog_w, nonce + b"\n" + program.encode("utf-8"))
    status, tail = watch(pid, err_r, time.monotonic() + timeout)
    # Whatever the program started dies with it, before result.json exists.
    kill_group(pid)
    timed_out = status is None
    if timed_out:
        status = os.waitpid(pid, 0)[1]
    tail = drain(err_r, tail, time.monotonic() + DRAIN_S)
    ran_to_end = read_nonce(done_r) == nonce
    os.close(err_r)
    os.close(done_r)
    detail = tail.decode("utf-8", "replace")[-DETAIL_CHARS:]
    if timed_out:
        return "timeout", f"timed out after {timeout:g} s\n{detail}".strip()
    if ran_to_end and os.waitstatus_to_exitcode(status) == 0:
        return "passed", detail
    if not ran_to_end and not detail:
        code = os.waitstatus_to_exitcode(status)
        detail = f"exited with status {code} before the tests completed"
    return "failed", detail


def write_result(path, result):
    """Atomically, replacing whatever the submission may have put there."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(result, f)
    try:
        os.replace(tmp, path)
    except IsADirectoryError:
        import shutil
        shutil.rmtree(path)
        os.replace(tmp, path)


def main(argv):
    if len(argv) != 3:
        print("usage: sandbox_runner.py request.json result.json",
              file=sys.stderr)
        return 2
    try:
        req = read_request(argv[1])
    except (BadRequest, ValueError, OSError) as e:
        print(f"sandbox_runner: bad {argv[1]}: {e}", file=sys.stderr)
        return 2
    status, detail = run_program(program_text(req), float(req.get(
        "timeout_s", 10)))
    passed = status == "passed"
    write_result(argv[2], {
        "reward": 1.0 if passed else 0.0,
        "passed": passed,
        "status": status,
        "task_id": req.get("task_id"),
        "detail": detail,
    })
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
