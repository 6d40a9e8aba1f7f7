#!/usr/bin/env python3
"""The HumanEval harness cannot be fooled: every completion of attacks.py,
graded by the real sv-grade on the local provider, gets the outcome it
deserves (0.0 and not masked, unless marked correct), in bwrap mode and in
isolation none, shipped as make_jobs.py ships it (packed). Before that, the
runner alone, packed and as source: modules planted where it runs are never
imported.

Usage: e2e_forgery.py SV_GRADE MAKE_JOBS PYTHON
Exit 77 (skipped) without root or bubblewrap, after the runner-alone part.
"""

import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile

import attacks

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))), "examples", "humaneval"))
from make_jobs import pack_runner  # noqa: E402

SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples",
                       "humaneval")
DATASET = os.path.join(EXAMPLE, "data", "HumanEval.jsonl.gz")
RUNNER = os.path.join(EXAMPLE, "sandbox_runner.py")
# Every module the runner, the judge or the tests might import late.
PLANTED = ["json", "os", "select", "struct", "time", "ctypes", "random",
           "math", "copy", "typing", "traceback", "linecache", "shutil",
           "re", "gc", "hashlib", "bisect", "string", "collections",
           "sitecustomize", "usercustomize", "fcntl", "io", "abc", "gc",
           "_json", "marshal", "binascii", "zlib", "resource", "signal",
           "traceback"]


def fail(what, extra=""):
    print(f"FAIL: {what}\n{extra}"[:6000])
    sys.exit(1)


def task0():
    with gzip.open(DATASET, "rt", encoding="utf-8") as f:
        return json.loads(f.readline())


def request(task, completion, timeout_s):
    return {"task_id": task["task_id"], "prompt": task["prompt"],
            "completion": completion, "test": task["test"],
            "entry_point": task["entry_point"], "timeout_s": timeout_s}


def runner_alone(python, task, tmp):
    """Planted modules in the call directory are never imported."""
    with open(RUNNER, encoding="utf-8") as f:
        source = f.read()
    for name, completion, reward, runner in (
            ("correct", task["canonical_solution"], 1.0, source),
            ("wrong", "    return None\n", 0.0, source),
            ("correct-packed", task["canonical_solution"], 1.0,
             pack_runner(source, python)),
            ("wrong-packed", "    return None\n", 0.0,
             pack_runner(source, python))):
        d = os.path.join(tmp, "alone-" + name)
        os.mkdir(d)
        with open(os.path.join(d, "sandbox_runner.py"), "w") as f:
            f.write(runner)
        for mod in PLANTED:
            with open(os.path.join(d, mod + ".py"), "w") as f:
                f.write(f"open({os.path.join(d, 'IMPORTED-' + mod)!r}, 'w')\n")
        with open(os.path.join(d, "request.json"), "w") as f:
            json.dump(request(task, completion, 5), f)
        proc = subprocess.run(
            [python, "sandbox_runner.py", "request.json", "result.json"],
            cwd=d, capture_output=True, text=True, timeout=60)
        if proc.returncode != 0:
            fail(f"runner alone ({name}): exit {proc.returncode}",
                 proc.stderr)
        imported = [n for n in os.listdir(d) if n.startswith("IMPORTED-")]
        if imported:
            fail(f"runner alone ({name}) imported planted modules: "
                 f"{imported}")
        with open(os.path.join(d, "result.json")) as f:
            result = json.load(f)
        if result["reward"] != reward:
            fail(f"runner alone ({name}): reward {result['reward']}",
                 json.dumps(result))
    print("ok: runner alone, source and packed: planted modules never "
          "imported")


BAD_REQUESTS = ["{", "[]", "", "NaN", '{"a": 1} x', "[" * 100000,
                json.dumps({"prompt": 1}),
                json.dumps({"prompt": "", "completion": "", "test": "",
                            "entry_point": "f", "timeout_s": 0})]


def bad_requests(python, tmp):
    """A request the runner cannot use exits 2 (the caller masks it), with
    nothing left behind: no result.json, no scratch directory."""
    d = os.path.join(tmp, "bad")
    os.mkdir(d)
    with open(RUNNER, encoding="utf-8") as f:
        runner = pack_runner(f.read(), python)
    with open(os.path.join(d, "sandbox_runner.py"), "w") as f:
        f.write(runner)
    for i, body in enumerate(BAD_REQUESTS):
        with open(os.path.join(d, "request.json"), "w") as f:
            f.write(body)
        proc = subprocess.run(
            [python, "sandbox_runner.py", "request.json", "result.json"],
            cwd=d, capture_output=True, text=True, timeout=60)
        left = sorted(set(os.listdir(d)) - {"sandbox_runner.py"})
        if proc.returncode != 2 or left or "bad request.json" not in \
                proc.stderr:
            fail(f"bad request {i}: exit {proc.returncode}, left {left}",
                 proc.stderr)
    print(f"ok: {len(BAD_REQUESTS)} bad requests: exit 2, nothing left")


def slow_start(python, task, tmp):
    """timeout_s is the candidate's time: a judge slow to start it (a
    loaded machine; here a prompt that sleeps 3 s in the judge only) does
    not turn a right answer into a timeout or a masked sample."""
    d = os.path.join(tmp, "slow-start")
    os.mkdir(d)
    with open(RUNNER, encoding="utf-8") as f:
        runner = pack_runner(f.read(), python)
    with open(os.path.join(d, "sandbox_runner.py"), "w") as f:
        f.write(runner)
    slow = dict(task, prompt="import time\nif '__prompt__' in globals():\n"
                "    time.sleep(3)\n" + task["prompt"])
    with open(os.path.join(d, "request.json"), "w") as f:
        json.dump(request(slow, task["canonical_solution"], 1), f)
    proc = subprocess.run(
        [python, "sandbox_runner.py", "request.json", "result.json"],
        cwd=d, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        fail(f"slow start: exit {proc.returncode}", proc.stderr)
    with open(os.path.join(d, "result.json")) as f:
        result = json.load(f)
    if (result["status"], result["reward"]) != ("passed", 1.0):
        fail("slow start: not passed", json.dumps(result))
    print("ok: a judge 3 s slow to start the candidate: timeout_s 1, passed")


def jobs(task, python):
    with open(RUNNER, encoding="utf-8") as f:
        runner = pack_runner(f.read(), python)
    cases = attacks.completions(DATASET)
    cases["canonical"] = (task["canonical_solution"], "passed", 1.0)
    cases["broken"] = ("    raise NotImplementedError\n", "failed", 0.0)
    lines = []
    for name, (completion, _, _) in cases.items():
        timeout_s = attacks.timeout_s(name)
        lines.append(json.dumps({
            "id": name, "files": {"sandbox_runner.py": runner},
            "request": request(task, completion, timeout_s),
            "exec_timeout_s": timeout_s + 17,
            "metadata": {"task": "forgery"}, "config": {"python": python}}))
    return cases, "\n".join(lines) + "\n"


def grade(sv_grade, mode, tmp, batch):
    root = os.path.join(tmp, "sandboxes-" + mode)
    config = os.path.join(tmp, f"provider-{mode}.json")
    with open(config, "w") as f:
        # At the service's niceness: the sandboxes' default 10 yields to
        # whatever else runs (a busy machine's work at 0 leaves them a tenth
        # of a core), and no verdict here is about priority.
        json.dump({"local": {"root": root, "isolation": mode,
                             "sandbox_nice": 0}}, f)
    proc = subprocess.run(
        [sv_grade, "--input", "-", "--output", "-", "--provider-config",
         config, "--concurrency", "4"], input=batch, capture_output=True,
        text=True, timeout=150)
    if proc.returncode != 0:
        fail(f"{mode}: sv-grade exit {proc.returncode}", proc.stderr[-3000:])
    return {o["id"]: o for o in map(json.loads, proc.stdout.splitlines())}


def check_outcomes(mode, cases, outputs):
    if sorted(outputs) != sorted(cases):
        fail(f"{mode}: ids {sorted(outputs)}")
    for name, (_, status, reward) in cases.items():
        out = outputs[name]
        if not out["ok"] or out["mask_sample"]:
            fail(f"{mode}/{name}: not a plain result", json.dumps(out))
        result = out["result"]
        detail = result.get("detail", "")
        if (result["status"], result["reward"]) != (status, reward):
            fail(f"{mode}/{name}: {result['status']} {result['reward']}, "
                 f"expected {status} {reward}", detail)
        if "LEAK" in detail or ("failed to load" in detail
                                and name not in attacks.LOAD_FAILS):
            fail(f"{mode}/{name}: the attack found something or broke",
                 detail)
        if mode == "none" and "DAEMON" in detail:
            pid = int(detail.split("DAEMON ")[1].split()[0])
            if os.path.exists(f"/proc/{pid}"):
                fail(f"{mode}/{name}: daemon {pid} survived the verdict")
        if "seccomp" not in result.get("confinement", []):
            fail(f"{mode}/{name}: candidate not confined", json.dumps(result))
    print(f"ok: {mode}: {len(cases)} completions, every one as expected")


def main(argv):
    if len(argv) != 4:
        sys.exit(f"usage: {argv[0]} SV_GRADE MAKE_JOBS PYTHON")
    sv_grade, _, python = argv[1:]
    task = task0()
    with tempfile.TemporaryDirectory(prefix="sv-forgery-") as tmp:
        os.chmod(tmp, 0o755)
        runner_alone(python, task, tmp)
        bad_requests(python, tmp)
        slow_start(python, task, tmp)
        if os.geteuid() != 0 or shutil.which("bwrap") is None:
            print("skipped: the provider runs need root and bubblewrap")
            return SKIP
        cases, batch = jobs(task, python)
        for mode in ("bwrap", "none"):
            check_outcomes(mode, cases, grade(sv_grade, mode, tmp, batch))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
