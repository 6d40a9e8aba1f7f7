#!/usr/bin/env python3
"""sv-grade end to end with binary files and absolute work dirs (issue 21,
items 3 and 4), on the local provider:

- a file given as {"base64": ...} with NUL and 0xFF bytes reaches the
  runner byte for byte; a bad base64 value is invalid_request naming it;
- work_dir "/sandbox" (the seed's) and, under bwrap as root, "/tmp/work"
  are graded, each call in its own subdirectory; a directory the sandbox
  cannot write ("/usr/x") is invalid_request naming it; "/sandbox/../x" is
  refused before any sandbox.
"""

import base64
import json
import os
import shutil
import sys

from e2e_common import Env, check, parse_output

BYTES = b"\x00\xff\x00binary\xfe\n\x80" + bytes(range(256))

# Reads fixture.bin and reports its bytes and where it ran.
RUNNER = """import json, os, sys
data = open('fixture.bin', 'rb').read()
json.dump({'reward': 1.0, 'hex': data.hex(), 'cwd': os.getcwd()},
          open(sys.argv[2], 'w'))
"""


def line(id_, work_dir=None, files=None, python="python3"):
    job = {"id": id_, "request": {}, "exec_timeout_s": 20,
           "config": {"python": python, "ready_timeout_s": 30},
           "files": files or {
               "sandbox_runner.py": RUNNER,
               "fixture.bin": {"base64": base64.b64encode(BYTES).decode()}}}
    if work_dir is not None:
        job["work_dir"] = work_dir
    return json.dumps(job)


def main():
    env = Env(sys.argv)
    isolated = os.geteuid() == 0 and shutil.which("bwrap") is not None
    lines = [
        line("rel"),
        line("sandbox", "/sandbox"),
        line("sandbox-sub", "/sandbox/calls/deep"),
        line("tmp", "/tmp/work"),
        line("usr", "/usr/x"),
        line("dotdot", "/sandbox/../x"),
        line("badb64", files={"sandbox_runner.py": RUNNER,
                              "fixture.bin": {"base64": "AAA"}}),
        line("badform", files={"sandbox_runner.py": RUNNER,
                               "fixture.bin": {"bytes": "AAA="}}),
    ]
    proc = env.grade(["--input", "-", "--output", "-", "--concurrency", "4"],
                     stdin="\n".join(lines) + "\n")
    check(proc.returncode == 0, f"exit status {proc.returncode}", proc)
    out = {o["id"]: o for o in parse_output(proc.stdout)}
    check(len(out) == len(lines), f"{len(out)} lines out", proc)

    cwds = []
    graded = ["rel", "sandbox", "sandbox-sub"] + (["tmp"] if isolated else [])
    for id_ in graded:
        o = out[id_]
        check(o["ok"] and o["result"]["hex"] == BYTES.hex(),
              f"{id_}: {o}", proc)
        cwds.append(o["result"]["cwd"])
    if isolated:
        # The sandbox's own view: each call in a subdirectory of work_dir.
        check(os.path.dirname(out["sandbox"]["result"]["cwd"]) == "/sandbox",
              f"sandbox: cwd {out['sandbox']['result']['cwd']}")
        check(os.path.dirname(out["sandbox-sub"]["result"]["cwd"]) ==
              "/sandbox/calls/deep", "sandbox-sub: cwd")
        check(os.path.dirname(out["tmp"]["result"]["cwd"]) == "/tmp/work",
              f"tmp: cwd {out['tmp']['result']['cwd']}")
    check(len(set(cwds)) == len(cwds), f"call directories collide: {cwds}")

    def refused(id_, state, needle):
        f = out[id_]["failure"]
        check(not out[id_]["ok"] and out[id_]["mask_sample"] and
              (f["failure_kind"], f["state"], f["cause"]) ==
              ("invalid_request", state, "invalid_request") and
              needle in f["message"], f"{id_}: {out[id_]}", proc)

    refused("usr", "upload",
            'work_dir "/usr/x": "/usr/x/')
    check("is not writable in the sandbox" in out["usr"]["failure"]["message"],
          f"usr: {out['usr']['failure']['message']}")
    if not isolated:
        refused("tmp", "upload", 'work_dir "/tmp/work": "/tmp/work/')
    refused("dotdot", "validate", 'work_dir: "/sandbox/../x" escapes the '
            'sandbox')
    refused("badb64", "validate",
            "files.fixture.bin.base64: not base64: its length is not a "
            "multiple of 4")
    refused("badform", "validate", 'files.fixture.bin: expected a string '
            '(text) or {"base64": "..."} (bytes)')
    print(f"ok: {len(graded)} graded with binary files "
          f"({'bwrap' if isolated else 'no isolation'}), 5 refused")


if __name__ == "__main__":
    main()
