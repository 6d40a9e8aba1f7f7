#!/usr/bin/env python3
"""sv-grade on the scripted provider: scripted faults become the exact typed
failures, every other line is graded, the provider's own ledger shows each
created sandbox stopped exactly once, and --summary-json agrees."""

import json
import sys

from e2e_common import Env, check, parse_output

DEADLINES = {"ready_timeout_s": 0.5, "upload_timeout_s": 0.5,
             "download_timeout_s": 0.5, "stop_timeout_s": 0.5,
             "exec_grace_s": 0.5}


def main():
    env = Env(sys.argv)
    ledger, summary = env.path("ledger.jsonl"), env.path("summary.json")
    config = env.path("scripted.json")
    # Calls are counted per operation over the whole batch, and
    # concurrency 1 keeps the order: line 1 gets the create error, line 2
    # (the second exec) hangs past its deadline, line 3's result is garbage.
    with open(config, "w") as f:
        json.dump({"scripted": {
            "steps": {"create": ["error"], "exec": ["ok", "hang"],
                      "download": ["ok", "garbage"]},
            "ledger_file": ledger}}, f)
    lines = [json.dumps({"id": f"s{i}", "files": {"sandbox_runner.py": ""},
                         "request": {}, "exec_timeout_s": 0.5,
                         "config": DEADLINES}) for i in range(1, 7)]
    proc = env.grade(["--input", "-", "--output", "-", "--concurrency", "1",
                      "--provider-config", config, "--summary-json", summary],
                     stdin="\n".join(lines) + "\n", own_provider=False)
    check(proc.returncode == 0, f"exit status {proc.returncode}", proc)
    out = {o["id"]: o for o in parse_output(proc.stdout)}
    check(sorted(out) == [f"s{i}" for i in range(1, 7)], "one line each")

    def failure(i):
        f = out[f"s{i}"]["failure"]
        return f["failure_kind"], f["state"], f["cause"]

    check(failure(1) == ("provider_unavailable", "create", "error"),
          f"s1: {failure(1)}")
    check(failure(3) == ("provider_unavailable", "exec", "timeout"),
          f"s3: {failure(3)}")
    check(failure(4) == ("verifier_error", "parse", "invalid_result"),
          f"s4: {failure(4)}")
    for i in (2, 5, 6):
        o = out[f"s{i}"]
        check(o["ok"] and o["result"] == {"reward": 1.0}, f"s{i}: {o}")
    for o in out.values():
        check(o["mask_sample"] == (not o["ok"]), f"mask_sample: {o}")

    book = json.loads(open(ledger).read().splitlines()[-1])
    check(book["creates"] == 5 and book["stop_calls"] == 5
          and book["not_stopped_once"] == 0, f"ledger: {book}")
    s = json.load(open(summary))
    check(s["lines"] == 6 and s["ok"] == 3 and s["failed"] == 3,
          f"summary: {s}")
    check(s["supervisor"]["sandboxes_created"] == 5
          and s["supervisor"]["sandboxes_stopped"] == 5, f"summary: {s}")
    print("ok")


if __name__ == "__main__":
    main()
