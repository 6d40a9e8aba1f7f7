#!/usr/bin/env python3
"""HumanEval through an OCI image against the host's view (issue 21 item 6),
alternating in one run: the same 164 canonical jobs, the same interpreter
binary (the host's /usr/bin/python3, copied into the image by
tests/image/make_rootfs.sh), graded by sv-grade on the local provider.
The image's first pull and unpack are timed and reported apart.

Usage: bench/image_speed.py SV_GRADE [ROUNDS] [CONCURRENCY]
Needs root, bwrap, skopeo and umoci (as tests/image/e2e_image.py).
"""

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "image"))
import image_kit  # noqa: E402


def main():
    sv_grade = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    concurrency = sys.argv[3] if len(sys.argv) > 3 else "4"
    missing = image_kit.missing_tools()
    if missing:
        sys.exit(f"needs {', '.join(missing)}")
    tmp = tempfile.TemporaryDirectory(prefix="sv-image-bench-")
    d = tmp.name
    layout = image_kit.make_image(d, "layout", "bench")
    config = os.path.join(d, "provider.json")
    with open(config, "w") as f:
        json.dump({"local": {"root": os.path.join(d, "sandboxes"),
                             "image_store": os.path.join(d, "images")}}, f)
    jobs = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples/humaneval/make_jobs.py"),
         "--python", "/usr/bin/python3"], check=True, capture_output=True,
        text=True).stdout.splitlines()
    host = os.path.join(d, "host.jsonl")
    image = os.path.join(d, "image.jsonl")
    with open(host, "w") as h, open(image, "w") as i:
        for line in jobs:
            job = json.loads(line)
            h.write(json.dumps(job) + "\n")
            job["config"]["python"] = "python3"
            job["config"]["image"] = "oci:" + layout
            i.write(json.dumps(job) + "\n")

    def grade(path):
        started = time.monotonic()
        proc = subprocess.run(
            [sv_grade, "--provider-config", config, "--input", path,
             "--output", os.path.join(d, "out.jsonl"), "--concurrency",
             concurrency, "--log-level", "info"],
            capture_output=True, text=True)
        wall = time.monotonic() - started
        if proc.returncode != 0:
            sys.exit(proc.stderr[-3000:])
        out = [json.loads(x) for x in open(os.path.join(d, "out.jsonl"))]
        ok = sum(1 for o in out if o["ok"] and o["result"]["reward"] == 1.0)
        return wall, ok, proc.stderr

    # The first pull and unpack (one line), reported, not hidden.
    first = os.path.join(d, "first.jsonl")
    with open(first, "w") as f:
        f.write(open(image).readline())
    wall, _, log = grade(first)
    pull = re.search(r"pulled in (\d+) ms, unpacked \((\d+) files, (\d+) MiB\) "
                     r"in (\d+) ms", log)
    print(f"first use of the image: one line in {wall:.2f} s; " +
          (f"pull {pull[1]} ms, unpack {pull[4]} ms ({pull[2]} files, "
           f"{pull[3]} MiB)" if pull else "no pull logged"))
    walls = {"host": [], "image": []}
    for r in range(rounds):
        for name, path in (("host", host), ("image", image)):
            wall, ok, _ = grade(path)
            walls[name].append(len(jobs) / wall)
            print(f"round {r + 1} {name:5}: {len(jobs)} lines, {ok} reward "
                  f"1.0, {wall:.2f} s, {len(jobs) / wall:.1f} lines/s")
    h, i = statistics.median(walls["host"]), statistics.median(walls["image"])
    print(f"median lines/s: host {h:.1f}, image {i:.1f}, image/host "
          f"{i / h:.3f}")


if __name__ == "__main__":
    main()
