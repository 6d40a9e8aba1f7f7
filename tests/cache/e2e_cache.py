#!/usr/bin/env python3
"""The result cache (--cache) end to end, standard library only.

Called as: e2e_cache.py SV_GRADE SV_SERVE PYTHON CASE
  hit_and_miss      a repeated submission is answered from the cache
                    ("cached": true, no sandbox), counted in the summary
  failures          a failed verification is never stored
  key               what changes the key and what does not, through sv-grade
  two_processes     two sv-grade processes share one cache file at once
  bad_file          a file that cannot be a cache: exit 2 with a message
  serve             sv-serve --cache: marked answers, /metrics, shared with
                    sv-grade
  shared_id         two lines with one id (a slow wrong answer, a fast right
                    one) each get their own reward, with and without the
                    cache, and the cache stores each under its own key
Every wait is bounded.
"""

import http.client
import json
import os
import re
import select
import signal
import sqlite3
import subprocess
import sys
import tempfile

SV_GRADE = SV_SERVE = PYTHON = TMP = None


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def line(sid, **extra):
    sub = {"id": sid, "files": {"sandbox_runner.py": ""},
           "request": {"q": sid}, "exec_timeout_s": 5,
           "config": {"ready_timeout_s": 5}}
    sub.update(extra)
    return sub


def write_config(name, block):
    path = os.path.join(TMP, name + ".json")
    with open(path, "w") as f:
        json.dump(block, f)
    return path


def grade(lines, config, cache, concurrency=1, expect_status=0):
    """Runs sv-grade (without --cache when cache is None); returns (outputs
    by line number, summary)."""
    inp = os.path.join(TMP, "in.jsonl")
    out = os.path.join(TMP, "out.jsonl")
    summary = os.path.join(TMP, "summary.json")
    with open(inp, "w") as f:
        f.writelines(json.dumps(x) + "\n" for x in lines)
    cache_args = [] if cache is None else ["--cache", cache]
    p = subprocess.run([SV_GRADE, "--input", inp, "--output", out,
                        "--provider-config", config, *cache_args,
                        "--summary-json", summary,
                        "--concurrency", str(concurrency)],
                       capture_output=True, text=True, timeout=120)
    check(p.returncode == expect_status,
          f"sv-grade exit {p.returncode}: {p.stderr[-3000:]}")
    with open(out) as f:
        outs = {o["line"]: o for o in map(json.loads, f)}
    with open(summary) as f:
        return outs, json.load(f)


def cached(outs):
    return sorted(n for n, o in outs.items() if o.get("cached") is True)


def ledger_created(path):
    with open(path) as f:
        return json.loads(f.read().splitlines()[-1])["creates"]


def hit_and_miss():
    cache = os.path.join(TMP, "c.sqlite")
    same = line("a")
    twin = dict(same, id="b")  # the same content under another id
    other = line("c")
    ledger = os.path.join(TMP, "ledger1.jsonl")
    config = write_config("s1", {"scripted": {"ledger_file": ledger}})
    outs, summary = grade([same, twin, other], config, cache)
    check(all(o["ok"] for o in outs.values()), f"run 1: {outs}")
    check(cached(outs) == [2], f"run 1 hits: {outs}")
    check(outs[2]["id"] == "b" and outs[2]["result"] == {"reward": 1.0},
          f"hit line: {outs[2]}")
    check(all("cached" not in outs[n] for n in (1, 3)), f"misses: {outs}")
    c = summary["cache"]
    check((c["lines"], c["hits"], c["misses"], c["stored"], c["errors"]) ==
          (1, 1, 2, 2, 0), f"summary: {c}")
    check(ledger_created(ledger) == 2, "two sandboxes in run 1")
    # Again, with another ledger file (not part of the key): no sandbox.
    ledger2 = os.path.join(TMP, "ledger2.jsonl")
    config2 = write_config("s2", {"scripted": {"ledger_file": ledger2}})
    outs, summary = grade([same, twin, other], config2, cache)
    check(cached(outs) == [1, 2, 3], f"run 2: {outs}")
    check(summary["cache"]["hits"] == 3 and summary["cache"]["misses"] == 0,
          f"run 2 summary: {summary['cache']}")
    check(ledger_created(ledger2) == 0, "no sandbox in run 2")
    print("ok: hits marked and counted, no sandbox for a hit")


RUNNER = r'''
import json, os, sys
req = json.load(open(sys.argv[1]))
if os.path.exists(req["flag"]):
    sys.exit(3)
json.dump({"reward": 1.0}, open(sys.argv[2], "w"))
'''


def failures():
    cache = os.path.join(TMP, "f.sqlite")
    flag = os.path.join(TMP, "crash-flag")
    open(flag, "w").close()
    config = write_config("local", {"local": {
        "root": os.path.join(TMP, "sandboxes"), "isolation": "none",
        "python": PYTHON}})
    sub = {"id": "x", "files": {"sandbox_runner.py": RUNNER},
           "request": {"flag": flag}, "exec_timeout_s": 10,
           "config": {"python": PYTHON}}
    outs, summary = grade([sub, sub], config, cache)
    check(all(not o["ok"] and o["failure"]["failure_kind"] == "verifier_error"
              for o in outs.values()), f"crashes: {outs}")
    check(cached(outs) == [] and summary["cache"]["stored"] == 0,
          f"a failure was stored: {summary['cache']}")
    os.unlink(flag)
    outs, _ = grade([sub], config, cache)
    check(outs[1]["ok"] and cached(outs) == [], f"graded again: {outs}")
    outs, _ = grade([sub], config, cache)
    check(outs[1]["ok"] and cached(outs) == [1], f"now cached: {outs}")
    print("ok: failures never stored; the success after them is")


def key():
    cache = os.path.join(TMP, "k.sqlite")
    config = write_config("k", {"scripted": {"ledger_file": "/dev/null"}})
    base = line("k")
    grade([base], config, cache)
    same = [dict(base, id="other"), dict(base, metadata={"task": "t"}),
            dict(base, config={"ready_timeout_s": 5, "metadata": {"r": 1}})]
    outs, _ = grade(same, config, cache)
    check(cached(outs) == [1, 2, 3], f"id and metadata are not keys: {outs}")
    changed = [dict(base, exec_timeout_s=6), dict(base, request={"q": "j"}),
               dict(base, files={"sandbox_runner.py": " "}),
               dict(base, config={"ready_timeout_s": 5, "python": "py"}),
               dict(base, config={"ready_timeout_s": 5, "env": {"A": "1"}}),
               dict(base, work_dir="elsewhere")]
    outs, _ = grade(changed, config, cache)
    check(cached(outs) == [], f"a deciding input changed: {outs}")
    polls = write_config("k2", {"scripted": {"starting_polls": 1}})
    outs, _ = grade([base], polls, cache)
    check(cached(outs) == [], f"the provider's settings are keys: {outs}")
    print("ok: the key covers files, request, timeouts, config, provider")


def two_processes():
    cache = os.path.join(TMP, "two.sqlite")
    config = write_config("two", {"scripted": {}})
    procs = []
    for name, ids in (("p1", range(0, 300)), ("p2", range(150, 450))):
        inp = os.path.join(TMP, name + ".jsonl")
        with open(inp, "w") as f:
            f.writelines(json.dumps(line(f"s{i}")) + "\n" for i in ids)
        procs.append((name, subprocess.Popen(
            [SV_GRADE, "--input", inp, "--output",
             os.path.join(TMP, name + ".out"), "--provider-config", config,
             "--cache", cache, "--summary-json",
             os.path.join(TMP, name + ".summary"), "--concurrency", "20"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)))
    for name, p in procs:
        try:
            _, err = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate(timeout=10)
            raise AssertionError(f"{name} hung")
        check(p.returncode == 0, f"{name}: exit {p.returncode}: {err[-2000:]}")
        with open(os.path.join(TMP, name + ".out")) as f:
            outs = [json.loads(x) for x in f]
        check(len(outs) == 300 and all(o["ok"] for o in outs),
              f"{name}: {len(outs)} lines")
        with open(os.path.join(TMP, name + ".summary")) as f:
            c = json.load(f)["cache"]
        check(c["errors"] == 0 and c["hits"] + c["misses"] == 300,
              f"{name}: {c}")
    outs, summary = grade([line(f"s{i}") for i in range(450)], config, cache,
                          concurrency=50)
    check(len(cached(outs)) == 450, f"union: {summary['cache']}")
    print("ok: two processes on one cache file, then every line a hit")


def bad_file():
    config = write_config("bad", {"scripted": {}})
    inp = os.path.join(TMP, "bad.jsonl")
    with open(inp, "w") as f:
        f.write(json.dumps(line("z")) + "\n")
    garbage = os.path.join(TMP, "garbage.sqlite")
    with open(garbage, "w") as f:
        f.write("x" * 8192)
    foreign = os.path.join(TMP, "foreign.sqlite")
    db = sqlite3.connect(foreign)
    db.execute("CREATE TABLE users (name TEXT)")
    db.commit()
    db.close()
    for path, words in ((garbage, "not a database"), (TMP, "cannot open"),
                        (foreign, "something else")):
        p = subprocess.run([SV_GRADE, "--input", inp, "--output", "-",
                            "--provider-config", config, "--cache", path],
                           capture_output=True, text=True, timeout=60)
        check(p.returncode == 2 and words in p.stderr and p.stdout == "",
              f"sv-grade --cache {path}: {p.returncode} {p.stderr!r}")
        p = subprocess.run([SV_SERVE, "--listen", "127.0.0.1:0",
                            "--provider-config", config, "--cache", path],
                           capture_output=True, text=True, timeout=60)
        check(p.returncode == 2 and words in p.stderr,
              f"sv-serve --cache {path}: {p.returncode} {p.stderr!r}")
    with open(garbage) as f:
        check(f.read() == "x" * 8192, "the bad file was changed")
    print("ok: unusable cache files are usage errors, left alone")


def serve():
    cache = os.path.join(TMP, "serve.sqlite")
    config = write_config("serve", {"scripted": {}})
    err = open(os.path.join(TMP, "serve.stderr"), "w")
    proc = subprocess.Popen([SV_SERVE, "--listen", "127.0.0.1:0",
                             "--provider-config", config, "--cache", cache],
                            stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        first = proc.stdout.readline() if ready else ""
        m = re.fullmatch(r"listening on 127\.0\.0\.1:(\d+)\n", first)
        check(m is not None, f"no 'listening on': {first!r}")
        port = int(m.group(1))

        def post(body):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
            try:
                c.request("POST", "/v1/verify", body=json.dumps(body))
                r = c.getresponse()
                return r.status, json.loads(r.read())
            finally:
                c.close()

        s1, o1 = post(line("web"))
        s2, o2 = post(dict(line("web"), id="web-again"))
        check(s1 == 200 and o1["ok"] and "cached" not in o1, f"first: {o1}")
        check(s2 == 200 and o2["ok"] and o2.get("cached") is True
              and o2["id"] == "web-again", f"second: {o2}")
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
        c.close()
        check("sv_cache_hits_total 1\n" in text and
              "sv_cache_misses_total 1\n" in text, f"metrics: {text}")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        err.close()
    check(proc.returncode == 0, f"sv-serve exit {proc.returncode}")
    # sv-grade on the same provider block finds what sv-serve stored.
    outs, _ = grade([line("web")], config, cache)
    check(cached(outs) == [1], f"sv-grade after sv-serve: {outs}")
    print("ok: sv-serve marks hits, counts them in /metrics, shares the file")


# The wrong answer waits (bounded) until the right one has written its
# result, so the right one's reply comes first: the order that swapped
# results when replies were matched by the lines' own id.
SHARED_RUNNER = r'''
import json, os, sys, time
req = json.load(open(sys.argv[1]))
if req["answer"] == "right":
    json.dump({"reward": 1.0}, open(sys.argv[2], "w"))
    open(req["gate"], "w").close()
else:
    deadline = time.monotonic() + 20
    while not os.path.exists(req["gate"]) and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.5)
    json.dump({"reward": 0.0}, open(sys.argv[2], "w"))
'''


def shared_id():
    config = write_config("shared", {"local": {
        "root": os.path.join(TMP, "sandboxes"), "isolation": "none",
        "python": PYTHON}})
    rounds = iter(range(100))

    def pair():
        """A wrong and a right answer to one task, sharing its id and a
        gate file of their own."""
        gate = os.path.join(TMP, f"gate-{next(rounds)}")
        return [{"id": "HumanEval/0",
                 "files": {"sandbox_runner.py": SHARED_RUNNER},
                 "request": {"answer": answer, "gate": gate},
                 "exec_timeout_s": 30, "config": {"python": PYTHON}}
                for answer in ("wrong", "right")]

    def rewards(outs):
        return {n: (o["ok"], o["id"], (o["result"] or {}).get("reward"))
                for n, o in outs.items()}

    # Without the cache: the driver alone.
    outs, _ = grade(pair(), config, None, concurrency=2)
    check(rewards(outs) == {1: (True, "HumanEval/0", 0.0),
                            2: (True, "HumanEval/0", 1.0)},
          f"without --cache: {rewards(outs)}")
    # With the cache: the driver and the cache's front; each stored under
    # its own key.
    cache = os.path.join(TMP, "shared.sqlite")
    wrong, right = pair()
    outs, summary = grade([wrong, right], config, cache, concurrency=2)
    check(rewards(outs) == {1: (True, "HumanEval/0", 0.0),
                            2: (True, "HumanEval/0", 1.0)},
          f"with --cache: {rewards(outs)}")
    check(cached(outs) == [] and summary["cache"]["stored"] == 2,
          f"both stored: {summary['cache']}")
    for answer, sub_, reward in (("wrong", wrong, 0.0), ("right", right, 1.0)):
        outs, _ = grade([sub_], config, cache)
        check(cached(outs) == [1] and outs[1]["result"] == {"reward": reward},
              f"the {answer} answer alone from the cache: {outs}")
    print("ok: one id on two lines, each line its own reward and cache entry")


def main():
    global SV_GRADE, SV_SERVE, PYTHON, TMP
    if len(sys.argv) != 5:
        sys.exit(f"usage: {sys.argv[0]} SV_GRADE SV_SERVE PYTHON CASE")
    SV_GRADE, SV_SERVE, PYTHON, case = sys.argv[1:]
    cases = {"hit_and_miss": hit_and_miss, "failures": failures, "key": key,
             "two_processes": two_processes, "bad_file": bad_file,
             "serve": serve, "shared_id": shared_id}
    with tempfile.TemporaryDirectory(prefix="sv-cache-test-") as tmp:
        TMP = tmp
        cases[case]()


if __name__ == "__main__":
    main()
