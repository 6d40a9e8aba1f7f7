#!/usr/bin/env python3
"""sv-grade on the local provider with runners that write hostile result.json
files: a 100,000-deep one, duplicate keys, bytes after the value. Each is
verifier_error / parse / invalid_result, the rest of the batch is graded, no
sandbox is left behind. A 14 MiB result of 7 million small numbers is graded
within a memory bound (printed: the measurement of issue 9)."""

import json
import os
import sys

from e2e_common import Env, check, parse_output

RUNNER = """import sys
open(sys.argv[2], "w").write({text!r})
"""

WIDE_RUNNER = """import sys
with open(sys.argv[2], "w") as f:
    f.write('{"reward": 1.0, "xs": [')
    f.write("1," * (7_000_000 - 1))
    f.write("1]}")
"""


def job(env, id_, runner):
    return json.dumps({"id": id_, "files": {"sandbox_runner.py": runner},
                       "request": {}, "exec_timeout_s": 30,
                       "config": {"python": env.python}})


def main():
    env = Env(sys.argv)
    deep = "[" * 100000 + "]" * 100000
    cases = {
        "deep": ("nested deeper than 256 levels", deep),
        "deep_obj": ("nested deeper than 256 levels",
                     '{"a":' * 100000 + "1" + "}" * 100000),
        "dup": ('duplicate key "reward"', '{"reward": 1, "reward": 0}'),
        "junk": ("a NUL byte at offset 15", '{"reward": 1.0}\0junk'),
        "after": ("expected end of input", '{"reward": 1.0} {}'),
    }
    lines = [job(env, "good1", RUNNER.format(text='{"reward": 1.0}'))]
    for id_, (_, text) in cases.items():
        lines.append(job(env, id_, RUNNER.format(text=text)))
    lines.append(job(env, "good2", RUNNER.format(text='{"reward": 0.5}')))
    proc = env.grade(["--input", "-", "--output", "-", "--concurrency", "2"],
                     stdin="\n".join(lines) + "\n")
    check(proc.returncode == 0, f"exit status {proc.returncode}", proc)
    out = {o["id"]: o for o in parse_output(proc.stdout)}
    check(sorted(out) == sorted(["good1", "good2", *cases]),
          f"one line each: {sorted(out)}", proc)
    check(out["good1"]["result"] == {"reward": 1.0}, "good1")
    check(out["good2"]["result"] == {"reward": 0.5}, "good2")
    for id_, (needle, _) in cases.items():
        f = out[id_]["failure"]
        check((f["failure_kind"], f["state"], f["cause"]) ==
              ("verifier_error", "parse", "invalid_result"), f"{id_}: {f}")
        check(needle in f["message"] and len(f["message"]) < 600,
              f"{id_}: message {f['message'][:300]!r}")
    root = env.path("sandboxes")
    check(not os.path.exists(root) or os.listdir(root) == [],
          f"sandboxes left: {os.listdir(root)}")

    # The wide result: graded, and sv-grade's peak RSS stays within a small
    # multiple of the text (the summary reports VmHWM).
    summary = env.path("summary.json")
    with open(env.path("config.json"), "w") as f:
        json.dump({"local": {"root": root,
                             "max_download_bytes": 32 << 20}}, f)
    proc = env.grade(["--input", "-", "--output", env.path("wide.jsonl"),
                      "--provider-config", env.path("config.json"),
                      "--summary-json", summary],
                     stdin=job(env, "wide", WIDE_RUNNER) + "\n",
                     own_provider=False)
    check(proc.returncode == 0, f"exit status {proc.returncode}", proc)
    with open(env.path("wide.jsonl")) as f:
        wide = json.loads(f.read())
    check(wide["ok"] and wide["result"]["reward"] == 1.0
          and len(wide["result"]["xs"]) == 7_000_000, "wide result")
    memory = json.load(open(summary))["memory_kib"]
    size_mib = 14.0
    peak_mib = memory["rss_peak"] / 1024
    start_mib = memory["rss_start"] / 1024
    print(f"wide result {size_mib} MiB: sv-grade RSS start {start_mib:.1f}"
          f" MiB, peak {peak_mib:.1f} MiB, growth {peak_mib - start_mib:.1f}"
          " MiB")
    check(peak_mib - start_mib <= 3 * size_mib or env.sanitized,
          f"peak RSS growth {peak_mib - start_mib:.1f} MiB > 3x 14 MiB")
    print("ok")


if __name__ == "__main__":
    main()
