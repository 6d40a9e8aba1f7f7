"""Shared by the sv-grade end-to-end tests: run the real binary on a batch.

Each test is called as: TEST.py SV_GRADE MAKE_JOBS PYTHON
"""

import json
import os
import subprocess
import sys
import tempfile

OUTPUT_KEYS = {"id", "ok", "mask_sample", "result", "failure", "timings_ms",
               "attempts", "line"}
# The states the caller waited for; the stop runs after the reply by default
# (then "stop" is absent and "stop_after_reply" is true).
STATE_KEYS = {"create", "ready", "upload", "exec", "download", "total"}


class Env:
    def __init__(self, argv):
        if len(argv) != 4:
            sys.exit(f"usage: {argv[0]} SV_GRADE MAKE_JOBS PYTHON")
        self.sv_grade, self.make_jobs, self.python = argv[1:]
        self.tmp = tempfile.TemporaryDirectory(prefix="sv-grade-test-")
        self.dir = self.tmp.name
        # A private sandbox root, so tests never share or litter one.
        self.provider_config = self.path("provider.json")
        with open(self.provider_config, "w") as f:
            json.dump({"local": {"root": self.path("sandboxes")}}, f)

    @property
    def sanitized(self):
        """Whether sv-grade was built with ASan (memory bounds do not hold)."""
        out = subprocess.run(["ldd", self.sv_grade], capture_output=True,
                             text=True).stdout
        return "libasan" in out

    def path(self, name):
        return os.path.join(self.dir, name)

    def jobs(self, *args):
        """Job lines from make_jobs.py, run by the test's interpreter."""
        out = subprocess.run(
            [self.python, self.make_jobs, "--python", self.python, *args],
            check=True, capture_output=True, text=True).stdout
        return out.splitlines()

    def grade(self, args, stdin=None, timeout=120, own_provider=True):
        cmd = [self.sv_grade, *args]
        if own_provider:
            cmd += ["--provider-config", self.provider_config]
        return subprocess.run(cmd, input=stdin, capture_output=True,
                              text=True, timeout=timeout)


def parse_output(text):
    lines = text.splitlines()
    return [json.loads(line) for line in lines]


def check(cond, what, proc=None):
    if not cond:
        if proc is not None:
            print("--- stderr of sv-grade ---\n" + proc.stderr[-4000:])
        raise AssertionError(what)
