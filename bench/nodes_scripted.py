#!/usr/bin/env python3
"""What the middleman costs: the scripted provider (answers in memory, no
processes) behind 3 sv-node processes on loopback versus the same scripted
provider inside sv-grade, alternating in one run. Prints, per run and as
medians: front-side verifications per second and the median per-line total
(create to stop, as the outcome's timings_ms.total), whose difference is the
per-verification overhead of the hop through the nodes.

Usage: bench/nodes_scripted.py --sv-node build/apps/sv-node
           --sv-grade build/apps/sv-grade [--lines 3000] [--rounds 5]
           [--concurrency 48] [--capacity 64]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def start_node(args, tmp, name):
    config = os.path.join(tmp, f"{name}.json")
    with open(config, "w") as f:
        json.dump({"scripted": {}}, f)
    proc = subprocess.Popen([args.sv_node, "--listen", "127.0.0.1:0", "--insecure",
                             "--provider-config", config,
                             "--capacity", str(args.capacity)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
    line = proc.stdout.readline().strip()
    if not line.startswith("listening on "):
        sys.exit(f"{name}: {line!r}")
    return proc, line.split()[-1]


def grade(args, tmp, block):
    config = os.path.join(tmp, "front.json")
    with open(config, "w") as f:
        json.dump(block, f)
    batch = os.path.join(tmp, "batch.jsonl")
    if not os.path.exists(batch):
        with open(batch, "w") as f:
            for i in range(args.lines):
                f.write(json.dumps({"id": f"j{i}",
                                    "files": {"sandbox_runner.py": "pass"},
                                    "request": {}}) + "\n")
    out = os.path.join(tmp, "out.jsonl")
    summary = os.path.join(tmp, "summary.json")
    subprocess.run([args.sv_grade, "--input", batch, "--output", out,
                    "--provider-config", config, "--summary-json", summary,
                    "--concurrency", str(args.concurrency),
                    "--log-level", "error"],
                   check=True, stderr=subprocess.DEVNULL, timeout=600)
    s = json.load(open(summary))
    if s["ok"] != args.lines:
        sys.exit(f"{block}: only {s['ok']} of {args.lines} ok")
    totals = [json.loads(l)["timings_ms"]["total"] for l in open(out)]
    return args.lines / s["wall_s"], statistics.median(totals)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sv-node", required=True)
    ap.add_argument("--sv-grade", required=True)
    ap.add_argument("--lines", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--concurrency", type=int, default=48)
    ap.add_argument("--capacity", type=int, default=64)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sv-bench-nodes-scripted-") as tmp:
        nodes = [start_node(args, tmp, f"s{i}") for i in range(3)]
        try:
            eps = [ep for _, ep in nodes]
            runs = {"in process": [], "3 nodes": []}
            for r in range(args.rounds):
                for name, block in (("in process", {"scripted": {}}),
                                    ("3 nodes", {"nodes": {"endpoints": eps, "insecure": True}})):
                    rate, total = grade(args, tmp, block)
                    runs[name].append((rate, total))
                    print(f"round {r + 1} {name:10}: {rate:8.0f} /s, "
                          f"median total {total:.3f} ms", flush=True)
        finally:
            for p, _ in nodes:
                p.terminate()
                p.wait(timeout=30)
    med = {k: (statistics.median(x[0] for x in v),
               statistics.median(x[1] for x in v)) for k, v in runs.items()}
    for k, (rate, total) in med.items():
        print(f"median {k:10}: {rate:8.0f} verifications/s, "
              f"median total {total:.3f} ms")
    a, b = med["in process"], med["3 nodes"]
    print(f"3 nodes / in process: {b[0] / a[0]:.2f}x the rate; "
          f"+{b[1] - a[1]:.3f} ms per verification (median total)")
    print(f"load: {os.getloadavg()}")


if __name__ == "__main__":
    main()
