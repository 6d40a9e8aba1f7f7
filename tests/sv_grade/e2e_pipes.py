#!/usr/bin/env python3
"""sv-grade reads an input that is not a regular file once, whatever its
kind: a named FIFO, a shell's process substitution (`<(...)`, a pipe under
/dev/fd) and /dev/stdin each get every line graded; --resume with an output
that is not a regular file is refused (exit 2)."""

import json
import os
import shutil
import subprocess
import sys
import threading

from e2e_common import Env, check, parse_output

N = 3


def lines():
    return "".join(json.dumps({"id": f"p{i}", "files": {"sandbox_runner.py": ""},
                               "request": {}, "exec_timeout_s": 5}) + "\n"
                   for i in range(1, N + 1))


def check_graded(proc, out_text, what):
    check(proc.returncode == 0, f"{what}: exit status {proc.returncode}",
          proc)
    out = parse_output(out_text)
    check(sorted(o["id"] for o in out) == [f"p{i}" for i in range(1, N + 1)]
          and all(o["ok"] for o in out),
          f"{what}: {len(out)} lines graded, not {N}: {out_text[:300]}", proc)


def main():
    env = Env(sys.argv)
    config = env.path("scripted.json")
    with open(config, "w") as f:
        json.dump({"scripted": {}}, f)
    src = env.path("in.jsonl")
    with open(src, "w") as f:
        f.write(lines())
    base = [env.sv_grade, "--provider-config", config, "--output", "-"]

    # A named FIFO, written by another thread.
    fifo = env.path("in.fifo")
    os.mkfifo(fifo)

    def feed():
        with open(fifo, "w") as f:
            f.write(lines())

    t = threading.Thread(target=feed)
    t.start()
    proc = subprocess.run(base + ["--input", fifo], capture_output=True,
                          text=True, timeout=60)
    t.join(10)
    check_graded(proc, proc.stdout, "a named FIFO")

    # /dev/stdin (a pipe).
    proc = subprocess.run(base + ["--input", "/dev/stdin"], input=lines(),
                          capture_output=True, text=True, timeout=60)
    check_graded(proc, proc.stdout, "/dev/stdin")

    # Process substitution, as a shell user writes it.
    bash = shutil.which("bash")
    if bash is not None:
        cmd = " ".join(f"'{a}'" for a in base) + f" --input <(cat '{src}')"
        proc = subprocess.run([bash, "-c", cmd], capture_output=True,
                              text=True, timeout=60)
        check_graded(proc, proc.stdout, "<(cat in.jsonl)")

    # A regular file still works (and is counted through the same fd).
    proc = subprocess.run(base + ["--input", src], capture_output=True,
                          text=True, timeout=60)
    check_graded(proc, proc.stdout, "a regular file")

    # --resume reads the output back: a FIFO there is refused, not waited on.
    out_fifo = env.path("out.fifo")
    os.mkfifo(out_fifo)
    proc = subprocess.run([env.sv_grade, "--provider-config", config,
                           "--input", src, "--output", out_fifo, "--resume"],
                          capture_output=True, text=True, timeout=60)
    check(proc.returncode == 2 and "regular --output" in proc.stderr,
          f"--resume to a FIFO: {proc.returncode} {proc.stderr[-300:]}")
    print(f"ok: a FIFO, /dev/stdin{', <(...)' if bash else ''} and a file: "
          f"{N} of {N} lines graded each; --resume to a FIFO refused")


if __name__ == "__main__":
    main()
