#!/usr/bin/env python3
"""sv-grade's usage errors: non-zero exit and a message naming the culprit."""

import json
import sys

from e2e_common import Env, check


def expect_failure(env, args, needle):
    own = "--provider-config" not in args
    proc = env.grade(args, timeout=60, own_provider=own)
    check(proc.returncode != 0, f"{args}: exit status 0")
    check(needle in proc.stderr, f"{args}: stderr lacks {needle!r}", proc)
    check(proc.stdout == "", f"{args}: wrote to stdout")


def main():
    env = Env(sys.argv)
    out = ["--output", env.path("out.jsonl")]
    expect_failure(env, ["--input", "-", "--output", "-", "--bogus"],
                   "--bogus")
    expect_failure(env, ["--input", env.path("missing.jsonl"), *out],
                   "input " + env.path("missing.jsonl"))
    expect_failure(env, ["--input", "-", *out, "--concurrency", "0"],
                   "--concurrency")
    bad = env.path("bad-provider.json")
    with open(bad, "w") as f:
        json.dump({"local": {"root": 5}}, f)
    expect_failure(env, ["--input", "-", *out, "--provider-config", bad],
                   bad + ": local.root")
    with open(bad, "w") as f:
        json.dump({"nosuch": {}}, f)
    expect_failure(env, ["--input", "-", *out, "--provider-config", bad],
                   bad + ": ")
    expect_failure(env, ["--input", "-", *out, "--work-dir", "../up"],
                   "--work-dir")
    proc = env.grade(["--help"])
    check(proc.returncode == 0 and "--concurrency" in proc.stdout, "--help")
    # An empty batch is fine: no lines in, none out, exit 0.
    proc = env.grade(["--input", "-", "--output", "-"], stdin="")
    check(proc.returncode == 0 and proc.stdout == "", "empty batch", proc)
    print("ok")


if __name__ == "__main__":
    main()
