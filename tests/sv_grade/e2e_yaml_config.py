#!/usr/bin/env python3
"""sv-grade with a NeMo Gym-style YAML provider config (one named binding,
scripted provider): the scripted fault takes effect, and malformed YAML is refused naming its line and column."""

import json
import sys

from e2e_common import Env, check, parse_output

DEADLINES = {"ready_timeout_s": 0.5, "upload_timeout_s": 0.5,
             "download_timeout_s": 0.5, "stop_timeout_s": 0.5,
             "exec_grace_s": 0.5}


def expect_usage_error(env, config, needle):
    proc = env.grade(["--input", "-", "--output", env.path("x.jsonl"),
                      "--provider-config", config], stdin="",
                     timeout=60, own_provider=False)
    check(proc.returncode == 2, f"exit status {proc.returncode}", proc)
    check(needle in proc.stderr, f"stderr lacks {needle!r}", proc)


def main():
    env = Env(sys.argv)
    ledger = env.path("ledger.jsonl")
    config = env.path("sandbox.yaml")
    with open(config, "w") as f:
        f.write("# as NeMo Gym writes it\n"
                "sandbox:\n"
                "  default_metadata:\n"
                "    team: grading\n"
                "  scripted:\n"
                "    steps:\n"
                "      create: [error]\n"
                f"    ledger_file: '{ledger}'\n")
    lines = [json.dumps({"id": f"s{i}", "files": {"sandbox_runner.py": ""},
                         "request": {}, "exec_timeout_s": 0.5,
                         "config": DEADLINES}) for i in (1, 2)]
    proc = env.grade(["--input", "-", "--output", "-", "--concurrency", "1",
                      "--provider-config", config],
                     stdin="\n".join(lines) + "\n", own_provider=False)
    check(proc.returncode == 0, f"exit status {proc.returncode}", proc)
    out = {o["id"]: o for o in parse_output(proc.stdout)}
    check(sorted(out) == ["s1", "s2"], "one line each", proc)
    f = out["s1"]["failure"]
    check((f["failure_kind"], f["state"], f["cause"])
          == ("provider_unavailable", "create", "error"), f"s1: {f}")
    check(out["s2"]["ok"] and out["s2"]["result"] == {"reward": 1.0},
          f"s2: {out['s2']}")
    book = json.loads(open(ledger).read().splitlines()[-1])
    check(book["creates"] == 1 and book["not_stopped_once"] == 0,
          f"ledger: {book}")

    bad = env.path("bad.yaml")
    with open(bad, "w") as f:
        f.write("sandbox:\n  scripted: {}\n  scripted: {}\n")
    expect_usage_error(env, bad, bad + ': line 3, column 3: duplicate key '
                       '"scripted" (first at line 2, column 3)')
    with open(bad, "w") as f:
        f.write("sandbox:\n  scripted:\n    stepz: {}\n")
    expect_usage_error(env, bad, bad + ": line 3, column 5: "
                       "sandbox.scripted.stepz: unknown key")
    with open(bad, "w") as f:
        f.write("local: [1, 2\n")
    expect_usage_error(env, bad, bad + ": line ")
    print("ok")


if __name__ == "__main__":
    main()
