#!/usr/bin/env python3
"""SandboxFusion's /run_code on sv-serve against sv-grade, on the same
programs (issue 22 item 7): the built-in runner (apps/sv_serve/sandbox_runner.py)
with the same request either way, the local provider, the same concurrency.
Runs alternate (sv-grade, /run_code, sv-grade, ...); the table shows each
round and the medians, the ratio of rates, the 1-minute load at each start
and the CPU per call of the front's cpuacct cgroup (as root).

  bench/run_code.py [--count 200] [--rounds 3] [--concurrency 4]
  bench/run_code.py --burst 1000 [--concurrency 4] [--max-queue N]

--burst N: N /run_code calls sent at once, each on its own connection, to
one sv-serve (local provider, its --concurrency, its default --max-queue):
how many were answered 200 (checked: Success, the expected stdout), 429 or
504 (checked: masked), anything else or nothing; the time to the last
answer; and sv-serve's counters afterwards (every sandbox stopped).

Run from the repository root after scripts/setup.sh. Interpreter of every
runner and program: /usr/bin/python3 (Debian's; a pyenv shim would add
~140 ms a start).
"""
import argparse
import http.client
import json
import os
import re
import resource
import select
import selectors
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, "build")
PYTHON = "/usr/bin/python3"
RUNNER = os.path.join(ROOT, "apps", "sv_serve", "sandbox_runner.py")
CPUACCT = "/sys/fs/cgroup/cpuacct/sv-bench-run-code"

# Small stdin -> stdout programs, as RL code tasks are.
PROGRAMS = [
    ("n = int(input())\nprint(n * n)\n", lambda i: str(i),
     lambda i: str(i * i)),
    ("xs = sorted(map(int, input().split()))\nprint(*xs)\n",
     lambda i: " ".join(str((i * 7 + k * 13) % 50) for k in range(20)),
     lambda i: " ".join(map(str, sorted((i * 7 + k * 13) % 50
                                        for k in range(20))))),
    ("import sys\ns = sys.stdin.read().strip()\nprint(s[::-1])\n",
     lambda i: f"abc{i}xyz", lambda i: f"abc{i}xyz"[::-1]),
    ("def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n"
     "        a, b = b, a + b\n    return a\nprint(fib(int(input())))\n",
     lambda i: str(i % 90), None),
]


def fib(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def jobs(count):
    out = []
    for i in range(count):
        code, stdin_of, expect_of = PROGRAMS[i % len(PROGRAMS)]
        stdin = stdin_of(i)
        expected = expect_of(i) if expect_of else str(fib(i % 90))
        out.append((code, stdin, expected + "\n"))
    return out


def runner_request(stdin):
    """What sv-serve's make_runner_request writes for python (runner_job.cpp:
    keep the two in step)."""
    return {"mode": "run", "compile": None, "run": ["{python}", "main.py"],
            "compile_timeout": 10, "run_timeout": 10, "stdin": stdin,
            "fetch_files": [], "max_output_bytes": 1 << 20,
            "max_fetch_bytes": 8 << 20, "max_result_bytes": 12 << 20}


def accounted(cmd):
    if not os.path.isdir(CPUACCT):
        return cmd
    return ["/bin/sh", "-c", f'echo $$ > {CPUACCT}/cgroup.procs; exec "$@"',
            "sh"] + cmd


def cpu_used_s():
    try:
        return int(open(f"{CPUACCT}/cpuacct.usage").read()) / 1e9
    except OSError:
        return float("nan")


def sv_grade_round(work, config, work_jobs, concurrency):
    runner = open(RUNNER).read()
    path = os.path.join(work, "jobs.jsonl")
    with open(path, "w") as f:
        for i, (code, stdin, _) in enumerate(work_jobs):
            f.write(json.dumps({
                "id": str(i), "files": {"sandbox_runner.py": runner,
                                        "main.py": code},
                "request": runner_request(stdin), "exec_timeout_s": 25,
                "config": {"ready_timeout_s": 60},
                "metadata": {"front": "run_code", "language": "python"}})
                + "\n")
    summary = os.path.join(work, "summary.json")
    out = os.path.join(work, "out.jsonl")
    cpu0 = cpu_used_s()
    subprocess.run(accounted([
        os.path.join(BUILD, "apps", "sv-grade"), "--input", path, "--output",
        out, "--concurrency", str(concurrency), "--provider-config", config,
        "--summary-json", summary]), check=True, capture_output=True)
    cpu = cpu_used_s() - cpu0
    by_id = {}
    for line in open(out):
        o = json.loads(line)
        by_id[int(o["id"])] = o
    for i, (_, _, expected) in enumerate(work_jobs):
        r = by_id[i]
        if not r["ok"] or r["result"]["run_result"]["stdout"] != expected:
            sys.exit(f"sv-grade, job {i}: {r}")
    return json.load(open(summary))["per_s"], cpu


class Serve:
    def __init__(self, config, concurrency, max_queue=0):
        queue = ["--max-queue", str(max_queue)] if max_queue else []
        self.proc = subprocess.Popen(accounted([
            os.path.join(BUILD, "apps", "sv-serve"), "--listen", "127.0.0.1:0",
            "--provider-config", config, "--concurrency", str(concurrency),
            *queue]),
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        ready, _, _ = select.select([self.proc.stdout], [], [], 120)
        line = self.proc.stdout.readline() if ready else ""
        m = re.fullmatch(r"listening on 127\.0\.0\.1:(\d+)\n", line)
        if not m:
            self.stop()
            sys.exit(f"sv-serve did not start: {line!r}")
        self.port = int(m.group(1))

    def stop(self):
        self.proc.terminate()
        self.proc.wait(120)


def run_code_round(serve, work_jobs, clients):
    """Every job through /run_code, `clients` connections at once (keep-alive);
    the rate from the first request to the last answer."""
    next_job = iter(range(len(work_jobs)))
    lock = threading.Lock()
    errors = []

    def client():
        c = http.client.HTTPConnection("127.0.0.1", serve.port, timeout=120)
        while True:
            with lock:
                i = next(next_job, None)
            if i is None:
                break
            code, stdin, expected = work_jobs[i]
            c.request("POST", "/run_code", json.dumps({
                "code": code, "language": "python", "stdin": stdin}),
                {"Content-Type": "application/json"})
            r = c.getresponse()
            body = json.loads(r.read())
            if r.status != 200 or body["status"] != "Success" or \
                    body["run_result"]["stdout"] != expected:
                errors.append((i, r.status, body))
        c.close()

    cpu0 = cpu_used_s()
    t0 = time.monotonic()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    if errors:
        sys.exit(f"/run_code: {errors[:3]}")
    return len(work_jobs) / wall, cpu_used_s() - cpu0


def metrics(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def burst(serve, work_jobs, deadline_s=1800):
    """Every job as one /run_code call on its own connection, all sent at
    once; the raw answers (b"" for a connection closed without one) and
    the seconds to the last answer."""
    sel = selectors.DefaultSelector()
    conns = {}
    for code, stdin, _ in work_jobs:
        body = json.dumps({"code": code, "language": "python",
                           "stdin": stdin}).encode()
        sock = socket.socket()
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", serve.port))
        conns[sock] = {"out": b"POST /run_code HTTP/1.1\r\nHost: x\r\n"
                       b"Connection: close\r\nContent-Type: "
                       b"application/json\r\nContent-Length: " +
                       str(len(body)).encode() + b"\r\n\r\n" + body,
                       "in": b""}
        sel.register(sock, selectors.EVENT_WRITE)
    t0 = time.monotonic()
    left = len(conns)
    while left and time.monotonic() - t0 < deadline_s:
        for key, events in sel.select(timeout=1):
            sock, c = key.fileobj, conns[key.fileobj]
            try:
                if events & selectors.EVENT_WRITE:
                    c["out"] = c["out"][sock.send(c["out"]):]
                    if not c["out"]:
                        sel.modify(sock, selectors.EVENT_READ)
                    continue
                chunk = sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                chunk = b""
            if chunk:
                c["in"] += chunk
                continue
            left -= 1
            sel.unregister(sock)
    wall = time.monotonic() - t0
    for sock in conns:
        sock.close()
    return [c["in"] for c in conns.values()], wall


def burst_main(args, config):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 2 * args.burst + 200
    if hard != resource.RLIM_INFINITY and hard < want:
        sys.exit(f"RLIMIT_NOFILE hard limit {hard} < {want}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))
    work_jobs = jobs(args.burst)
    serve = Serve(config, args.concurrency, args.max_queue)
    try:
        load = os.getloadavg()[0]
        answers, wall = burst(serve, work_jobs)
        counts = {}
        for raw, (_, _, expected) in zip(answers, work_jobs):
            m = re.match(rb"HTTP/1\.1 (\d{3}) ", raw)
            status = int(m.group(1)) if m else None
            body = json.loads(raw.partition(b"\r\n\r\n")[2] or b"null") \
                if m else None
            if status == 200 and (body["status"] != "Success" or
                                  body["run_result"]["stdout"] != expected):
                status = "200 wrong"
            if status in (429, 504) and not body.get("mask_sample"):
                status = f"{status} unmasked"
            counts[status] = counts.get(status, 0) + 1
        deadline = time.monotonic() + 120
        while True:
            m = metrics(serve.port)
            done = (m.get("sv_sandboxes_live") == 0 and
                    m.get("sv_sandboxes_created_total") ==
                    m.get("sv_sandboxes_stopped_total"))
            if done or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        serve.stop()
    queue = f", --max-queue {args.max_queue}" if args.max_queue else ""
    print(f"{args.burst} /run_code calls at once (local provider, "
          f"--concurrency {args.concurrency}{queue}), load {load:.1f} at the "
          f"start:")
    print(f"  answers: {dict(sorted(counts.items(), key=str))}; the last "
          f"after {wall:.1f} s")
    print(f"  sandboxes created {m.get('sv_sandboxes_created_total'):.0f}, "
          f"stopped {m.get('sv_sandboxes_stopped_total'):.0f}, live "
          f"{m.get('sv_sandboxes_live'):.0f}")
    bad = {k: v for k, v in counts.items() if k not in (200, 429, 504)}
    if bad or not done:
        sys.exit(f"not all answered as they should be: {bad}, "
                 f"sandboxes all stopped: {done}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--burst", type=int, default=0)
    ap.add_argument("--max-queue", type=int, default=0,
                    help="sv-serve's --max-queue for --burst (0: its default)")
    args = ap.parse_args()
    if os.geteuid() == 0:
        os.makedirs(CPUACCT, exist_ok=True)
    work = tempfile.mkdtemp(prefix="sv-bench-run-code-")
    config = os.path.join(work, "provider.json")
    with open(config, "w") as f:
        json.dump({"local": {"python": PYTHON}}, f)
    if args.burst:
        return burst_main(args, config)
    work_jobs = jobs(args.count)
    serve = Serve(config, args.concurrency)
    rows = []
    try:
        # A warm-up of each, unrecorded (page cache, the warm pool's rate).
        sv_grade_round(work, config, work_jobs[:20], args.concurrency)
        run_code_round(serve, work_jobs[:20], 2 * args.concurrency)
        for r in range(args.rounds):
            load_a = os.getloadavg()[0]
            grade, grade_cpu = sv_grade_round(work, config, work_jobs,
                                              args.concurrency)
            load_b = os.getloadavg()[0]
            code, code_cpu = run_code_round(serve, work_jobs,
                                            2 * args.concurrency)
            rows.append((grade, code, load_a, load_b,
                         grade_cpu * 1000 / args.count,
                         code_cpu * 1000 / args.count))
            print(f"round {r + 1}: sv-grade {grade:.1f}/s (load {load_a:.1f}),"
                  f" /run_code {code:.1f}/s (load {load_b:.1f}), ratio "
                  f"{code / grade:.3f}", file=sys.stderr)
    finally:
        serve.stop()
    med = lambda k: statistics.median(x[k] for x in rows)  # noqa: E731
    print(f"{args.count} python programs a round, concurrency "
          f"{args.concurrency} (the /run_code client keeps "
          f"{2 * args.concurrency} calls open), {args.rounds} rounds "
          f"alternating, local provider, medians\n")
    print("| round | sv-grade /s | /run_code /s | ratio | load (grade, code) "
          "| front CPU ms/call (grade, code) |")
    print("|---|---|---|---|---|---|")
    for i, (g, c, la, lb, gc, cc) in enumerate(rows, 1):
        print(f"| {i} | {g:.1f} | {c:.1f} | {c / g:.3f} | {la:.1f}, {lb:.1f} "
              f"| {gc:.1f}, {cc:.1f} |")
    ratios = sorted(x[1] / x[0] for x in rows)
    print(f"| median | {med(0):.1f} | {med(1):.1f} | "
          f"{statistics.median(ratios):.3f} | {med(2):.1f}, {med(3):.1f} | "
          f"{med(4):.1f}, {med(5):.1f} |")


if __name__ == "__main__":
    main()
