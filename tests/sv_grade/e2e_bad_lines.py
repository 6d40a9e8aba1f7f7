#!/usr/bin/env python3
"""sv-grade end to end on a batch that mixes bad lines with good ones: one
output line per input line, each bad one naming its line and field, the good
ones graded, exit status 0."""

import json
import sys

from e2e_common import Env, OUTPUT_KEYS, check, parse_output


def bad_lines(good):
    """(line text, id expected in the output, text the message must have)."""
    job = json.loads(good)
    runner = job["files"]["sandbox_runner.py"]

    def variant(**changes):
        j = dict(job, id="bad-" + changes.pop("tag"))
        for key, value in changes.items():
            if value is None:
                j.pop(key)
            else:
                j[key] = value
        return json.dumps(j)

    return [
        ("this is not json", None, "not valid JSON"),
        (variant(tag="noid", id=None), None, "id: missing required field"),
        (variant(tag="nofiles", files=None), "bad-nofiles",
         "files: missing required field"),
        (variant(tag="norunner", files={"harness.py": runner}),
         "bad-norunner", "files: missing sandbox_runner.py"),
        (variant(tag="dotdot", files={"sandbox_runner.py": runner,
                                      "../x": "boo"}),
         "bad-dotdot", 'files: path "../x" escapes the sandbox'),
        (variant(tag="unknown", surprise=1), "bad-unknown",
         "surprise: unknown key"),
        (variant(tag="type", exec_timeout_s="thirty"), "bad-type",
         "exec_timeout_s: expected a number, got string"),
        # Request errors: invalid_request before any sandbox, never
        # provider_unavailable (a caller would retry those).
        (variant(tag="envname", config={"env": {"A=B": "1"}}), "bad-envname",
         'config.env: "A=B" is not a variable name'),
        (variant(tag="longname", files={"sandbox_runner.py": runner,
                                        "x" * 300: ""}),
         "bad-longname", "has a component of 300 bytes (at most 255)"),
        (variant(tag="filedir", files={"sandbox_runner.py": runner,
                                       "a": "", "a/b": ""}),
         "bad-filedir", 'files: "a" is a file and also the directory of "a/b"'),
        (variant(tag="ttl", exec_timeout_s=604800), "bad-ttl",
         "exec_timeout_s: with config.ready_timeout_s and the 300 s margin"),
        (variant(tag="tiny", exec_timeout_s=1e-320), "bad-tiny",
         "exec_timeout_s: must be at least 0.001 s"),
        # Hostile JSON: refused, never a crash; the rest is graded.
        ('{"id": "deep", "request": ' + "[" * 75000 + "]" * 75000 + "}",
         None, "nested deeper than 256 levels at request"),
        ('{"id": "dup", "id": "dup2"}', None, 'duplicate key "id"'),
        (good[:-1] + ', "id": "x"}', None, 'duplicate key "id"'),
        (good + "\0junk", None, "a NUL byte at offset"),
        (good + " {}", None, "not valid JSON"),
        (variant(tag="huge", exec_timeout_s=None)[:-1] +
         ', "exec_timeout_s": 1' + "0" * 5000 + "}", None,
         "number overflow"),
    ]


def main():
    env = Env(sys.argv)
    good = env.jobs("--variant", "canonical", "--limit", "3")
    bad = bad_lines(good[0])
    # Interleave: good, bad, bad, good, bad, ...
    lines, expect_bad = [], {}
    for i, (text, id_, needle) in enumerate(bad):
        if i % 3 == 0 and good:
            lines.append(good.pop(0))
        lines.append(text)
        expect_bad[len(lines)] = (id_, needle)
    lines += good
    with open(env.path("in.jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n")
    proc = env.grade(["--input", env.path("in.jsonl"),
                      "--output", env.path("out.jsonl")])
    check(proc.returncode == 0, f"exit status {proc.returncode}", proc)
    check(proc.stdout == "", "stdout must stay empty with --output FILE")
    with open(env.path("out.jsonl")) as f:
        outputs = parse_output(f.read())
    check(len(outputs) == len(lines), f"{len(outputs)} lines out of "
          f"{len(lines)}", proc)
    def invalid(o):
        return not o["ok"] and o["failure"]["failure_kind"] == "invalid_request"
    graded = [o for o in outputs if not invalid(o)]
    rejected = {o["line"]: o for o in outputs if invalid(o)}
    check(sorted(rejected) == sorted(expect_bad),
          f"rejected lines {sorted(rejected)}", proc)
    for n, (id_, needle) in expect_bad.items():
        out = rejected[n]
        f = out["failure"]
        check(set(out) == OUTPUT_KEYS, f"line {n}: keys")
        check(len(f["message"]) < 600, f"line {n}: message too long")
        check(out["id"] == id_, f"line {n}: id {out['id']!r}")
        check(out["ok"] is False and out["mask_sample"] is True
              and out["result"] is None, f"line {n}: verdict")
        check((f["failure_kind"], f["state"], f["cause"])
              == ("invalid_request", "validate", "invalid_request"),
              f"line {n}: failure {f}")
        check(f["message"].startswith(f"line {n}: ") and needle in
              f["message"], f"line {n}: message {f['message']!r}")
    check(len(graded) == 3, f"{len(graded)} graded lines", proc)
    for out in graded:
        check(set(out) == OUTPUT_KEYS and out["line"] not in expect_bad,
              f"{out['id']}: keys, line")
        check(out["ok"] and out["result"]["reward"] == 1.0,
              f"{out['id']}: {out}", proc)
    long_line(env, good_line(env))
    print(f"ok: {len(rejected)} rejected, {len(graded)} graded")


def good_line(env):
    return env.jobs("--variant", "canonical", "--limit", "1")[0]


def long_line(env, good):
    """A line over --max-line-bytes is invalid_request and never buffered
    whole: 100 MB through a 1 MiB limit leaves sv-grade's RSS small."""
    summary = env.path("long-summary.json")
    huge = '{"id": "huge", "pad": "' + "x" * (100 << 20) + '"}'
    text = "\n".join([good, huge, good]) + "\n"
    proc = env.grade(["--input", "-", "--output", "-", "--max-line-bytes",
                      str(1 << 20), "--summary-json", summary], stdin=text)
    check(proc.returncode == 0, f"long line: exit {proc.returncode}", proc)
    outputs = sorted(parse_output(proc.stdout), key=lambda o: o["line"])
    check([o["line"] for o in outputs] == [1, 2, 3], "long line: lines")
    f = outputs[1]["failure"]
    check(f["failure_kind"] == "invalid_request" and f["message"] ==
          f"line 2: {len(huge)} bytes, longer than --max-line-bytes "
          f"{1 << 20}", f"long line: {f}")
    check(outputs[0]["ok"] and outputs[2]["ok"], "long line: neighbours")
    peak = json.load(open(summary))["memory_kib"]["rss_peak"] / 1024
    print(f"a 100 MB line through a 1 MiB limit: peak RSS {peak:.0f} MiB")
    check(peak < 64 or env.sanitized, f"long line: peak RSS {peak:.0f} MiB")


if __name__ == "__main__":
    main()
