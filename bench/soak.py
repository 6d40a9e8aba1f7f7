#!/usr/bin/env python3
"""Soak: many submissions through sv-grade on the scripted provider with
random faults spread over every state, then the accounting that must hold:
exactly one reply per submission, every created sandbox stopped exactly once.

Usage: bench/soak.py [--count 100000] [--fault-rate 0.1] [--seed N]
                     [--concurrency 1000] [--sv-grade build/apps/sv-grade]
"""
import argparse
import collections
import json
import os
import random
import subprocess
import sys
import tempfile
import time

# Deadlines short enough that hung calls resolve quickly, long enough that
# the scripted provider's instant answers never miss them.
DEADLINES = {"ready_timeout_s": 0.5, "upload_timeout_s": 0.5,
             "download_timeout_s": 0.5, "stop_timeout_s": 0.5,
             "exec_grace_s": 0.5}


CALLS_PER_SUBMISSION = 6
# A delayed answer comes after its 0.5 s deadline, and a delayed create
# still within the 1.0 s (ready + stop deadline) that a verification waits
# for a late sandbox to stop it.
DELAY_MS = 750


def write_jobs(path, count):
    runner = "print('the scripted provider never runs this')\n"
    with open(path, "w") as out:
        for i in range(count):
            out.write(json.dumps({
                "id": f"soak-{i}", "files": {"sandbox_runner.py": runner},
                "request": {"n": i}, "exec_timeout_s": 0.5,
                "config": DEADLINES}) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=100_000)
    ap.add_argument("--fault-rate", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--concurrency", type=int, default=1000)
    ap.add_argument("--sv-grade", default="build/apps/sv-grade")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 32)
    print(f"soak: {args.count} submissions, faults in {args.fault_rate:.0%} of "
          f"them (spread over create, ready, upload, exec, download, stop), "
          f"seed {seed}, concurrency {args.concurrency}", flush=True)

    with tempfile.TemporaryDirectory(prefix="sv-soak-") as tmp:
        jobs, out = os.path.join(tmp, "jobs.jsonl"), os.path.join(tmp, "out.jsonl")
        ledger = os.path.join(tmp, "ledger.jsonl")
        summary = os.path.join(tmp, "summary.json")
        config = os.path.join(tmp, "provider.json")
        write_jobs(jobs, args.count)
        # A verification makes about six provider calls; the provider draws
        # a fault per call.
        per_call = 1 - (1 - args.fault_rate) ** (1 / CALLS_PER_SUBMISSION)
        with open(config, "w") as f:
            json.dump({"scripted": {"fault_rate": per_call, "seed": seed,
                                    "random_delay_ms": DELAY_MS,
                                    "ledger_file": ledger}}, f)
        started = time.monotonic()
        proc = subprocess.run(
            [args.sv_grade, "--input", jobs, "--output", out,
             "--provider-config", config, "--concurrency", str(args.concurrency),
             "--max-creating", str(args.concurrency),
             "--summary-json", summary, "--log-level", "error"],
            stderr=subprocess.PIPE, text=True)
        wall = time.monotonic() - started
        if proc.returncode != 0:
            print(proc.stderr, file=sys.stderr)
            sys.exit(f"sv-grade exited with {proc.returncode}")

        replies = collections.Counter()
        causes = collections.Counter()
        with open(out) as f:
            for line in f:
                o = json.loads(line)
                replies[o["id"]] += 1
                if not o["ok"]:
                    fl = o["failure"]
                    causes[f'{fl["failure_kind"]}/{fl["state"]}/{fl["cause"]}'] += 1
        expected = {f"soak-{i}" for i in range(args.count)}
        lost = len(expected - set(replies))
        duplicated = sum(1 for n in replies.values() if n > 1)
        unknown = len(set(replies) - expected)
        books = [json.loads(l) for l in open(ledger)]
        creates = sum(b["creates"] for b in books)
        stop_calls = sum(b["stop_calls"] for b in books)
        not_once = sum(b["not_stopped_once"] for b in books)
        faults = collections.Counter()
        for b in books:
            faults.update(b["faults"])
        s = json.load(open(summary))

    ok = s["ok"]
    print(f"replies: {sum(replies.values())} for {args.count} submissions; "
          f"lost {lost}, duplicated {duplicated}, unknown {unknown}")
    print(f"sandboxes (provider's ledger): created {creates}, stop calls "
          f"{stop_calls}, created - stopped {creates - stop_calls}, "
          f"not stopped exactly once {not_once}")
    sup = s.get("supervisor", {})
    print(f"sandboxes (supervisor): created {sup.get('sandboxes_created')}, "
          f"stopped {sup.get('sandboxes_stopped')}, stop failures "
          f"{sup.get('stop_failures')}, crashed verifications {sup.get('crashed')}")
    print("faults injected: " + ", ".join(
        f"{k} {v}" for k, v in sorted(faults.items()) if k != "ok"))
    print(f"outcomes: ok {ok}, failed {s['failed']}")
    for name, n in sorted(causes.items()):
        print(f"  {name} {n}")
    mem = s["memory_kib"]
    print(f"rss: start {mem['rss_start'] / 1024:.1f} MiB, end "
          f"{mem['rss_end'] / 1024:.1f} MiB, peak {mem['rss_peak'] / 1024:.1f} MiB")
    print(f"throughput: {s['per_s']:.0f} verifications/s "
          f"({s['wall_s']:.1f} s in sv-grade, {wall:.1f} s with start-up)")
    clean = (lost == 0 and duplicated == 0 and unknown == 0
             and creates == stop_calls and not_once == 0)
    print("RESULT: " + ("0 lost, 0 duplicated, 0 leaked" if clean else "FAILED"))
    sys.exit(0 if clean else 1)


if __name__ == "__main__":
    main()
