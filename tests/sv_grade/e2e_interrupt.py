#!/usr/bin/env python3
"""sv-grade interrupted, cut off and resumed, with real runners on the local
provider: SIGINT mid-batch (in-flight lines finish, summary, exit 130), a
second SIGTERM (cancels at once, exit 143), --resume after each (the union of
the outputs is the batch, each line once; a torn last line is repaired),
`| head -1` (EPIPE), /dev/full and a small tmpfs that fills (exit 1, the
system's reason, no torn line). After each run the sandbox root is empty and
no process of the run is left."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

from e2e_common import Env, check

RUNNER = """import sys, time
time.sleep({sleep})
open(sys.argv[2], "w").write('{{"reward": 1.0, "pad": "{pad}"}}')
"""


def batch(env, n, sleep, pad=0):
    runner = RUNNER.format(sleep=sleep, pad="x" * pad)
    return "".join(json.dumps({"id": f"j{i}",
                               "files": {"sandbox_runner.py": runner},
                               "request": {}, "exec_timeout_s": 30,
                               "config": {"python": env.python}}) + "\n"
                   for i in range(1, n + 1))


def sv_grade(env, args, **kw):
    return subprocess.Popen([env.sv_grade, "--provider-config",
                             env.provider_config, *args],
                            stderr=subprocess.PIPE, text=True, **kw)


def processes_in(root):
    found = []
    for pid in os.listdir("/proc"):
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if cwd.startswith(root):
            found.append((pid, cwd))
    return found


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline") as f:
            return f.read()
    except OSError:
        return ""


def root_is_clean(env):
    root = env.path("sandboxes")
    left = os.listdir(root) if os.path.isdir(root) else []
    check(left == [], f"sandboxes left: {left}")
    with open("/proc/self/mountinfo") as f:
        mounts = [line for line in f if root in line]
    check(mounts == [], f"mounts left: {mounts}")
    left = processes_in(root)
    check(left == [], f"processes left: {left}")


def wait_for_sandboxes(env, deadline=120):
    root = env.path("sandboxes")
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        # A sandbox with files in it: a submission's upload (the warm
        # pool's sandboxes, made at start, are empty).
        names = os.listdir(root) if os.path.isdir(root) else []
        for name in names:
            try:
                if os.listdir(os.path.join(root, name)):
                    return
            except OSError:
                pass  # gone meanwhile
        time.sleep(0.02)
    raise AssertionError("no sandbox started")


def output_lines(path):
    text = open(path).read()
    check(text == "" or text.endswith("\n"), f"{path}: torn last line")
    return [json.loads(line) for line in text.splitlines()]


def finish(proc, timeout=120):
    for name in ("stdin", "stdout"):
        if getattr(proc, name) is not None and getattr(proc, name).closed:
            setattr(proc, name, None)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("sv-grade did not stop")
    return proc.returncode, err


def interrupt_and_resume(env):
    inp, out, summary = (env.path("in.jsonl"), env.path("out.jsonl"),
                         env.path("summary.json"))
    with open(inp, "w") as f:
        f.write(batch(env, 12, 0.5))
    proc = sv_grade(env, ["--input", inp, "--output", out, "--concurrency",
                          "3", "--summary-json", summary])
    wait_for_sandboxes(env)
    proc.send_signal(signal.SIGINT)
    rc, err = finish(proc)
    check(rc == 130, f"SIGINT: exit status {rc}\n{err}")
    check("stopped      by SIGINT" in err, f"summary: {err}")
    s = json.load(open(summary))
    lines = output_lines(out)
    check(s["end"]["signal"] == "SIGINT" and
          s["end"]["lines_read"] == len(lines) and
          s["end"]["not_started"] == 12 - len(lines) and
          0 < len(lines) < 12, f"summary end {s['end']}, {len(lines)} lines")
    check(all(o["ok"] for o in lines), "in-flight lines finished")
    root_is_clean(env)
    # A torn last line (as if the previous run died writing it) is cut off.
    with open(out, "a") as f:
        f.write('{"id":"j1","ok":tr')
    proc = sv_grade(env, ["--input", inp, "--output", out, "--resume",
                          "--concurrency", "6"])
    rc, err = finish(proc)
    check(rc == 0, f"resume: exit status {rc}\n{err}")
    check("torn last line" in err and "resumed" in err, f"resume: {err}")
    lines = output_lines(out)
    check(sorted(o["line"] for o in lines) == list(range(1, 13)),
          f"union: {sorted(o['line'] for o in lines)}")
    check(sorted(o["id"] for o in lines) ==
          sorted(f"j{i}" for i in range(1, 13)), "ids once each")
    root_is_clean(env)


DAEMON = """import subprocess, sys, time
subprocess.Popen(["sleep", "60"], start_new_session=True)
time.sleep(90)
"""


def second_signal_cancels(env, isolation):
    """With isolation none, each runner also leaves a daemon in its own
    session: the cancelled sandboxes' processes must all be gone."""
    inp = env.path(f"slow-{isolation}.jsonl")
    out = env.path(f"slow-out-{isolation}.jsonl")
    runner = DAEMON if isolation == "none" else RUNNER.format(sleep=90, pad="")
    with open(inp, "w") as f:
        for i in range(6):
            f.write(json.dumps({"id": f"d{i}",
                                "files": {"sandbox_runner.py": runner},
                                "request": {}, "exec_timeout_s": 120,
                                "config": {"python": env.python}}) + "\n")
    config = env.path(f"provider-{isolation}.json")
    with open(config, "w") as f:
        json.dump({"local": {"root": env.path("sandboxes"),
                             "isolation": isolation}}, f)
    proc = subprocess.Popen([env.sv_grade, "--provider-config", config,
                             "--input", inp, "--output", out,
                             "--concurrency", "3"],
                            stderr=subprocess.PIPE, text=True)
    wait_for_sandboxes(env)
    if isolation == "none":  # wait for a daemon to exist
        end = time.monotonic() + 120
        while not any(cmdline(pid).startswith("sleep")
                      for pid, _ in processes_in(env.path("sandboxes"))):
            check(time.monotonic() < end, "no daemon started")
            time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    second = time.monotonic()
    rc, err = finish(proc)
    check(rc == 143, f"second SIGTERM: exit status {rc}\n{err}")
    # The runners sleep 90 s: an exit within 60 s of the second signal is
    # one that did not wait for them, however busy the machine is.
    check(time.monotonic() - second < 60, "did not exit at once")
    check("cancelled" in err, f"summary: {err}")
    check(output_lines(out) == [], "no line for cancelled work")
    root_is_clean(env)


def hangup(env):
    inp, out = env.path("hup.jsonl"), env.path("hup-out.jsonl")
    with open(inp, "w") as f:
        f.write(batch(env, 6, 0.3))
    proc = sv_grade(env, ["--input", inp, "--output", out, "--concurrency",
                          "2"])
    wait_for_sandboxes(env)
    proc.send_signal(signal.SIGHUP)
    rc, err = finish(proc)
    check(rc == 129 and "stopped      by SIGHUP" in err, f"SIGHUP: {rc}\n{err}")
    check(0 < len(output_lines(out)) < 6, "SIGHUP: in-flight lines written")
    root_is_clean(env)


def closed_pipe(env):
    proc = subprocess.Popen([env.sv_grade, "--provider-config",
                             env.provider_config, "--input", "-", "--output",
                             "-", "--concurrency", "2"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    proc.stdin.write(batch(env, 8, 0.2))
    proc.stdin.close()
    first = proc.stdout.readline()
    proc.stdout.close()  # as `| head -1` does
    check(json.loads(first)["ok"], "first line")
    rc, err = finish(proc)
    check(rc == 1 and "Broken pipe" in err, f"EPIPE: {rc}\n{err}")
    root_is_clean(env)


def full_output(env):
    proc = sv_grade(env, ["--input", "-", "--output", "/dev/full"],
                    stdin=subprocess.PIPE)
    proc.stdin.write(batch(env, 4, 0))
    proc.stdin.close()
    rc, err = finish(proc)
    check(rc == 1 and "writing output /dev/full failed: No space left on "
          "device" in err, f"/dev/full: {rc}\n{err}")
    root_is_clean(env)


def filling_tmpfs(env):
    mnt = env.path("small")
    os.mkdir(mnt)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs",
                       mnt], capture_output=True).returncode != 0:
        print("skipped the tmpfs case: cannot mount here")
        return
    try:
        out = os.path.join(mnt, "out.jsonl")
        proc = sv_grade(env, ["--input", "-", "--output", out,
                              "--concurrency", "4"], stdin=subprocess.PIPE)
        proc.stdin.write(batch(env, 40, 0, pad=4000))
        proc.stdin.close()
        rc, err = finish(proc)
        check(rc == 1 and "No space left on device" in err,
              f"tmpfs: {rc}\n{err}")
        lines = output_lines(out)
        check(0 < len(lines) < 40, f"tmpfs: {len(lines)} lines")
        root_is_clean(env)
    finally:
        subprocess.run(["umount", mnt])


def main():
    env = Env(sys.argv)
    interrupt_and_resume(env)
    for isolation in ("bwrap", "none"):
        if isolation == "bwrap" and not shutil.which("bwrap"):
            continue
        second_signal_cancels(env, isolation)
    hangup(env)
    closed_pipe(env)
    full_output(env)
    filling_tmpfs(env)
    print("ok")


if __name__ == "__main__":
    main()
