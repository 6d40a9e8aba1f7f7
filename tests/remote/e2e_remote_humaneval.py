#!/usr/bin/env python3
"""sv-grade with the `remote` provider against a real sv-serve (its local
provider behind it, a bearer token) grades 20 HumanEval submissions (10
canonical, 10 broken) with exactly the results sv-grade gets on the local
provider itself: the same ids, each with the same ok and reward. Nothing
is left under sv-serve's sandbox root afterwards.

Called as: e2e_remote_humaneval.py SV_GRADE SV_SERVE MAKE_JOBS PYTHON [tls]
With "tls", sv-serve speaks TLS with a certificate made here by the openssl
CLI and the provider's url is https with that CA; a provider with another CA
fails every line as provider_unavailable (the handshake is refused).
Exits 77 (skipped) when the local provider cannot start here, or for tls
without the openssl CLI.
"""

import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SKIP = 77


def check(cond, what, extra=""):
    if not cond:
        if extra:
            print(extra[-4000:])
        raise AssertionError(what)


def grade(sv_grade, provider_config, jobs, timeout=120):
    proc = subprocess.run(
        [sv_grade, "--input", "-", "--output", "-", "--provider-config",
         provider_config, "--concurrency", "8"],
        input="\n".join(jobs) + "\n", capture_output=True, text=True,
        timeout=timeout)
    return proc


def verdicts(proc):
    out = {}
    for line in proc.stdout.splitlines():
        j = json.loads(line)
        reward = j["result"]["reward"] if j["ok"] else None
        failure = None if j["ok"] else (j["failure"]["failure_kind"],
                                        j["failure"]["message"])
        out[j["id"]] = (j["ok"], reward, failure)
    return out


def make_certs(tmp):
    """A CA, a server certificate for 127.0.0.1 it signed, and another CA."""
    openssl = shutil.which("openssl")
    if openssl is None:
        print("skipped: no openssl CLI")
        sys.exit(SKIP)

    def run(*args):
        subprocess.run([openssl, *args], check=True, capture_output=True,
                       timeout=60, cwd=tmp)

    for ca in ("ca", "other-ca"):
        run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
            ca + ".key", "-out", ca + ".pem", "-days", "1", "-subj",
            "/CN=" + ca)
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key",
        "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    with open(os.path.join(tmp, "san.cnf"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey",
        "ca.key", "-CAcreateserial", "-out", "server.pem", "-days", "1",
        "-extfile", "san.cnf")


def main():
    if len(sys.argv) not in (5, 6):
        sys.exit(f"usage: {sys.argv[0]} SV_GRADE SV_SERVE MAKE_JOBS PYTHON [tls]")
    sv_grade, sv_serve, make_jobs, python = sys.argv[1:5]
    tls = len(sys.argv) == 6 and sys.argv[5] == "tls"
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sv-remote-e2e-") as tmp:
        jobs = subprocess.run(
            [python, make_jobs, "--python", python, "--variant", "alternate",
             "--limit", "20"],
            check=True, capture_output=True, text=True).stdout.splitlines()
        check(len(jobs) == 20, f"{len(jobs)} jobs")

        local_cfg = os.path.join(tmp, "local.json")
        with open(local_cfg, "w") as f:
            json.dump({"local": {"root": os.path.join(tmp, "local-root")}}, f)
        local = grade(sv_grade, local_cfg, jobs)
        if local.returncode != 0 and not local.stdout:
            print("skipped: the local provider cannot run here:\n" +
                  local.stderr[-2000:])
            sys.exit(SKIP)
        check(local.returncode == 0, f"local: exit {local.returncode}",
              local.stderr)
        expected = verdicts(local)

        # sv-serve with its own local provider, behind a token.
        serve_root = os.path.join(tmp, "serve-root")
        serve_cfg = os.path.join(tmp, "serve.json")
        with open(serve_cfg, "w") as f:
            json.dump({"local": {"root": serve_root}}, f)
        token_file = os.path.join(tmp, "token")
        with open(token_file, "w") as f:
            f.write("e2e-token-123\n")
        tls_args = []
        if tls:
            make_certs(tmp)
            tls_args = ["--tls-cert", os.path.join(tmp, "server.pem"),
                        "--tls-key", os.path.join(tmp, "server.key")]
        err = open(os.path.join(tmp, "serve.stderr"), "w")
        server = subprocess.Popen(
            [sv_serve, "--listen", "127.0.0.1:0", "--provider-config",
             serve_cfg, "--token-file", token_file, "--log-level", "warn",
             *tls_args],
            stdout=subprocess.PIPE, stderr=err, text=True)
        try:
            ready, _, _ = select.select([server.stdout], [], [], 30)
            line = server.stdout.readline() if ready else ""
            m = re.fullmatch(r"listening on 127\.0\.0\.1:(\d+)\n", line)
            check(m is not None, f"no 'listening on' line: {line!r}")
            scheme = "https" if tls else "http"

            def remote_block(ca=None):
                block = {"url": f"{scheme}://127.0.0.1:{m.group(1)}",
                         "token_file": token_file, "connections": 16}
                if ca:
                    block["ca_file"] = os.path.join(tmp, ca)
                return {"remote": block}

            remote_cfg = os.path.join(tmp, "remote.json")
            with open(remote_cfg, "w") as f:
                json.dump(remote_block("ca.pem" if tls else None), f)
            remote = grade(sv_grade, remote_cfg, jobs)
            if tls:
                # Another CA: the handshake is refused, every line is the
                # provider's failure.
                other_cfg = os.path.join(tmp, "other.json")
                with open(other_cfg, "w") as f:
                    json.dump(remote_block("other-ca.pem"), f)
                other = grade(sv_grade, other_cfg, jobs[:4])
                check(other.returncode == 0, f"other CA: exit {other.returncode}",
                      other.stderr)
                for sid, v in verdicts(other).items():
                    check(not v[0] and v[2][0] == "provider_unavailable" and
                          "TLS handshake" in v[2][1],
                          f"{sid} with another CA: {v}", other.stderr)
            check(remote.returncode == 0, f"remote: exit {remote.returncode}",
                  remote.stderr)
            got = verdicts(remote)
        finally:
            if server.poll() is None:
                server.send_signal(signal.SIGTERM)
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait(10)
            err.close()

        check(sorted(got) == sorted(expected),
              f"ids differ: {sorted(set(got) ^ set(expected))}")
        for sid, verdict in expected.items():
            check(got[sid] == verdict,
                  f"{sid}: remote {got[sid]} != local {verdict}",
                  remote.stderr)
        passed = sum(1 for v in got.values() if v[0] and v[1] == 1.0)
        check(all(v[0] for v in got.values()), "a failure", remote.stderr)
        check(passed == 10, f"{passed} at reward 1.0, expected 10")
        left = os.listdir(serve_root) if os.path.isdir(serve_root) else []
        check(left == [], f"left under sv-serve's sandbox root: {left}")
    print(f"ok: 20 HumanEval lines through sv-serve{' over TLS' if tls else ''}, "
          f"the same verdicts as local (10 at reward 1.0), in "
          f"{time.monotonic() - t0:.1f} s")


if __name__ == "__main__":
    main()
