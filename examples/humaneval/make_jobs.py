#!/usr/bin/env python3
"""Turns HumanEval into sv-grade input: one JSONL submission per task.

  make_jobs.py [--variant canonical|broken|alternate] [--limit N]
               [--exec-timeout S] [--test-timeout T] [--python PY]
               [--dataset FILE] [--output FILE] [--source]

canonical: the reference solution (reward 1.0). broken: a body that raises
(reward 0.0). alternate: canonical and broken by turns (for benchmarks).

Each job's sandbox_runner.py is the runner packed (pack_runner): its code
compiled for the interpreter that will run it (--python, else this one), so
that no sandbox compiles its ~1,000 lines again (~800 page faults
a job), and its source for any other interpreter. --source ships the source
alone.
"""

import argparse
import binascii
import gzip
import hashlib
import importlib.util
import json
import marshal
import os
import subprocess
import sys
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DATASET = os.path.join(HERE, "data", "HumanEval.jsonl.gz")
RUNNER = os.path.join(HERE, "sandbox_runner.py")
BROKEN = "    raise NotImplementedError('broken on purpose')\n"


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variant", default="canonical",
                   choices=["canonical", "broken", "alternate"])
    p.add_argument("--limit", type=int, default=None,
                   help="only the first N tasks")
    p.add_argument("--exec-timeout", type=float, default=30.0,
                   help="exec_timeout_s of each job: the runner's deadline "
                        "(default 30)")
    p.add_argument("--test-timeout", type=float, default=None,
                   help="timeout_s of the tests inside the runner; must be "
                        "below --exec-timeout (default min(10, S/2))")
    p.add_argument("--python", default=None,
                   help="interpreter for config.python (default: the "
                        "provider's)")
    p.add_argument("--dataset", default=DEFAULT_DATASET)
    p.add_argument("--output", default="-", help="file, or - for stdout")
    p.add_argument("--source", action="store_true",
                   help="ship the runner's source, not packed")
    args = p.parse_args(argv)
    if args.exec_timeout <= 0:
        p.error("--exec-timeout must be positive")
    if args.test_timeout is None:
        args.test_timeout = min(10.0, args.exec_timeout / 2)
    if not 0 < args.test_timeout < args.exec_timeout:
        p.error("--test-timeout must be in (0, --exec-timeout)")
    if args.limit is not None and args.limit < 0:
        p.error("--limit must not be negative")
    return args


PACKED = """\
#!/usr/bin/env python3
# {name} as make_jobs.py ships it (pack_runner): its code compiled by the
# interpreter whose bytecode magic is {magic!r}, which then does not
# compile ~1,000 lines at every start (~800 page faults a job),
# and its source (sha256 {digest}) for any other interpreter.
import sys


def _compiled():
    if getattr(sys.modules.get("_frozen_importlib_external"), "MAGIC_NUMBER",
               None) != {magic!r}:
        return None
    # Where binascii and zlib are files, from the standard library only.
    path = sys.path[:]
    sys.path[:] = [p for p in path[1:] if "-packages" not in p and
                   p.startswith((sys.base_prefix, sys.base_exec_prefix))]
    try:
        import binascii
        import marshal
        import zlib
    finally:
        sys.path[:] = path
    return marshal.loads(zlib.decompress(binascii.a2b_base64(CODE)))


CODE = {code!r}
SOURCE = {source}
exec(_compiled() or compile(SOURCE, __file__, "exec"))
"""

COMPILE = ("import importlib.util, marshal, sys; src = sys.stdin.read(); "
           "sys.stdout.buffer.write(importlib.util.MAGIC_NUMBER + marshal"
           ".dumps(compile(src, sys.argv[1], 'exec', dont_inherit=True, "
           "optimize=0)))")


def pack_runner(source, python=None, name="sandbox_runner.py"):
    """The runner as one text file: its code marshalled for `python` (this
    interpreter by default), and its source for any other. Only the job's
    author writes it; the sandbox runs it before any code under test. The
    same source and interpreter give the same text (a result cache keys on
    it), whatever the hash seed, as long as the runner holds no constant
    set of strings (`x in {"a", "b"}`: marshal writes sets in hash order)."""
    if python is None or os.path.realpath(python) == os.path.realpath(
            sys.executable):
        magic = importlib.util.MAGIC_NUMBER
        code = marshal.dumps(compile(source, name, "exec", dont_inherit=True,
                                     optimize=0))
    else:
        out = subprocess.run([python, "-c", COMPILE, name], input=source
                             .encode(), capture_output=True, check=True)
        magic, code = out.stdout[:4], out.stdout[4:]
    packed = binascii.b2a_base64(zlib.compress(code, 9), newline=False)
    # The source stays readable where a raw string can hold it.
    text = f"r\'\'\'{source}\'\'\'" if "\'\'\'" not in source \
        and not source.endswith("\\") else repr(source)
    return PACKED.format(name=name, magic=magic, code=packed.decode(),
                         source=text,
                         digest=hashlib.sha256(source.encode()).hexdigest())


def load_tasks(path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def make_job(task, variant, runner, args):
    completion = task["canonical_solution"] if variant == "canonical" \
        else BROKEN
    job = {
        "id": f"{task['task_id']}#{variant}",
        "files": {"sandbox_runner.py": runner},
        "request": {
            "task_id": task["task_id"],
            "prompt": task["prompt"],
            "completion": completion,
            "test": task["test"],
            "entry_point": task["entry_point"],
            "timeout_s": args.test_timeout,
        },
        "exec_timeout_s": args.exec_timeout,
        "metadata": {"task": "humaneval"},
    }
    if args.python:
        job["config"] = {"python": args.python}
    return job


def main(argv):
    args = parse_args(argv)
    tasks = load_tasks(args.dataset)[:args.limit]
    with open(RUNNER, encoding="utf-8") as f:
        runner = f.read()
    if not args.source:
        runner = pack_runner(runner, args.python)
    out = sys.stdout if args.output == "-" else \
        open(args.output, "w", encoding="utf-8")
    with out:
        for i, task in enumerate(tasks):
            variant = args.variant
            if variant == "alternate":
                variant = "canonical" if i % 2 == 0 else "broken"
            out.write(json.dumps(make_job(task, variant, runner, args)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
