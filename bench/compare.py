#!/usr/bin/env python3
"""Side-by-side benchmarks: every compared program runs in the same session,
alternating (A B A B ...), and the table shows medians and ratios.

  bench/compare.py orchestration [--rounds 3] [--count 100000]
      sv-bench-orchestration vs py_baseline.py --provider null, at
      concurrency 1,000 and 100,000: verifications/s, peak RSS, KiB per
      in-flight verification.
  bench/compare.py humaneval [--rounds 3] [--bwrap] [--baseline SV_GRADE]
      HumanEval (canonical and broken completions alternating, 164 jobs)
      through the floor (floor.sh), sv-grade on the local provider
      (isolation none, and bwrap with --bwrap) and py_baseline.py
      --provider local, at concurrency 2 and 4; plus sv-grade's
      orchestration overhead (total - exec) p50/p99 at concurrency 4.
      --warm-python adds sv-grade (bwrap) with `warm_python` on;
      --no-peer leaves the asyncio peer out.
      --baseline adds another sv-grade binary (a copy of an earlier build:
      "before") in the same alternation, each mode; the load column is the
      median 1-minute load average at the start of each program's runs.

Run from the repository root after scripts/setup.sh. Interpreter for every
runner: /usr/bin/python3 (Debian's; a pyenv shim would add ~140 ms a start).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, "build")
PEERS = os.path.join(ROOT, "bench", "peers")
PYTHON = "/usr/bin/python3"


# As root, every program runs in a cpuacct cgroup of its own: the CPU it
# and all its processes (sandboxes included) used, which a shared machine's
# load changes much less than wall time.
CPUACCT = "/sys/fs/cgroup/cpuacct/sv-compare"


def accounted(cmd):
    """`cmd` joining the cpuacct cgroup first (when there is one)."""
    if not os.path.isdir(CPUACCT):
        return cmd
    return ["/bin/sh", "-c", f'echo $$ > {CPUACCT}/cgroup.procs; exec "$@"',
            "sh"] + cmd


def cpu_used_s():
    try:
        return int(open(f"{CPUACCT}/cpuacct.usage").read()) / 1e9
    except OSError:
        return float("nan")


def run_json(cmd, **kw):
    """Runs a command that prints one JSON line last; returns it parsed."""
    out = subprocess.run(accounted(cmd), check=True, capture_output=True,
                         text=True, **kw)
    return json.loads(out.stdout.strip().splitlines()[-1])


def median(xs):
    return statistics.median(xs) if xs else float("nan")


# -- orchestration --------------------------------------------------------------

def orchestration(args):
    ours = os.path.join(BUILD, "bench", "sv-bench-orchestration")
    # Not built by default (bench/CMakeLists.txt): built here when missing.
    if not os.path.exists(ours):
        subprocess.run(["cmake", "--build", BUILD, "--target",
                        "sv-bench-orchestration"], check=True)
    peer = os.path.join(PEERS, "py_baseline.py")
    rows = []
    for conc in (1000, 100000):
        samples = {"sv": [], "py": []}
        for _ in range(args.rounds):
            samples["sv"].append(run_json(
                [ours, "--count", str(args.count), "--concurrency", str(conc)]))
            samples["py"].append(run_json(
                [PYTHON, peer, "--provider", "null", "--count",
                 str(args.count), "--concurrency", str(conc)]))
        rows.append((conc, samples))
    # Per in-flight memory the way the peer's number is quoted: the growth of
    # peak RSS from 1,000 to 100,000 in flight, per added verification.
    def per_in_flight(samples_small, samples_big, key):
        small = median([s[key] for s in samples_small])
        big = median([s[key] for s in samples_big])
        return (big - small) / (100000 - 1000)

    print(f"| concurrency | sv per s | py per s | sv/py | sv peak RSS MiB | "
          f"py peak RSS MiB |")
    print("|---|---|---|---|---|---|")
    for conc, s in rows:
        sv = median([x["per_s"] for x in s["sv"]])
        py = median([x["per_s"] for x in s["py"]])
        sv_rss = median([x["peak_rss_kib"] for x in s["sv"]]) / 1024
        py_rss = median([x["peak_rss_kib"] for x in s["py"]]) / 1024
        print(f"| {conc:,} | {sv:,.0f} | {py:,.0f} | {sv / py:.2f} | "
              f"{sv_rss:,.0f} | {py_rss:,.0f} |")
    sv_kib = per_in_flight(rows[0][1]["sv"], rows[1][1]["sv"], "peak_rss_kib")
    py_kib = per_in_flight(rows[0][1]["py"], rows[1][1]["py"], "peak_rss_kib")
    sv_peak = median([x["peak_in_flight"] for x in rows[1][1]["sv"]])
    sv_own = median([x["kib_per_in_flight"] for x in rows[1][1]["sv"]])
    print(f"\nKiB per in-flight verification (peak RSS growth from 1,000 to "
          f"100,000 concurrency): sv {sv_kib:.2f}, py {py_kib:.2f}")
    print(f"sv at 100,000: peak {sv_peak:,.0f} verifications in flight at "
          f"once, (peak - base RSS) / peak in flight = {sv_own:.2f} KiB")


# -- HumanEval ----------------------------------------------------------------------

def humaneval(args):
    tmp = tempfile.mkdtemp(prefix="sv-compare-")
    jobs = os.path.join(tmp, "jobs.jsonl")
    subprocess.run([PYTHON, os.path.join(ROOT, "examples", "humaneval",
                                         "make_jobs.py"),
                    "--variant", "alternate", "--python", PYTHON,
                    "--output", jobs], check=True)
    n = sum(1 for _ in open(jobs))
    sv_grade = os.path.join(BUILD, "apps", "sv-grade")
    modes = ([] if args.no_none else ["none"]) + (["bwrap"] if args.bwrap
                                                  else [])

    def floor(conc):
        r = run_json([os.path.join(PEERS, "floor.sh"), jobs, str(conc), PYTHON])
        return {"per_s": r["per_s"], "reward": r["reward_sum"]}

    def peer(conc):
        r = run_json([PYTHON, os.path.join(PEERS, "py_baseline.py"),
                      "--provider", "local", "--jobs", jobs, "--concurrency",
                      str(conc), "--python", PYTHON])
        return {"per_s": r["per_s"], "reward": r["reward_sum"]}

    def ours(conc, isolation, binary=sv_grade, extra=None):
        config = os.path.join(tmp, f"provider-{isolation}.json")
        with open(config, "w") as f:
            json.dump({"local": {"python": PYTHON, "isolation": isolation,
                                 **(extra or {})}}, f)
        summary = os.path.join(tmp, "summary.json")
        subprocess.run(accounted([binary, "--input", jobs, "--output",
                        os.path.join(tmp, "out.jsonl"), "--concurrency",
                        str(conc), "--provider-config", config,
                        "--summary-json", summary]),
                       check=True, capture_output=True)
        s = json.load(open(summary))
        reward = s["mean_reward"] * s["ok"] if s["mean_reward"] else 0
        return {"per_s": s["per_s"], "reward": reward,
                "overhead": s["overhead_ms"], "failed": s["failed"]}

    if os.geteuid() == 0:
        os.makedirs(CPUACCT, exist_ok=True)
    results = {}
    for conc in args.concurrency or (2, 4):
        programs = [("floor", lambda c=conc: floor(c))]
        for m in modes:
            if args.baseline:
                programs.append((f"sv-grade before ({m})",
                                 lambda c=conc, m=m: ours(c, m,
                                                          args.baseline)))
            programs.append((f"sv-grade ({m})", lambda c=conc, m=m: ours(c, m)))
            if args.warm_python and m == "bwrap":
                programs.append((f"sv-grade ({m}, warm_python)",
                                 lambda c=conc, m=m:
                                 ours(c, m, extra={"warm_python": True})))
            for w in args.warm_pool or []:
                programs.append((f"sv-grade ({m}, warm_pool {w})",
                                 lambda c=conc, m=m, w=w:
                                 ours(c, m, extra={"warm_pool": w})))
        if not args.no_peer:
            programs += [("py asyncio peer", lambda c=conc: peer(c))]
        samples = {name: [] for name, _ in programs}
        for _ in range(args.rounds):
            for name, run in programs:
                load = os.getloadavg()[0]
                cpu0 = cpu_used_s()
                sample = run()
                sample["load"] = load
                sample["cpu_ms_per_job"] = (cpu_used_s() - cpu0) * 1000 / n
                samples[name].append(sample)
        results[conc] = samples

    print(f"HumanEval, {n} jobs (canonical and broken alternating), "
          f"{args.rounds} rounds alternating, medians\n")
    print("| concurrency | program | jobs/s | × floor | reward sum | load "
          "| CPU ms/job | floor CPU / CPU |")
    print("|---|---|---|---|---|---|---|---|")
    for conc, samples in results.items():
        floor_rate = median([x["per_s"] for x in samples["floor"]])
        floor_cpu = median([x["cpu_ms_per_job"] for x in samples["floor"]])
        for name, xs in samples.items():
            rate = median([x["per_s"] for x in xs])
            reward = median([x["reward"] for x in xs])
            load = median([x["load"] for x in xs])
            cpu = median([x["cpu_ms_per_job"] for x in xs])
            print(f"| {conc} | {name} | {rate:.1f} | {rate / floor_rate:.3f} "
                  f"| {reward:g} | {load:.1f} | {cpu:.1f} "
                  f"| {floor_cpu / cpu:.3f} |")
    last = max(results)
    for name in [n for n in results[last] if n.startswith("sv-grade")]:
        xs = results[last][name]
        p50 = median([x["overhead"]["p50"] for x in xs])
        p99 = median([x["overhead"]["p99"] for x in xs])
        print(f"\n{name} orchestration overhead (total - exec) at "
              f"concurrency {last}: p50 {p50:.2f} ms, p99 {p99:.2f} ms")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("what", choices=["orchestration", "humaneval"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--count", type=int, default=100000)
    ap.add_argument("--bwrap", action="store_true",
                    help="humaneval: also sv-grade with bubblewrap isolation")
    ap.add_argument("--warm-pool", type=int, action="append", metavar="N",
                    help="humaneval: also sv-grade with this warm_pool "
                         "(repeatable)")
    ap.add_argument("--warm-python", action="store_true",
                    help="humaneval: also sv-grade (bwrap) with warm_python")
    ap.add_argument("--no-peer", action="store_true",
                    help="humaneval: leave out the asyncio peer")
    ap.add_argument("--concurrency", type=int, action="append",
                    help="humaneval: only these concurrencies (default 2, 4)")
    ap.add_argument("--no-none", action="store_true",
                    help="humaneval: leave out isolation none")
    ap.add_argument("--baseline", metavar="SV_GRADE",
                    help="humaneval: also this sv-grade binary (before)")
    args = ap.parse_args()
    {"orchestration": orchestration, "humaneval": humaneval}[args.what](args)


if __name__ == "__main__":
    sys.exit(main())
