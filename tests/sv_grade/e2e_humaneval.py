#!/usr/bin/env python3
"""sv-grade end to end on 10 HumanEval tasks, half canonical and half broken,
through stdin and stdout: every output line is checked exactly."""

import json
import sys

from e2e_common import Env, OUTPUT_KEYS, STATE_KEYS, check, parse_output


def check_line(out, expected_reward):
    check(set(out) == OUTPUT_KEYS, f"{out['id']}: keys {sorted(out)}")
    check(out["ok"] is True, f"{out['id']}: not ok: {out['failure']}")
    check(out["mask_sample"] is False, f"{out['id']}: masked")
    check(out["failure"] is None, f"{out['id']}: failure not null")
    result = out["result"]
    check(result["reward"] == expected_reward,
          f"{out['id']}: reward {result['reward']}: {result.get('detail')}")
    check(result["passed"] is (expected_reward == 1.0), f"{out['id']}: passed")
    check(result["status"] == ("passed" if expected_reward else "failed"),
          f"{out['id']}: status {result['status']}")
    check(result["task_id"] == out["id"].split("#")[0], f"{out['id']}: task")
    timings = out["timings_ms"]
    check(timings.pop("stop_after_reply", None) is True,
          f"{out['id']}: the stop ran after the reply: {timings}")
    check(set(timings) == STATE_KEYS, f"{out['id']}: timings {timings}")
    check(all(isinstance(v, (int, float)) and v >= 0
              for v in timings.values()), f"{out['id']}: timings {timings}")


def main():
    env = Env(sys.argv)
    jobs = env.jobs("--variant", "alternate", "--limit", "10")
    ids = [json.loads(line)["id"] for line in jobs]
    check(len(ids) == 10 and sum(i.endswith("#broken") for i in ids) == 5,
          f"jobs: {ids}")
    proc = env.grade(["--input", "-", "--output", "-"],
                     stdin="\n".join(jobs) + "\n")
    check(proc.returncode == 0, f"exit status {proc.returncode}", proc)
    outputs = parse_output(proc.stdout)
    check(sorted(o["id"] for o in outputs) == sorted(ids),
          f"ids out: {[o['id'] for o in outputs]}", proc)
    for out in outputs:
        check_line(out, 0.0 if out["id"].endswith("#broken") else 1.0)
    check("lines        10 (ok 10, failed 0)" in proc.stderr,
          "summary missing from stderr", proc)
    check("reward 1.0: 5/10 lines" in proc.stderr, "reward summary", proc)
    print("ok: 10 lines, 5 at reward 1.0, 5 at 0.0")


if __name__ == "__main__":
    main()
