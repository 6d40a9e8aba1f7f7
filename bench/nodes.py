#!/usr/bin/env python3
"""Scaling of distributed grading: 1 vs 3 sv-node processes on loopback,
a runner that sleeps 1 s, isolation none, 4 slots per node, sv-grade as the
front (--concurrency = the nodes' capacity). Prints verifications per second
for each and the ratio (ideal 3.0; the issue asks >= 2.7).

Usage: bench/nodes.py --sv-node build/apps/sv-node --sv-grade build/apps/sv-grade
                      [--lines 48] [--sleep 1] [--slots 4]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

RUNNER = """import sys, time
time.sleep({sleep})
open(sys.argv[2], "w").write('{{"reward": 1.0}}')
"""


def start_node(args, tmp, name):
    config = os.path.join(tmp, f"{name}.json")
    with open(config, "w") as f:
        json.dump({"local": {"isolation": "none",
                             "root": os.path.join(tmp, f"root-{name}")}}, f)
    proc = subprocess.Popen([args.sv_node, "--listen", "127.0.0.1:0", "--insecure",
                             "--provider-config", config,
                             "--capacity", str(args.slots)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
    line = proc.stdout.readline().strip()
    if not line.startswith("listening on "):
        sys.exit(f"{name}: {line!r}")
    return proc, line.split()[-1]


def run(args, tmp, nodes):
    procs = [start_node(args, tmp, f"b{nodes}-{i}") for i in range(nodes)]
    try:
        config = os.path.join(tmp, "front.json")
        with open(config, "w") as f:
            json.dump({"nodes": {"endpoints": [ep for _, ep in procs],
                                 "insecure": True}}, f)
        runner = RUNNER.format(sleep=args.sleep)
        batch = os.path.join(tmp, "batch.jsonl")
        with open(batch, "w") as f:
            for i in range(args.lines):
                f.write(json.dumps({"id": f"j{i}",
                                    "files": {"sandbox_runner.py": runner},
                                    "request": {},
                                    "config": {"python": args.python}})
                        + "\n")
        summary = os.path.join(tmp, "summary.json")
        t0 = time.monotonic()
        subprocess.run([args.sv_grade, "--input", batch, "--output",
                        os.devnull, "--provider-config", config,
                        "--summary-json", summary, "--log-level", "warn"],
                       check=True, stderr=subprocess.DEVNULL, timeout=600)
        wall = time.monotonic() - t0
        s = json.load(open(summary))
        if s["ok"] != args.lines:
            sys.exit(f"{nodes} nodes: only {s['ok']} of {args.lines} ok")
        return args.lines / wall, s["wall_s"]
    finally:
        for p, _ in procs:
            p.terminate()
            p.wait(timeout=30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sv-node", required=True)
    ap.add_argument("--sv-grade", required=True)
    ap.add_argument("--lines", type=int, default=48)
    ap.add_argument("--sleep", type=float, default=1.0)
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--python", default="/usr/bin/python3",
                    help="the runner's interpreter (a pyenv shim costs ~140 ms a start)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sv-bench-nodes-") as tmp:
        one, one_wall = run(args, tmp, 1)
        three, three_wall = run(args, tmp, 3)
    print(f"1 node : {one:.2f} verifications/s (sv-grade wall {one_wall:.2f} s)")
    print(f"3 nodes: {three:.2f} verifications/s (sv-grade wall "
          f"{three_wall:.2f} s)")
    print(f"ratio  : {three / one:.2f} (ideal 3.00)")


if __name__ == "__main__":
    main()
