#!/usr/bin/env python3
"""The HumanEval harness run bare against a plain runner (issue 23 target 1).

  bench/harness_bench.py [--jobs 40] [--rounds 3] [--python /usr/bin/python3]
                         [--runner FILE] [--source] [--compare NAME=FILE ...]

No sandbox, no sv-grade: each job gets a fresh directory holding the runner
and request.json (made before the clock starts), and the clock covers one
`PYTHON sandbox_runner.py request.json result.json` to its exit, one job at a
time. The jobs are the first N HumanEval tasks, canonical and broken
completions by turns; every result must be the expected reward (1.0, 0.0) with
exit 0. Programs alternate job by job (plain, harness[, baseline]), the order
rotating every round, so a load that comes and goes is spread over all of
them. Reported: per program, the median wall time of one job and its CPU
(user + system of the runner and its children), and the ratio to plain.

The harness is examples/humaneval/sandbox_runner.py as make_jobs.py ships
it (packed for --python: pack_runner), or its source with --source.

The plain runner is the floor of a harness: it writes prompt + completion +
test + check(entry_point) to a file and runs it in one child python
(subprocess), reward 1.0 on exit 0. It isolates nothing.
"""

import argparse
import gzip
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "humaneval")
BROKEN = "    raise NotImplementedError('broken on purpose')\n"

PLAIN_RUNNER = '''\
import json, subprocess, sys
with open(sys.argv[1]) as f:
    req = json.load(f)
with open("program.py", "w") as f:
    f.write(req["prompt"] + req["completion"] + "\\n" + req["test"]
            + f"\\ncheck({req['entry_point']})\\n")
try:
    p = subprocess.run([sys.executable, "program.py"], capture_output=True,
                       timeout=req.get("timeout_s", 10))
    status = "passed" if p.returncode == 0 else "failed"
    detail = p.stderr.decode("utf-8", "replace")[-1000:]
except subprocess.TimeoutExpired:
    status, detail = "timeout", ""
with open(sys.argv[2], "w") as f:
    json.dump({"reward": 1.0 if status == "passed" else 0.0,
               "passed": status == "passed", "status": status,
               "task_id": req.get("task_id"), "detail": detail}, f)
'''


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=40)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--python", default="/usr/bin/python3")
    p.add_argument("--runner", default=os.path.join(EXAMPLE,
                                                    "sandbox_runner.py"))
    p.add_argument("--source", action="store_true",
                   help="the runner's source, not packed as make_jobs ships "
                        "it")
    p.add_argument("--compare", action="append", default=[],
                   metavar="NAME=FILE",
                   help="another runner file (run as it is) in the "
                        "alternation, e.g. before=OLD/sandbox_runner.py")
    p.add_argument("--timeout", type=float, default=10.0,
                   help="timeout_s of each request")
    return p.parse_args(argv)


def load_jobs(n, timeout):
    path = os.path.join(EXAMPLE, "data", "HumanEval.jsonl.gz")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        tasks = [json.loads(line) for line in f if line.strip()][:n]
    jobs = []
    for i, t in enumerate(tasks):
        right = i % 2 == 0
        jobs.append(({"task_id": t["task_id"], "prompt": t["prompt"],
                      "completion": t["canonical_solution"] if right
                      else BROKEN, "test": t["test"],
                      "entry_point": t["entry_point"], "timeout_s": timeout},
                     1.0 if right else 0.0))
    return jobs


def run_one(python, runner_text, request, expected, work):
    """Wall and CPU ms and minor page faults of one job in a fresh
    directory; checks the result."""
    d = tempfile.mkdtemp(dir=work)
    with open(os.path.join(d, "sandbox_runner.py"), "w") as f:
        f.write(runner_text)
    with open(os.path.join(d, "request.json"), "w") as f:
        json.dump(request, f)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([python, "sandbox_runner.py", "request.json",
                           "result.json"], cwd=d, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE)
    wall = (time.perf_counter() - t0) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime - before.ru_utime
           - before.ru_stime) * 1000
    faults = after.ru_minflt - before.ru_minflt
    try:
        with open(os.path.join(d, "result.json")) as f:
            reward = json.load(f)["reward"]
    except (OSError, ValueError, KeyError) as e:
        reward = f"no result ({e})"
    if proc.returncode != 0 or reward != expected:
        sys.exit(f"{request['task_id']}: exit {proc.returncode}, reward "
                 f"{reward}, expected {expected}\n"
                 f"{proc.stderr.decode(errors='replace')[-2000:]}")
    shutil.rmtree(d)
    return wall, cpu, faults


def main(argv):
    args = parse_args(argv)
    programs = {"plain": PLAIN_RUNNER}
    with open(args.runner) as f:
        programs["harness"] = f.read()
    if not args.source:
        sys.path.insert(0, EXAMPLE)
        from make_jobs import pack_runner
        programs["harness"] = pack_runner(programs["harness"], args.python)
    for spec in args.compare:
        name, _, path = spec.partition("=")
        if not path or name in programs:
            sys.exit(f"--compare {spec}: expected a new NAME=FILE")
        with open(path) as f:
            programs[name] = f.read()
    jobs = load_jobs(args.jobs, args.timeout)
    names = list(programs)
    wall = {n: [] for n in names}
    cpu = {n: [] for n in names}
    faults = {n: [] for n in names}
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="sv-harness-bench-") as work:
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for request, expected in jobs:
                for n in order:
                    w, c, f = run_one(args.python, programs[n], request,
                                      expected, work)
                    wall[n].append(w)
                    cpu[n].append(c)
                    faults[n].append(f)
            loads.append(os.getloadavg()[0])
    plain_wall = statistics.median(wall["plain"])
    plain_cpu = statistics.median(cpu["plain"])
    print(f"{args.jobs} jobs x {args.rounds} rounds, {args.python}, "
          f"load (1 min) {' '.join(f'{x:.1f}' for x in loads)}")
    plain_faults = statistics.median(faults["plain"])
    print("| program | wall ms/job (median) | mean | x plain | "
          "CPU ms/job (median) | x plain | page faults/job | x plain |")
    print("|---|---|---|---|---|---|---|---|")
    summary = {"jobs": args.jobs, "rounds": args.rounds, "loads": loads}
    for n in names:
        mw, mc = statistics.median(wall[n]), statistics.median(cpu[n])
        mf = statistics.median(faults[n])
        print(f"| {n} | {mw:.1f} | {statistics.mean(wall[n]):.1f} | "
              f"**{mw / plain_wall:.2f}** | {mc:.1f} | {mc / plain_cpu:.2f} |"
              f" {mf:.0f} | {mf / plain_faults:.2f} |")
        summary[n] = {"wall_ms": round(mw, 2), "cpu_ms": round(mc, 2),
                      "faults": mf, "wall_ratio": round(mw / plain_wall, 3),
                      "cpu_ratio": round(mc / plain_cpu, 3)}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
