#!/usr/bin/env python3
"""The progress bar and the log share a terminal: with stderr on a
pseudo-terminal, a warning in the middle of a batch (here the one a SIGINT
prints) clears the bar's line, is printed whole on its own line, and the bar
is redrawn after it; stdout stays pure JSONL."""

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time

from e2e_common import Env, check

RUNNER = """import sys, time
time.sleep(0.4)
open(sys.argv[2], "w").write('{"reward": 1.0}')
"""


def main():
    env = Env(sys.argv)
    inp, out = env.path("in.jsonl"), env.path("out.jsonl")
    with open(inp, "w") as f:
        for i in range(8):
            f.write(json.dumps({"id": f"p{i}",
                                "files": {"sandbox_runner.py": RUNNER},
                                "request": {},
                                "config": {"python": env.python}}) + "\n")
    master, slave = pty.openpty()
    proc = subprocess.Popen([env.sv_grade, "--provider-config",
                             env.provider_config, "--input", inp, "--output",
                             out, "--concurrency", "2"],
                            stdin=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    raw = b""
    sent = False
    end = time.monotonic() + 30
    while time.monotonic() < end:
        ready, _, _ = select.select([master], [], [], 0.05)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            raw += chunk
        if not sent and b"ETA" in raw:
            proc.send_signal(signal.SIGINT)
            sent = True
        if proc.poll() is not None and not ready:
            break
    proc.wait(timeout=30)
    os.close(master)
    text = raw.decode(errors="replace")
    check(sent, f"no bar drawn: {text!r}")
    check(proc.returncode == 130, f"exit status {proc.returncode}: {text!r}")
    # The warning is printed over a cleared line, whole, then the bar again.
    m = re.search(r"\r\x1b\[K(\[[^\r\n]*\[warning\][^\r\n]*SIGINT[^\r\n]*)"
                  r"\r?\n\r\[", text)
    check(m is not None, f"warning not above the bar: {text!r}")
    for line in text.replace("\r\n", "\n").split("\n"):
        visible = line.split("\r")[-1].replace("\x1b[K", "")
        check("[warning]" not in visible or visible.startswith("[20"),
              f"warning torn into the bar: {line!r}")
    for line in open(out):
        json.loads(line)
    print("ok")


if __name__ == "__main__":
    main()
