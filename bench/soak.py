#!/usr/bin/env python3
"""Soak: many submissions through sv-grade on the scripted provider with
random faults spread over every state, provider crashes (sv-grade restarts
the provider; the replacement shares the crashed one's world of sandboxes)
and sandboxes that answer `starting` before `running`; then the accounting
that must hold, checked against the provider's own ledger: exactly one reply
per submission, every created sandbox stopped exactly once, across restarts.

Usage: bench/soak.py [--count 100000] [--fault-rate 0.1] [--crashes N]
                     [--starting-polls 2] [--seed N] [--concurrency 1000]
                     [--max-creating N]
                     [--sv-grade build/apps/sv-grade]
"""
import argparse
import collections
import json
import os
import random
import shutil
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
    ap.add_argument("--crashes", type=int, default=None,
                    help="provider crashes to expect over the run (drawn at "
                         "random per call; default: one per 5,000 "
                         "submissions, at least 2)")
    ap.add_argument("--starting-polls", type=int, default=2,
                    help="status polls of each sandbox answered 'starting' "
                         "before 'running'")
    ap.add_argument("--concurrency", type=int, default=1000)
    ap.add_argument("--max-creating", type=int, default=None,
                    help="sv-grade's --max-creating (default: the "
                         "concurrency); the ledger's peak of creates in "
                         "flight must stay within it")
    ap.add_argument("--sv-grade", default="build/apps/sv-grade")
    ap.add_argument("--log-level", default="error",
                    help="sv-grade's --log-level")
    ap.add_argument("--keep", default=None, metavar="DIR",
                    help="copy the ledger, sv-grade's output and its stderr "
                         "log into DIR (to trace a leak)")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 32)
    crashes = (args.crashes if args.crashes is not None
               else max(2, args.count // 5000))
    print(f"soak: {args.count} submissions, faults in {args.fault_rate:.0%} of "
          f"them (spread over create, ready, upload, exec, download, stop), "
          f"about {crashes} provider crashes, {args.starting_polls} "
          f"'starting' polls per sandbox, seed {seed}, concurrency "
          f"{args.concurrency}", flush=True)

    with tempfile.TemporaryDirectory(prefix="sv-soak-") as tmp:
        jobs, out = os.path.join(tmp, "jobs.jsonl"), os.path.join(tmp, "out.jsonl")
        ledger = os.path.join(tmp, "ledger.jsonl")
        summary = os.path.join(tmp, "summary.json")
        config = os.path.join(tmp, "provider.json")
        write_jobs(jobs, args.count)
        # A verification makes about six provider calls; the provider draws
        # a fault per call.
        per_call = 1 - (1 - args.fault_rate) ** (1 / CALLS_PER_SUBMISSION)
        max_creating = args.max_creating or args.concurrency
        calls = args.count * (CALLS_PER_SUBMISSION + args.starting_polls)
        with open(config, "w") as f:
            json.dump({"scripted": {"fault_rate": per_call, "seed": seed,
                                    "random_delay_ms": DELAY_MS,
                                    "crash_rate": min(1.0, crashes / calls),
                                    "starting_polls": args.starting_polls,
                                    "ledger_file": ledger}}, f)
        started = time.monotonic()
        proc = subprocess.run(
            [args.sv_grade, "--input", jobs, "--output", out,
             "--provider-config", config, "--concurrency", str(args.concurrency),
             "--max-creating", str(max_creating),
             "--summary-json", summary, "--log-level", args.log_level],
            stderr=subprocess.PIPE, text=True)
        wall = time.monotonic() - started
        if proc.returncode != 0:
            print(proc.stderr, file=sys.stderr)
            sys.exit(f"sv-grade exited with {proc.returncode}")

        replies = collections.Counter()
        causes = collections.Counter()
        lines = 0
        with open(out) as f:
            for line in f:
                lines += 1
                o = json.loads(line)
                replies[o["id"]] += 1
                if not o["ok"]:
                    fl = o["failure"]
                    causes[f'{fl["failure_kind"]}/{fl["state"]}/{fl["cause"]}'] += 1
        expected = {f"soak-{i}" for i in range(args.count)}
        lost = len(expected - set(replies))
        duplicated = sum(n - 1 for n in replies.values() if n > 1)
        unknown = len(set(replies) - expected)
        # Each provider actor appends the world's ledger as it exits: the
        # last line covers them all (the crashed ones and their
        # replacements).
        book = json.loads(open(ledger).read().splitlines()[-1])
        if args.keep:
            os.makedirs(args.keep, exist_ok=True)
            for src in (ledger, out, summary, jobs):
                shutil.copy(src, args.keep)
            with open(os.path.join(args.keep, "stderr.log"), "w") as f:
                f.write(proc.stderr)
        s = json.load(open(summary))

    ok = s["ok"]
    sup = s.get("supervisor", {})
    restarts = sup.get("provider_restarts")
    print(f"replies: {lines} lines for {args.count} submissions; "
          f"lost {lost}, duplicated {duplicated}, unknown {unknown}")
    print(f"sandboxes (provider's ledger): created {book['creates']}, stopped "
          f"{book['stopped']}, still running {book['live']}, stop calls "
          f"{book['stop_calls']} (repeated {book['repeated_stops']}, of them "
          f"after a crash {book['repeated_after_crash']}, unknown "
          f"id {book['unknown_stops']}), creates abandoned past their deadline "
          f"{book['abandoned_creates']}, not stopped exactly once "
          f"{book['not_stopped_once']}")
    for sb in book.get("live_ids", []):
        print(f"  still running: {sb['id']} (created by provider actor "
              f"{sb['created_by']}, {sb['polls']} status polls, "
              f"{'running' if sb['running'] else 'starting'})")
    print(f"provider actors (ledger): spawned {book['actors_spawned']}, "
          f"crashed {book['crashes']}, alive at the end "
          f"{book['actors_live']}; supervisor restarts {restarts}")
    print(f"creates in flight (ledger): peak {book['peak_creating']} "
          f"(--max-creating {max_creating}), at the end "
          f"{book['creating']}; peak starting {book['peak_starting']}")
    print(f"sandboxes (supervisor): created {sup.get('sandboxes_created')}, "
          f"stopped {sup.get('sandboxes_stopped')}, stop failures "
          f"{sup.get('stop_failures')}, crashed verifications {sup.get('crashed')}")
    print("faults injected: " + ", ".join(
        f"{k} {v}" for k, v in sorted(book["faults"].items()) if k != "ok"))
    print(f"outcomes: ok {ok}, failed {s['failed']}")
    for name, n in sorted(causes.items()):
        print(f"  {name} {n}")
    mem = s["memory_kib"]
    print(f"rss: start {mem['rss_start'] / 1024:.1f} MiB, end "
          f"{mem['rss_end'] / 1024:.1f} MiB, peak {mem['rss_peak'] / 1024:.1f} MiB")
    print(f"throughput: {s['per_s']:.0f} verifications/s "
          f"({s['wall_s']:.1f} s in sv-grade, {wall:.1f} s with start-up)")
    checks = {
        "every submission answered": lost == 0 and unknown == 0,
        "no duplicated output line": duplicated == 0 and lines == args.count,
        "created == stopped": book["creates"] == book["stopped"],
        "no sandbox still running": book["live"] == 0,
        # A stop is repeated only when the provider that carried it out
        # crashed (its answer may never have left): harmless, stop is
        # idempotent, and counted apart.
        "no sandbox stopped twice but after a crash":
            book["repeated_stops"] == book["repeated_after_crash"],
        "no stop of an unknown id": book["unknown_stops"] == 0,
        "every provider actor exited": book["actors_live"] == 0,
        "one restart per crash": restarts == book["crashes"]
                                 and book["actors_spawned"] == restarts + 1,
        "no create left in flight": book["creating"] == 0,
        "creates in flight within --max-creating":
            book["peak_creating"] <= max_creating,
    }
    failed = [name for name, good in checks.items() if not good]
    for name in failed:
        print(f"check failed: {name}")
    print("RESULT: " + (f"0 lost, 0 duplicated, 0 leaked, {book['crashes']} "
                        f"provider crashes" if not failed else "FAILED"))
    sys.exit(0 if not failed else 1)


if __name__ == "__main__":
    main()
