#!/usr/bin/env python3
"""sv-grade end to end with OCI images on the local provider (issue 21,
items 1, 2 and 5): a test registry on 127.0.0.1 (Debian's docker-registry),
images built from a small root file system (the host's python and a
marker file) and pushed with skopeo.

- the runner proves it runs in the image: its marker file, the image's
  Env, no host file (/usr/bin/apt), `python3` resolved in the image;
- two images differ; the oci:DIR:TAG and root-directory forms work;
- / is writable (mkdir -p /tests) and the write is gone with the sandbox;
- a tag and a layout are served from the cache while they name the same
  digest; a moved tag is graded afresh (the new image), not from the
  cache, and then served from it; a root directory is never cached;
- while an image's pull is slow (a proxy that delays blobs), host-view
  lines still complete (pulls hold no caller-path thread);
- a missing image and an unreachable registry are masked
  provider_unavailable at create, never graded on the host's view;
- hostile layers (.., absolute, a symlinked parent, a device node, a link
  out) are provider_unavailable naming the entry; the host is untouched;
- a root directory or layout that is, holds or lies in a hidden path (or
  reaches one through a symlink), or whose name carries a mount option, is
  refused;
- ten concurrent creates of a new image pull it once;
- through sv-serve: the sandbox API, /v1/verify, and /run_code with a
  language whose table entry names the image (docs/compat.md).

Skipped (77) without root, bwrap, skopeo, umoci or docker-registry.
Usage: e2e_image.py SV_GRADE MAKE_JOBS PYTHON
"""

import json
import os
import re
import subprocess
import sys
import tarfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "sv_grade"))
from e2e_common import Env, check, parse_output  # noqa: E402
import image_kit  # noqa: E402

RUNNER = """import json, os, sys
marker = open('/etc/sv-image-marker').read().strip() \\
    if os.path.exists('/etc/sv-image-marker') else None
seen = os.path.exists('/tests/left-behind')
try:
    os.makedirs('/tests/deep', exist_ok=True)
    open('/tests/left-behind', 'w').write('x')
    wrote = True
except OSError:
    wrote = False
json.dump({'reward': 1.0, 'marker': marker, 'exe': sys.executable,
           'env': os.environ.get('SV_IMAGE_ENV'),
           'host_apt': os.path.exists('/usr/bin/apt'),
           'seen_earlier_write': seen, 'wrote_root': wrote},
          open(sys.argv[2], 'w'))
"""


def line(id_, image):
    return json.dumps({"id": id_, "request": {}, "exec_timeout_s": 30,
                       "config": {"python": "python3", "image": image,
                                  "ready_timeout_s": 120},
                       "files": {"sandbox_runner.py": RUNNER}})


def main():
    env = Env(sys.argv)
    missing = image_kit.missing_tools()
    if missing:
        print(f"skipped: needs {', '.join(missing)}")
        sys.exit(77)
    reg = image_kit.Registry(env.dir)
    try:
        run(env, reg)
    finally:
        reg.stop()


def run(env, reg):
    store = env.path("state/sv/images")  # parents made by the store
    with open(env.provider_config, "w") as f:
        json.dump({"local": {"root": env.path("sandboxes"),
                             "image_store": store,
                             "insecure_registries": [reg.host],
                             # rootfs-c; the hostile directories below are
                             # refused for what they are first.
                             "image_dirs": [env.dir],
                             "image_tag_ttl_s": 0}}, f)
    a = image_kit.make_image(env.dir, "layout-a", "image-A")
    b = image_kit.make_image(env.dir, "layout-b", "image-B")
    ref_a = reg.push(a, "test/a:1")
    ref_b = reg.push(b, "test/b:1")
    root_dir = env.path("rootfs-c")
    subprocess.run([os.path.join(image_kit.HERE, "make_rootfs.sh"), root_dir,
                    "image-C"], check=True)
    dead = f"127.0.0.1:{image_kit.free_port()}/test/a:1"

    def grade(lines, extra=()):
        proc = env.grade(["--input", "-", "--output", "-", "--concurrency",
                          "10", "--log-level", "info", *extra],
                         stdin="\n".join(lines) + "\n", timeout=600)
        check(proc.returncode == 0, f"exit status {proc.returncode}", proc)
        return {o["id"]: o for o in parse_output(proc.stdout)}, proc

    cache = ["--cache", env.path("cache.db")]
    out, proc = grade([line("a", ref_a), line("b", "docker://" + ref_b),
                       line("host", ""), line("oci", "oci:" + b),
                       line("dir", root_dir), line("a-again", ref_a),
                       line("missing", f"{reg.host}/test/nope:1"),
                       line("dead", dead)], cache)

    def result(id_):
        o = out[id_]
        check(o["ok"], f"{id_}: {o}", proc)
        return o["result"]

    for id_, marker in [("a", "image-A"), ("b", "image-B"),
                        ("oci", "image-B"), ("dir", "image-C"),
                        ("a-again", "image-A")]:
        r = result(id_)
        check(r["marker"] == marker and not r["host_apt"] and
              r["exe"].startswith("/usr/bin/python3") and
              r["wrote_root"] and not r["seen_earlier_write"],
              f"{id_}: {r}", proc)
    check(result("a")["env"] == "image-A", f"a: {result('a')}")
    check(result("host")["marker"] is None and result("host")["host_apt"] and
          not result("host")["wrote_root"],
          f"host: {result('host')}")
    for id_, needle in [("missing", "unavailable"), ("dead", "skopeo")]:
        f = out[id_]["failure"]
        check(not out[id_]["ok"] and out[id_]["mask_sample"] and
              (f["failure_kind"], f["state"]) ==
              ("provider_unavailable", "create") and needle in f["message"],
              f"{id_}: {out[id_]}", proc)

    # Unchanged, a tag and a layout are answered from the cache (keyed by
    # the digest they resolve to); a root directory never is.
    out, proc = grade([line("a", ref_a), line("oci", "oci:" + b),
                       line("dir", root_dir)], cache)
    for id_, marker, cached in [("a", "image-A", True),
                                ("oci", "image-B", True),
                                ("dir", "image-C", False)]:
        check(result(id_)["marker"] == marker and
              bool(out[id_].get("cached")) == cached,
              f"unchanged {id_}: {out[id_]}", proc)

    # The tag moves: the same line is graded afresh in the new image, then
    # that answer is served from the cache while the tag stays.
    reg.push(b, "test/a:1")
    out, proc = grade([line("a", ref_a)], cache)
    r = result("a")
    check(r["marker"] == "image-B" and not out["a"].get("cached"),
          f"moved tag: {out['a']}", proc)
    out, proc = grade([line("a", ref_a)], cache)
    check(result("a")["marker"] == "image-B" and out["a"].get("cached"),
          f"moved tag, unchanged since: {out['a']}", proc)
    # Moved back: graded in image-A again (its earlier answer is keyed by
    # image-A's digest, so served from the cache, and right).
    reg.push(a, "test/a:1")
    out, proc = grade([line("a", ref_a)], cache)
    check(result("a")["marker"] == "image-A", f"moved back: {out['a']}",
          proc)

    slow_pull(env, reg, grade)

    # Ten concurrent creates of a new image pull it once.
    ref_d = reg.push(image_kit.make_image(env.dir, "layout-d", "image-D"),
                     "test/d:1")
    out, proc = grade([line(f"d{i}", ref_d) for i in range(10)])
    for i in range(10):
        check(result(f"d{i}")["marker"] == "image-D", f"d{i}", proc)
    pulls = len(re.findall(r"image docker://\S+/test/d:1 \(sha256:[0-9a-f]+\): "
                           r"pulled in", proc.stderr))
    check(pulls == 1, f"{pulls} pulls of test/d:1", proc)

    # Hostile layers: each refused naming why, nothing lands on the host.
    victim = env.path("victim")
    os.makedirs(victim)
    E = image_kit.entry
    hostile = {
        "dotdot": ([E("../../../../../../../" + victim[1:] + "/x", data=b"e")],
                   '".." in the name'),
        "absolute": ([E(victim + "/x", data=b"e")], "absolute name"),
        "symlink-parent": ([E("esc", tarfile.SYMTYPE, link=victim),
                            E("esc/x", data=b"e")],
                           "is a symlink or not a directory"),
        "device": ([E("dev/sda", tarfile.BLKTYPE)], "a device node"),
        "link-out": ([E("h", tarfile.LNKTYPE, link="../" + victim)],
                     '".." in the name'),
    }
    lines = []
    for name, (entries, _) in hostile.items():
        layout = image_kit.make_raw_image(env.dir, "bad-" + name,
                                          [[E("etc/ok", data=b"1")], entries])
        lines.append(line(name, reg.push(layout, f"test/bad-{name}:1")))
    # An Env entry with a NUL byte would split into extra options of
    # bwrap (root) in its NUL-separated argument file: the image is refused.
    nul = image_kit.make_raw_image(
        env.dir, "bad-env", [[E("etc/ok", data=b"1")]],
        env=["PATH=/usr/bin:/bin", "X=a\0--unsetenv\0SV_SANDBOX_ID"])
    lines.append(line("env-nul", reg.push(nul, "test/bad-env:1")))
    # Host paths sandboxes may not see, as a root or a layout; a mount
    # option smuggled in a directory's name.
    os.symlink("/root", env.path("to-root"))
    os.makedirs(env.path("a,upperdir=x"))
    forbidden = {"hidden": ("/root", "which sandboxes may not see"),
                 "holds-root": (env.dir, "which sandboxes may not see"),
                 "symlink": (env.path("to-root"),
                             "which sandboxes may not see"),
                 "layout-hidden": ("oci:/root:1",
                                   "which sandboxes may not see"),
                 "comma": (env.path("a,upperdir=x"), "holds ','")}
    lines += [line(n, ref) for n, (ref, _) in forbidden.items()]
    out, proc = grade(lines)
    for name, (_, needle) in forbidden.items():
        f = out[name]["failure"]
        check(not out[name]["ok"] and
              (f["failure_kind"], f["state"]) ==
              ("provider_unavailable", "create") and needle in f["message"],
              f"{name}: {out[name]}", proc)
    for name, (_, needle) in hostile.items():
        f = out[name]["failure"]
        check(not out[name]["ok"] and
              (f["failure_kind"], f["state"]) ==
              ("provider_unavailable", "create") and
              "bad layer" in f["message"] and needle in f["message"],
              f"{name}: {out[name]}", proc)
    f = out["env-nul"]["failure"]
    check(not out["env-nul"]["ok"] and
          (f["failure_kind"], f["state"]) == ("provider_unavailable", "create")
          and "Env[1] holds a NUL byte" in f["message"],
          f"env-nul: {out['env-nul']}", proc)
    check(os.listdir(victim) == [], f"the host was written: "
          f"{os.listdir(victim)}")
    check(not any(n.endswith(".partial") for n in
                  os.listdir(os.path.join(store, "images"))),
          "a half-made image stayed in the store")
    serve = os.environ.get("SV_SERVE")
    if serve:
        through_serve(serve, env, ref_a, reg)
    print("ok: images from a registry, a layout and a directory; tags and "
          "layouts cached by digest, moved tag regraded; slow pull stalls no "
          "host line; missing and unreachable masked; 5 hostile layers "
          "refused; 10 concurrent creates, 1 pull" +
          ("; sv-serve: sandbox API and /v1/verify in the image" if serve
           else " (SV_SERVE unset: sv-serve not tried)"))


def slow_pull(env, reg, grade):
    """While an image's pull is slow (a registry proxy that waits 8 s per
    blob), host-view lines still go through: creates waiting for a pull
    hold no caller-path thread (4 of them, the default)."""
    delay = 8
    proxy = image_kit.SlowProxy(reg.host, delay)
    try:
        with open(env.provider_config) as f:
            cfg = json.load(f)
        cfg["local"]["insecure_registries"].append(proxy.host)
        with open(env.provider_config, "w") as f:
            json.dump(cfg, f)
        reg.push(image_kit.make_image(env.dir, "layout-e", "image-E"),
                 "test/e:1")
        ref_e = f"{proxy.host}/test/e:1"
        lines = [line(f"e{i}", ref_e) for i in range(5)]
        lines += [line(f"h{i}", "") for i in range(5)]
        out, proc = grade(lines)

        def result(id_):
            check(out[id_]["ok"], f"{id_}: {out[id_]}", proc)
            return out[id_]["result"]

        for i in range(5):
            e, h = out[f"e{i}"], out[f"h{i}"]
            check(result(f"e{i}")["marker"] == "image-E" and
                  e["timings_ms"]["total"] >= delay * 1000,
                  f"slow image e{i}: {e}", proc)
            check(result(f"h{i}")["marker"] is None and
                  h["timings_ms"]["total"] < (delay - 2) * 1000,
                  f"host h{i} waited for the slow pull: {h}", proc)
        worst = max(out[f"h{i}"]["timings_ms"]["total"] for i in range(5))
        print(f"slow pull ({delay} s a blob): host lines done in at most "
              f"{worst:.0f} ms")
    finally:
        proxy.stop()


def through_serve(binary, env, ref, reg):
    """sv-serve with the same provider: the sandbox API and /v1/verify run
    in the image; a missing image is 503 unavailable naming it."""
    sys.path.insert(0, os.path.join(image_kit.HERE, "..", "serve"))
    from e2e_serve import Server, check  # noqa: E402
    # /run_code's language table (docs/compat.md): an entry with an image
    # runs its calls in that image.
    compat = os.path.join(env.dir, "compat.json")
    with open(compat, "w") as f:
        json.dump({"languages": {"python-image": {
            "source": "main.py", "run": ["{python}", "main.py"],
            "image": ref}}}, f)
    s = Server(binary, env.dir, ["--provider-config", env.provider_config,
                                 "--compat-config", compat], "serve")

    def call(method, path, body=None):
        st, _, raw = s.request(method, path, json.dumps(body)
                               if body is not None else None,
                               {"Content-Type": "application/json"})
        return st, json.loads(raw) if raw else None

    try:
        st, body = call("POST", "/v1/sandboxes", {"image": ref, "ttl_s": 60})
        check(st == 201, f"serve create: {st} {body}", s)
        base = "/v1/sandboxes/" + body["sandbox_id"]
        st, body = call("POST", base + "/exec", {
            "argv": ["python3", "-c",
                     "import os; os.makedirs('/tests/x'); "
                     "print(open('/etc/sv-image-marker').read().strip(), "
                     "os.path.exists('/usr/bin/apt'))"], "timeout_s": 30})
        check(st == 200 and body["stdout"] == "image-A False\n",
              f"serve exec: {st} {body}", s)
        st, body = call("DELETE", base)
        check(st in (200, 204), f"serve stop: {st} {body}", s)
        st, body = call("POST", "/v1/sandboxes",
                        {"image": f"{reg.host}/test/nope:1", "ttl_s": 60})
        check(st == 503 and body["error"]["code"] == "unavailable" and
              "test/nope:1" in body["error"]["message"],
              f"serve missing image: {st} {body}", s)
        job = json.loads(line("v", ref))
        st, body = call("POST", "/v1/verify", job)
        check(st == 200 and body["ok"] and
              body["result"]["marker"] == "image-A", f"verify: {body}", s)
        where = ("import os; print(open('/etc/sv-image-marker').read()"
                 ".strip(), os.path.exists('/usr/bin/apt'))\n")
        st, body = call("POST", "/run_code", {"code": where,
                                              "language": "python-image"})
        check(st == 200 and body["status"] == "Success" and
              body["run_result"]["stdout"] == "image-A False\n",
              f"/run_code in the language's image: {st} {body}", s)
        st, body = call("POST", "/run_code", {"code": where,
                                              "language": "python"})
        check(st == 200 and body["status"] == "Failed" and
              "sv-image-marker" in body["run_result"]["stderr"],
              f"/run_code on the host's view: {st} {body}", s)
        deadline = time.monotonic() + 120  # the probe of the image's PATH
        while True:
            st, body = call("GET", "/v1/languages")
            entry = [x for x in body["languages"]
                     if x["name"] == "python-image"]
            if st != 200 or not entry or entry[0]["available"] is not None \
                    or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        check(st == 200 and entry and entry[0]["image"] == ref and
              entry[0]["available"] is True, f"languages: {body}", s)
    finally:
        s.stop()


if __name__ == "__main__":
    main()
