#!/usr/bin/env python3
"""Turns HumanEval into sv-grade input: one JSONL submission per task.

  make_jobs.py [--variant canonical|broken|alternate] [--limit N]
               [--exec-timeout S] [--test-timeout T] [--python PY]
               [--dataset FILE] [--output FILE]

canonical: the reference solution (reward 1.0). broken: a body that raises
(reward 0.0). alternate: canonical and broken by turns (for benchmarks).
"""

import argparse
import gzip
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DATASET = os.path.join(HERE, "data", "HumanEval.jsonl.gz")
RUNNER = os.path.join(HERE, "sandbox_runner.py")
BROKEN = "    raise NotImplementedError('broken on purpose')\n"


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variant", default="canonical",
                   choices=["canonical", "broken", "alternate"])
    p.add_argument("--limit", type=int, default=None,
                   help="only the first N tasks")
    p.add_argument("--exec-timeout", type=float, default=30.0,
                   help="exec_timeout_s of each job: the runner's deadline "
                        "(default 30)")
    p.add_argument("--test-timeout", type=float, default=None,
                   help="timeout_s of the tests inside the runner; must be "
                        "below --exec-timeout (default min(10, S/2))")
    p.add_argument("--python", default=None,
                   help="interpreter for config.python (default: the "
                        "provider's)")
    p.add_argument("--dataset", default=DEFAULT_DATASET)
    p.add_argument("--output", default="-", help="file, or - for stdout")
    args = p.parse_args(argv)
    if args.exec_timeout <= 0:
        p.error("--exec-timeout must be positive")
    if args.test_timeout is None:
        args.test_timeout = min(10.0, args.exec_timeout / 2)
    if not 0 < args.test_timeout < args.exec_timeout:
        p.error("--test-timeout must be in (0, --exec-timeout)")
    if args.limit is not None and args.limit < 0:
        p.error("--limit must not be negative")
    return args


def load_tasks(path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def make_job(task, variant, runner, args):
    completion = task["canonical_solution"] if variant == "canonical" \
        else BROKEN
    job = {
        "id": f"{task['task_id']}#{variant}",
        "files": {"sandbox_runner.py": runner},
        "request": {
            "task_id": task["task_id"],
            "prompt": task["prompt"],
            "completion": completion,
            "test": task["test"],
            "entry_point": task["entry_point"],
            "timeout_s": args.test_timeout,
        },
        "exec_timeout_s": args.exec_timeout,
        "metadata": {"task": "humaneval"},
    }
    if args.python:
        job["config"] = {"python": args.python}
    return job


def main(argv):
    args = parse_args(argv)
    tasks = load_tasks(args.dataset)[:args.limit]
    with open(RUNNER, encoding="utf-8") as f:
        runner = f.read()
    out = sys.stdout if args.output == "-" else \
        open(args.output, "w", encoding="utf-8")
    with out:
        for i, task in enumerate(tasks):
            variant = args.variant
            if variant == "alternate":
                variant = "canonical" if i % 2 == 0 else "broken"
            out.write(json.dumps(make_job(task, variant, runner, args)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
