#!/usr/bin/env python3
"""Fuzzes the channel from the candidate to the judge of the HumanEval
harness (issue 19 item 12): whatever bytes a completion writes where its
answers go, the sample scores a clean 0.0 (status failed, or timeout where
the bytes leave the judge waiting), never an exception of the judge, a
non-zero exit (a masked sample) or a result.json a strict JSON parser
rejects; a right answer still passes.

1. In process: the runner's Channel.recv over a real pipe, fed thousands of
   adversarial, random and mutated byte streams: every call returns plain
   data or raises CandidateGone, nothing else.
2. End to end: the real runner, bare (no sandbox), packed as make_jobs.py
   ships it, grading completions of HumanEval/0 that write adversarial
   frames to the reply fd at import time (where the load reply belongs;
   every stream) or in a call (before the real reply; the streams that
   decode, since the others fail in recv wherever they come), close or swap
   the fd, stop mid-frame, or write from two processes at once.

Usage: fuzz_channel.py PYTHON [--seed N] [--random N]
"""

import argparse
import concurrent.futures
import gzip
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples",
                       "humaneval")
RUNNER = os.path.join(EXAMPLE, "sandbox_runner.py")
DATASET = os.path.join(EXAMPLE, "data", "HumanEval.jsonl.gz")
MAX_REPLY = 16 << 20
PLAIN = (type(None), bool, int, float, complex, str, bytes, list, tuple,
         dict, set, frozenset)


def fail(what):
    print(f"FAIL: {what}"[:6000])
    sys.exit(1)


def load_runner():
    """The runner as a module (it filters sys.path on import: restored)."""
    saved = list(sys.path)
    sys.path.insert(0, EXAMPLE)
    try:
        import sandbox_runner
    finally:
        sys.path[:] = saved
    return sandbox_runner


def framed(payload):
    return len(payload).to_bytes(4, "big") + payload


# -- the streams --------------------------------------------------------------

def adversarial():
    """name -> the bytes a hostile candidate writes (frames included)."""
    deep = b"l1:" * 999 + b"N"
    too_deep = b"l1:" * 1001 + b"N"
    out = {
        # framing
        "eof_at_once": b"",
        "eof_in_length": b"\x00\x00",
        "eof_in_payload": b"\x00\x00\x00\x10t2:s2:ok",
        "zero_length": framed(b""),
        "length_over_max": (MAX_REPLY + 1).to_bytes(4, "big"),
        "length_u32_max": b"\xff\xff\xff\xff",
        "length_short": b"\x00\x00\x00\x03t2:s2:okN",
        # numbers
        "float_overflow": framed(b"f0x1p99999;"),
        "float_overflow_neg": framed(b"f-0x1p99999;"),
        "float_overflow_in_ok": framed(b"t2:s2:okf0x1p99999;"),
        "complex_overflow": framed(b"t2:s2:okc0x1p99999;0x0p+0;"),
        "float_nan_answer": framed(b"t2:s2:okfnan;"),
        "float_inf_answer": framed(b"t2:s2:okfinf;"),
        "float_empty": framed(b"f;"),
        "float_unterminated": framed(b"f0x1p3"),
        "float_words": framed(b"fhello;"),
        "int_huge_hex": framed(b"t2:s2:oki" + b"f" * 200000 + b";"),
        "int_empty": framed(b"i;"),
        "int_minus_only": framed(b"i-;"),
        "int_garbage": framed(b"i0xzz;"),
        "length_5000_digits": framed(b"s" + b"1" * 5000 + b":x"),
        "length_20_digits": framed(b"s99999999999999999999:x"),
        "length_negative": framed(b"s-1:"),
        "length_exponent": framed(b"s1e3:x"),
        "length_unicode_digit": framed("s\u0661:x".encode()),
        "count_huge": framed(b"l99999999999:N"),
        "count_negative": framed(b"l-1:N"),
        # text
        "str_bad_utf8": framed(b"t2:s2:oks3:\xff\xfe\xfd"),
        "str_lone_surrogate": framed(b"t2:s2:oks3:\xed\xa0\x80"),
        "raise_lone_surrogate": framed(b"t3:s5:raises10:ValueErrors3:"
                                       b"\xed\xa0\x80"),
        "raise_surrogate_kind": framed(b"t3:s5:raises3:\xed\xa0\x80s1:x"),
        "raise_non_text": framed(b"t3:s5:raisei1;i2;"),
        "raise_system_exit": framed(b"t3:s5:raises10:SystemExits1:x"),
        "raise_needs_args": framed(b"t3:s5:raises18:UnicodeDecodeError"
                                   b"s1:x"),
        "raise_deep": framed(b"t3:s5:raise" + deep + b"s1:x"),
        "raise_deep_message": framed(b"t3:s5:raises10:ValueError" + deep),
        "tag_non_ascii": framed(b"\xff"),
        "tag_nul": framed(b"\x00"),
        "bytes_short": framed(b"b5:ab"),
        # structure
        "nested_ok": framed(b"t2:s2:ok" + deep),
        "nested_too_deep": framed(b"t2:s2:ok" + too_deep),
        "nested_tuples_5000": framed(b"t1:" * 5000 + b"N"),
        "nested_dicts": framed(b"d1:s1:k" * 999 + b"N"),
        "set_of_list": framed(b"t2:s2:okS1:l0:"),
        "dict_list_key": framed(b"t2:s2:okd1:l0:N"),
        "frozenset_of_set": framed(b"t2:s2:okz1:S0:"),
        "set_of_deep_tuple": framed(b"t2:s2:okS1:" + b"t1:" * 990 + b"N"),
        "missing_item": framed(b"t2:s2:ok"),
        "trailing_bytes": framed(b"NN"),
        "wrong_shapes": b"".join(framed(p) for p in (
            b"t1:s2:ok", b"t3:s2:okNN", b"N", b"t0:", b"t1:s6:loaded",
            b"t2:s6:loadedN", b"t2:s5:readyl0:")),
        # Answers ahead of their calls are answers all the same (as a
        # completion counting its calls could give): all true is wrong.
        "forged_answers": framed(b"t2:s2:okT") * 7,
    }
    return out


def random_streams(rng, runner, count):
    """Random bytes, and valid encodings of random data mutated a little."""
    def value(depth=0):
        kind = rng.randrange(12 if depth < 4 else 7)
        if kind == 0:
            return None
        if kind == 1:
            return rng.random() < 0.5
        if kind == 2:
            return rng.randrange(-(1 << 70), 1 << 70)
        if kind == 3:
            return rng.choice([rng.uniform(-1e300, 1e300), float("nan"),
                               float("inf"), -0.0, 5e-324])
        if kind == 4:
            return "".join(chr(rng.randrange(0x110000))
                           for _ in range(rng.randrange(6)))
        if kind == 5:
            return bytes(rng.randrange(256) for _ in range(rng.randrange(6)))
        if kind == 6:
            return complex(rng.random(), rng.random())
        items = [value(depth + 1) for _ in range(rng.randrange(4))]
        if kind == 7:
            return items
        if kind == 8:
            return tuple(items)
        if kind == 9:
            return {i: v for i, v in enumerate(items)}
        return frozenset(range(len(items)))

    out = {}
    for i in range(count):
        how = rng.randrange(3)
        if how == 0:
            data = bytes(rng.randrange(256)
                         for _ in range(rng.randrange(1, 40)))
            if rng.random() < 0.7:
                data = framed(data)
        else:
            reply = ("ok", value()) if rng.random() < 0.8 else \
                ("raise", "ValueError", "x")
            data = bytearray(runner.frame(runner.encode(reply)))
            for _ in range(rng.randrange(1, 4)):
                if not data:
                    break
                at = rng.randrange(len(data))
                op = rng.randrange(4)
                if op == 0:
                    data[at] = rng.randrange(256)
                elif op == 1:
                    data.insert(at, rng.randrange(256))
                elif op == 2 and len(data) > 1:
                    del data[at]
                else:
                    del data[at:]
            data = bytes(data)
            if how == 2 and len(data) >= 4:  # keep the length true
                data = framed(data[4:])
        out[f"random_{i}"] = data
    return out


# -- 1. in process ------------------------------------------------------------

def is_plain(v):
    todo, seen = [v], 0
    while todo:
        x = todo.pop()
        seen += 1
        if type(x) not in PLAIN or seen > 10 ** 6:
            return False
        if type(x) is dict:
            todo.extend(x.keys())
            todo.extend(x.values())
        elif type(x) in (list, tuple, set, frozenset):
            todo.extend(x)
    return True


def recv_all(runner, data):
    """Feeds `data` to a Channel over a pipe; the outcomes of recv."""
    r, w = os.pipe()
    er, ew = os.pipe()
    sink_r, sink_w = os.pipe()
    os.close(ew)

    def writer():
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(w, view[:1 << 16]):]
        except OSError:
            pass
        finally:
            os.close(w)

    t = threading.Thread(target=writer)
    t.start()
    outcomes = []
    try:
        chan = runner.Channel(-1, sink_w, r, er, time.monotonic() + 10)
        for _ in range(20):
            try:
                v = chan.recv()
            except runner.CandidateGone as e:
                outcomes.append(("gone", str(e)))
                break
            if not is_plain(v):
                raise AssertionError(f"not plain data: {type(v)}")
            outcomes.append(("value", type(v).__name__))
    finally:
        os.close(r)
        t.join()
        for fd in (er, sink_r, sink_w):
            os.close(fd)
    return outcomes


def in_process(runner, streams):
    """Checks every stream; returns the names of those that decode to a
    value first."""
    decodable = set()
    for name, data in streams.items():
        try:
            outcomes = recv_all(runner, data)
        except BaseException as e:
            fail(f"in process/{name}: recv raised {type(e).__name__}: "
                 f"{str(e)[:300]} on {data[:120]!r}")
        if not outcomes or outcomes[-1][0] != "gone":
            fail(f"in process/{name}: the stream did not end in "
                 f"CandidateGone: {outcomes}")
        if outcomes[0][0] == "value":
            decodable.add(name)
    n = MAX_REPLY - 20
    big = framed(b"s%d:" % n + b"x" * n)
    out = recv_all(runner, big + big)
    if [kind for kind, _ in out] != ["value", "value", "gone"]:
        fail(f"in process: two 16 MiB frames: {out}")
    out = recv_all(runner, framed(b"s%d:" % MAX_REPLY + b"x" * MAX_REPLY))
    if out != [("gone", f"sent more than {MAX_REPLY} bytes")]:
        fail(f"in process: a frame over 16 MiB: {out}")
    print(f"ok: in process: {len(streams) + 2} streams, every one plain data "
          "then CandidateGone")
    return decodable


# -- 2. end to end ------------------------------------------------------------

WRONG = "    return None\n"


def at_import(data):
    return WRONG + f"\nimport os\nos.write(4, {data!r})\n"


def in_call(data):
    return (f"    import os\n    os.write(4, {data!r})\n"
            "    return None\n")


def special_cases(task):
    right = task["canonical_solution"]
    big = framed(b"t2:s2:oks10000:" + b"x" * 10000)
    return {
        # (completion, expected status, reward)
        "closes_reply_fd": (WRONG + "\nimport os\nos.close(4)\n",
                            "failed", 0.0),
        "closes_request_fd": (WRONG + "\nimport os\nos.close(3)\n",
                              "failed", 0.0),
        "replies_to_stderr": (WRONG + "\nimport os\nos.dup2(2, 4)\n",
                              "failed", 0.0),
        "stops_mid_frame": (WRONG + "\nimport os, time\n"
                            "os.write(4, b'\\x00\\x00\\x00\\x09t2:s')\n"
                            "time.sleep(30)\n", "timeout", 0.0),
        "eof_then_lives": ("    return None\nimport os, time\n"
                           "os.close(4)\ntime.sleep(30)\n", "failed", 0.0),
        "interleaved_writers": (
            "    import os\n"
            "    if os.fork() == 0:\n"
            f"        for _ in range(50): os.write(4, {big!r})\n"
            "        os._exit(0)\n"
            f"    for _ in range(50): os.write(4, {big!r})\n"
            "    return None\n", "failed", 0.0),
        "interleaved_small": (
            "    import os\n"
            "    if os.fork() == 0:\n"
            "        for _ in range(200): os.write(4, b'\\x00\\x00\\x00\\x09"
            "t2:s2:okT')\n"
            "        os._exit(0)\n"
            "    return False\n", "failed", 0.0),
        "right": (right, "passed", 1.0),
        "right_noisy_stderr": (right + "\nimport os\n"
                               "os.write(2, b'\\xff\\xfe' * 5000)\n",
                               "passed", 1.0),
    }


def strict_json(raw):
    """As strict as the caller's parser: UTF-8, no NaN, no lone surrogate."""
    def no_constant(name):
        raise ValueError(f"non-standard constant {name}")

    value = json.loads(raw.decode("utf-8"), parse_constant=no_constant)
    todo = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, str):
            v.encode("utf-8")  # raises on a lone surrogate
        elif isinstance(v, dict):
            todo.extend(v.keys())
            todo.extend(v.values())
        elif isinstance(v, list):
            todo.extend(v)
    return value


def grade(python, runner, task, tmp, name, completion, timeout_s):
    d = os.path.join(tmp, name)
    os.mkdir(d)
    with open(os.path.join(d, "sandbox_runner.py"), "w") as f:
        f.write(runner)
    with open(os.path.join(d, "request.json"), "w") as f:
        json.dump({"task_id": task["task_id"], "prompt": task["prompt"],
                   "completion": completion, "test": task["test"],
                   "entry_point": task["entry_point"],
                   "timeout_s": timeout_s}, f)
    proc = subprocess.run([python, "sandbox_runner.py", "request.json",
                           "result.json"], cwd=d, capture_output=True,
                          timeout=60)
    try:
        with open(os.path.join(d, "result.json"), "rb") as f:
            raw = f.read()
    except OSError:
        raw = None
    shutil.rmtree(d, ignore_errors=True)
    return proc, raw


def end_to_end(python, task, streams, decodable):
    sys.path.insert(0, EXAMPLE)
    from make_jobs import pack_runner
    with open(RUNNER, encoding="utf-8") as f:
        runner = pack_runner(f.read(), python)
    cases = {}
    for name, data in streams.items():
        # Bytes that leave the judge waiting for the rest of a frame (a
        # length larger than what follows) end at the deadline.
        cases["import_" + name] = (at_import(data), "failed|timeout", 0.0)
        if name in decodable:
            cases["call_" + name] = (in_call(data), "failed|timeout", 0.0)
    cases.update(special_cases(task))
    with tempfile.TemporaryDirectory(prefix="sv-fuzz-channel-") as tmp, \
            concurrent.futures.ThreadPoolExecutor(2) as pool:
        futures = {name: pool.submit(grade, python, runner, task, tmp, name,
                                     c, 10 if right else 2)
                   for name, (c, _, right) in cases.items()}
        seen = {}
        for name, fut in futures.items():
            _, status, reward = cases[name]
            proc, raw = fut.result()
            where = f"end to end/{name}"
            if proc.returncode != 0:
                fail(f"{where}: runner exit {proc.returncode} (a masked "
                     f"sample)\n{proc.stderr.decode(errors='replace')}")
            try:
                result = strict_json(raw)
            except (ValueError, UnicodeError, AttributeError) as e:
                fail(f"{where}: result.json a strict parser rejects: {e}: "
                     f"{raw[:300]!r}")
            got = (result.get("status"), result.get("reward"))
            if got[0] not in status.split("|") or got[1] != reward:
                fail(f"{where}: {got}, expected {(status, reward)}\n"
                     f"{result.get('detail', '')[:1500]}")
            seen[got[0]] = seen.get(got[0], 0) + 1
    print(f"ok: end to end: {len(cases)} completions, every one as "
          f"expected, exit 0, strict JSON ({seen})")


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("python")
    p.add_argument("--seed", type=int, default=19)
    p.add_argument("--random", type=int, default=3000)
    args = p.parse_args(argv[1:])
    runner = load_runner()
    rng = random.Random(args.seed)
    streams = adversarial()
    e2e = dict(streams, **random_streams(rng, runner, 4))
    decodable = in_process(runner, dict(e2e, **random_streams(
        rng, runner, args.random)))
    with gzip.open(DATASET, "rt", encoding="utf-8") as f:
        task = json.loads(f.readline())
    end_to_end(args.python, task, e2e, decodable)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
