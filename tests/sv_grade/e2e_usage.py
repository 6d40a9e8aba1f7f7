#!/usr/bin/env python3
"""sv-grade's usage errors: non-zero exit and a message naming the culprit."""

import json
import os
import sys

from e2e_common import Env, check


def expect_failure(env, args, needle, status=2):
    own = "--provider-config" not in args
    proc = env.grade(args, timeout=60, own_provider=own)
    check(proc.returncode == status,
          f"{args}: exit status {proc.returncode}, not {status}", proc)
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
                   bad + ": line 1, column 12: local.root")
    with open(bad, "w") as f:
        json.dump({"nosuch": {}}, f)
    expect_failure(env, ["--input", "-", *out, "--provider-config", bad],
                   bad + ": ")
    expect_failure(env, ["--input", "-", *out, "--work-dir", "../up"],
                   "--work-dir")
    # A deep provider config is refused, not a crash.
    with open(bad, "w") as f:
        f.write('{"local": {"x": ' + "[" * 100000 + "]" * 100000 + "}}")
    expect_failure(env, ["--input", "-", *out, "--provider-config", bad],
                   "nested deeper than 256 levels")
    with open(bad, "w") as f:
        f.write('{"local": {}, "local": {}}')
    expect_failure(env, ["--input", "-", *out, "--provider-config", bad],
                   'duplicate key "local"')
    # The same file for input and output, under any path: refused before
    # anything is opened for writing; the input is intact.
    src = env.path("in.jsonl")
    with open(src, "w") as f:
        f.write("{}\n")
    os.symlink(src, env.path("via-symlink"))
    os.link(src, env.path("via-hardlink"))
    for inp, outp in ((src, src), (src, env.path("via-symlink")),
                      (env.path("via-hardlink"), src)):
        expect_failure(env, ["--input", inp, "--output", outp],
                       "is the input file")
    check(open(src).read() == "{}\n", "the input was changed")
    expect_failure(env, ["--input", "-", "--output", "-", "--resume"],
                   "--resume needs --output FILE")
    expect_failure(env, ["--input", "-", *out, "--summary-json",
                         env.path("no/such/dir/s.json")],
                   "No such file or directory", status=1)
    proc = env.grade(["--version"])
    check(proc.returncode == 0 and proc.stdout.startswith("sv-grade "),
          f"--version: {proc.stdout!r}", proc)
    proc = env.grade(["--help"])
    check(proc.returncode == 0 and "--concurrency" in proc.stdout, "--help")
    # An empty batch is fine: no lines in, none out, exit 0.
    proc = env.grade(["--input", "-", "--output", "-"], stdin="")
    check(proc.returncode == 0 and proc.stdout == "", "empty batch", proc)
    print("ok")


if __name__ == "__main__":
    main()
