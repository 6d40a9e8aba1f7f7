#!/usr/bin/env python3
"""sv-serve and the remote provider, measured (not a ctest case).

  bench/remote.py verify [--rounds 3] [--seconds 5] [--procs 4] [--threads 4]
      Verifications per second through POST /v1/verify on sv-serve with the
      scripted provider (every call answers at once): procs x threads
      Python clients, each on one keep-alive connection, sending one
      submission after another for --seconds. Medians over rounds.
  bench/remote.py overhead [--rounds 5] [--jobs 40] [--concurrency 4] [--bwrap]
      HumanEval (canonical and broken alternating) through sv-grade on the
      local provider, and through sv-grade with the remote provider to an
      sv-serve on 127.0.0.1 with the same local provider, alternating
      (local remote local remote ...) in one run: the medians of each
      line's total time and of the batch's wall time, and their
      differences (what the remote provider adds per verification).

Run from the repository root after a Release build in build/. Every runner
uses /usr/bin/python3.
"""
import argparse
import http.client
import json
import multiprocessing
import os
import re
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, "build")
SV_SERVE = os.path.join(BUILD, "apps", "sv-serve")
SV_GRADE = os.path.join(BUILD, "apps", "sv-grade")
MAKE_JOBS = os.path.join(ROOT, "examples", "humaneval", "make_jobs.py")
PYTHON = "/usr/bin/python3"


def load():
    return os.getloadavg()[0]


class Server:
    def __init__(self, tmp, block, extra=()):
        cfg = os.path.join(tmp, "serve.json")
        with open(cfg, "w") as f:
            json.dump(block, f)
        self.err = open(os.path.join(tmp, "serve.stderr"), "w")
        self.proc = subprocess.Popen(
            [SV_SERVE, "--listen", "127.0.0.1:0", "--provider-config", cfg,
             "--log-level", "error", *extra],
            stdout=subprocess.PIPE, stderr=self.err, text=True)
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        line = self.proc.stdout.readline() if ready else ""
        m = re.fullmatch(r"listening on 127\.0\.0\.1:(\d+)\n", line)
        if not m:
            raise SystemExit(f"sv-serve did not start: {line!r}")
        self.port = int(m.group(1))

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.err.close()


# -- verify: POST /v1/verify throughput -----------------------------------------

SUBMISSION = json.dumps({
    "id": "bench", "files": {"sandbox_runner.py": ""}, "request": {},
    "exec_timeout_s": 5, "config": {"ready_timeout_s": 5}}).encode()


def client_proc(port, threads, seconds, queue):
    counts = [0] * threads
    errors = [0] * threads
    stop_at = time.monotonic() + seconds

    def run(i):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        while time.monotonic() < stop_at:
            conn.request("POST", "/v1/verify", body=SUBMISSION,
                         headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            r.read()
            if r.status == 200:
                counts[i] += 1
            else:
                errors[i] += 1
        conn.close()

    ts = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    queue.put((sum(counts), sum(errors)))


def verify(args):
    rates = []
    with tempfile.TemporaryDirectory(prefix="sv-bench-remote-") as tmp:
        server = Server(tmp, {"scripted": {}}, ["--threads", "2"])
        try:
            for r in range(args.rounds):
                q = multiprocessing.Queue()
                t0 = time.monotonic()
                ps = [multiprocessing.Process(
                    target=client_proc,
                    args=(server.port, args.threads, args.seconds, q))
                    for _ in range(args.procs)]
                for p in ps:
                    p.start()
                results = [q.get(timeout=args.seconds + 60) for _ in ps]
                for p in ps:
                    p.join(30)
                took = time.monotonic() - t0
                ok = sum(x[0] for x in results)
                bad = sum(x[1] for x in results)
                rates.append(ok / took)
                print(f"round {r + 1}: {ok} verified in {took:.1f} s "
                      f"({ok / took:,.0f}/s), {bad} not 200, load {load():.2f}")
        finally:
            server.stop()
    print(f"POST /v1/verify, scripted provider, {args.procs} x {args.threads} "
          f"keep-alive clients: median {statistics.median(rates):,.0f} "
          f"verifications/s (load {load():.2f})")


# -- overhead: the remote provider against the local one --------------------------

def grade(cfg, jobs, concurrency):
    t0 = time.monotonic()
    proc = subprocess.run(
        [SV_GRADE, "--input", "-", "--output", "-", "--provider-config", cfg,
         "--concurrency", str(concurrency)],
        input="\n".join(jobs) + "\n", capture_output=True, text=True,
        timeout=600)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"sv-grade failed: {proc.stderr[-2000:]}")
    lines = [json.loads(x) for x in proc.stdout.splitlines()]
    bad = [x["id"] for x in lines if not x["ok"]]
    if bad:
        raise SystemExit(f"failures: {bad[:5]}: {proc.stderr[-2000:]}")
    return wall, [x["timings_ms"] for x in lines]


def overhead(args):
    jobs = subprocess.run(
        [PYTHON, MAKE_JOBS, "--python", PYTHON, "--variant", "alternate",
         "--limit", str(args.jobs)],
        check=True, capture_output=True, text=True).stdout.splitlines()
    isolation = {} if args.bwrap else {"isolation": "none"}
    samples = {"local": {"wall": [], "total": [], "parts": []},
               "remote": {"wall": [], "total": [], "parts": []}}
    with tempfile.TemporaryDirectory(prefix="sv-bench-remote-") as tmp:
        local_cfg = os.path.join(tmp, "local.json")
        with open(local_cfg, "w") as f:
            json.dump({"local": {"root": os.path.join(tmp, "l"), **isolation}}, f)
        server = Server(tmp, {"local": {"root": os.path.join(tmp, "s"),
                                        **isolation}})
        remote_cfg = os.path.join(tmp, "remote.json")
        with open(remote_cfg, "w") as f:
            json.dump({"remote": {"url": f"http://127.0.0.1:{server.port}",
                                  "connections": 16}}, f)
        try:
            grade(local_cfg, jobs[:4], 2)  # warm both (page cache, pycache)
            grade(remote_cfg, jobs[:4], 2)
            for r in range(args.rounds):
                for name, cfg in (("local", local_cfg), ("remote", remote_cfg)):
                    wall, timings = grade(cfg, jobs, args.concurrency)
                    s = samples[name]
                    s["wall"].append(wall)
                    s["total"].extend(t["total"] for t in timings)
                    s["parts"].extend(t["total"] - t["exec"] for t in timings)
                    print(f"round {r + 1} {name:6}: {wall:.2f} s wall, "
                          f"median total {statistics.median(t['total'] for t in timings):.1f} ms, "
                          f"load {load():.2f}")
        finally:
            server.stop()
    med = {n: {k: statistics.median(v) for k, v in s.items()}
           for n, s in samples.items()}
    per_job_wall = {n: med[n]["wall"] / len(jobs) * 1000 for n in med}
    print()
    print(f"HumanEval, {len(jobs)} jobs, concurrency {args.concurrency}, "
          f"{args.rounds} rounds alternating, isolation "
          f"{'bwrap' if args.bwrap else 'none'}, load {load():.2f}:")
    print("| provider | batch wall (median) | per line total (median) | "
          "total - exec (median) |")
    print("|---|---|---|---|")
    for n in ("local", "remote"):
        print(f"| {n} | {med[n]['wall']:.2f} s | {med[n]['total']:.1f} ms | "
              f"{med[n]['parts']:.1f} ms |")
    print(f"remote - local: per line total {med['remote']['total'] - med['local']['total']:+.1f} ms, "
          f"total - exec {med['remote']['parts'] - med['local']['parts']:+.1f} ms, "
          f"wall per job {per_job_wall['remote'] - per_job_wall['local']:+.2f} ms "
          f"(ratio of walls {med['remote']['wall'] / med['local']['wall']:.3f})")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="what", required=True)
    v = sub.add_parser("verify")
    v.add_argument("--rounds", type=int, default=3)
    v.add_argument("--seconds", type=float, default=5)
    v.add_argument("--procs", type=int, default=4)
    v.add_argument("--threads", type=int, default=4)
    o = sub.add_parser("overhead")
    o.add_argument("--rounds", type=int, default=5)
    o.add_argument("--jobs", type=int, default=40)
    o.add_argument("--concurrency", type=int, default=4)
    o.add_argument("--bwrap", action="store_true")
    args = ap.parse_args()
    verify(args) if args.what == "verify" else overhead(args)


if __name__ == "__main__":
    main()
