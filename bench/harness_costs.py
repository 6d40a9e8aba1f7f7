#!/usr/bin/env python3
"""What each part of the HumanEval harness costs: the runner with one part
taken out at a time, run bare like bench/harness_bench.py, job by job
alternating.

  bench/harness_costs.py [--jobs 10] [--rounds 3] [--python /usr/bin/python3]

Reported per variant: median CPU (user + system of the runner and all its
processes) and minor page faults per job, and their difference to the
harness as make_jobs.py ships it. On these VMs a page fault costs tens of
microseconds, so faults are the steadier measure; CPU moves with the load.
The variants are text patches of examples/humaneval/sandbox_runner.py, for
measuring only: a variant without a defence is not a harness to use.
"""

import argparse
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples",
                                "humaneval"))
import harness_bench  # noqa: E402
from make_jobs import pack_runner  # noqa: E402

# name -> (what is taken out, [(old text, new text)], packed)
VARIANTS = {
    "harness": ("nothing (as make_jobs.py ships it)", [], True),
    "source": ("the packing: the source compiled at every start", [], False),
    "no-landlock": ("Landlock", [(
        "    applied = landlock(scratch, read_roots)\n",
        "    applied = []\n")], True),
    "no-seccomp": ("the seccomp filter (no_new_privs stays)", [(
        "    _prctl(22, 2, fprog)  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER\n",
        "")], True),
    "no-reserve": ("result.json's reserved file (O_TMPFILE + fallocate)", [(
        "def reserve_result():\n",
        "def reserve_result():\n    return None\n")], True),
    "no-freeze": ("gc.freeze() before the forks", [(
        "    gc.freeze()  # no collection in the judge touches (copies) "
        "these\n", ""), (
        "        gc.freeze()  # no collection in the candidate touches "
        "(copies) these\n", "")], True),
    "json": ("_json: the json module imported instead", [(
        "    _json = None\n", "    _json = None\n_json = None\n")], True),
    "teardown": ("os._exit: the interpreter torn down at exit", [(
        "    os._exit(code)  # no interpreter teardown (~20 ms): nothing left"
        " to do\n", "    sys.exit(code)\n")], True),
}


def variant(source, python, patches, packed):
    for old, new in patches:
        if source.count(old) != 1:
            sys.exit(f"patch does not apply: {old!r}")
        source = source.replace(old, new)
    return pack_runner(source, python) if packed else source


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--python", default="/usr/bin/python3")
    args = p.parse_args(argv)
    with open(os.path.join(harness_bench.EXAMPLE, "sandbox_runner.py")) as f:
        source = f.read()
    programs = {name: variant(source, args.python, patches, packed)
                for name, (_, patches, packed) in VARIANTS.items()}
    programs["plain"] = harness_bench.PLAIN_RUNNER
    jobs = harness_bench.load_jobs(args.jobs, 10.0)
    cpu = {n: [] for n in programs}
    faults = {n: [] for n in programs}
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="sv-harness-costs-") as work:
        names = list(programs)
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for request, expected in jobs:
                for n in order:
                    _, c, flt = harness_bench.run_one(
                        args.python, programs[n], request, expected, work)
                    cpu[n].append(c)
                    faults[n].append(flt)
            loads.append(os.getloadavg()[0])
    base_c = statistics.median(cpu["harness"])
    base_f = statistics.median(faults["harness"])
    print(f"{args.jobs} jobs x {args.rounds} rounds, {args.python}, load "
          f"(1 min) {' '.join(f'{x:.1f}' for x in loads)}")
    print("| variant | taken out | CPU ms/job | faults/job | "
          "CPU vs harness | faults vs harness |")
    print("|---|---|---|---|---|---|")
    for n in programs:
        what = VARIANTS[n][0] if n in VARIANTS else "(the plain runner)"
        c, f = statistics.median(cpu[n]), statistics.median(faults[n])
        print(f"| {n} | {what} | {c:.1f} | {f:.0f} | {c - base_c:+.1f} | "
              f"{f - base_f:+.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
