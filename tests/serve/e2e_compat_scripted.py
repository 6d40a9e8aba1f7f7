#!/usr/bin/env python3
"""sv-serve's compatible front doors end to end on the scripted provider
(docs/compat.md): faults, tokens and load, driven by stand-ins of verl's and
NeMo-Skills' clients (compat_peers.py). Standard library only.

Called as: e2e_compat_scripted.py SV_SERVE MODE
  faults       a sandbox that fails: 504 SandboxError, masked; verl's retry
               then succeeds; a runner's garbage or fault: 504; overload:
               504 with Retry-After; a drain: 504 for new calls, the ones in
               flight finish; /execute: 504.
  tokens       401 unless declared open; open routes from loopback (and
               --open-from) without a token; the rest closed; bad flags.
  concurrency  1,000 calls at once: each answered 200 or 504, none dropped;
               the provider's ledger: every sandbox stopped exactly once.
Every wait is bounded; nothing is decided by a sleep.
"""

import json
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time

from compat_peers import (SKIP, SQUARE, TIMEOUT, Server, check,
                          nemo_skills_style, post_in_thread, scripted_server,
                          verl_style, wait_all_stopped, wait_for,
                          write_scripted)


def retry_case(binary, tmp):
    s = scripted_server(binary, tmp, "retry", {
        "steps": {"create": ["ok", "error", "error"]}})
    try:
        status, headers, r = s.post_json("/run_code", {
            "code": SQUARE, "language": "python", "stdin": "7"})
        check(status == 504 and r["status"] == "SandboxError"
              and r["mask_sample"] is True
              and r["failure_kind"] == "provider_unavailable"
              and "create" in r["message"] and r["run_result"] is None,
              f"sandbox down: {status} {r}", s)
        t0 = time.monotonic()
        verdict, r, attempts = verl_style(s, SQUARE, "7", "49")
        check(verdict is True and attempts == 2
              and time.monotonic() - t0 >= 1.0,
              f"verl's retry: {verdict} after {attempts} attempts {r}", s)
        check(s.stop() == 0, "exit status", s)
    finally:
        if s.proc.poll() is None:
            s.stop()
    print("ok: a sandbox that fails is 504 SandboxError (masked); verl's "
          "retry then succeeds")


def malformed_case(binary, tmp):
    s = scripted_server(binary, tmp, "garbage", {
        "result_text": json.dumps({"run_result": {"status": "Maybe"}})})
    try:
        status, _, r = s.post_json("/run_code", {"code": "1",
                                                 "language": "python"})
        check(status == 504 and r["status"] == "SandboxError"
              and r["failure_kind"] == "verifier_error"
              and "malformed" in r["message"], f"garbage: {status} {r}", s)
        status, r = nemo_skills_style(s, "1", "python")
        check(status == 504 and r["process_status"] == "error"
              and r["mask_sample"] is True and "malformed" in r["stderr"],
              f"execute garbage: {status} {r}", s)
        check(s.stop() == 0, "exit status", s)
    finally:
        if s.proc.poll() is None:
            s.stop()
    s = scripted_server(binary, tmp, "runner-dies", {
        "steps": {"exec": ["ok", "garbage"]}})
    try:
        verdict, r, attempts = verl_style(s, "1", delays=(0.1, 0.1))
        check(verdict is True and attempts == 2, f"verl after a runner "
              f"fault: {verdict} {attempts} {r}", s)
        check(s.stop() == 0, "exit status", s)
    finally:
        if s.proc.poll() is None:
            s.stop()
    print("ok: a runner's garbage or fault is 504, never a wrong answer")

def overload_and_drain_case(binary, tmp):
    # Each call's runner takes 10 s; the test moves on by the server's own
    # counters, never by a sleep.
    slow = {"fault": "delay", "delay_ms": 10000}
    s = scripted_server(binary, tmp, "overload", {
        "steps": {"exec": ["ok", slow, slow]}},
        ["--concurrency", "1", "--max-queue", "1"])
    try:
        results = []
        body = {"code": "1", "language": "python"}
        threads = [post_in_thread(s, "/run_code", body, results)]
        wait_for("one call running",
                 lambda: s.metrics().get("sv_supervisor_in_flight") == 1, s)
        threads.append(post_in_thread(s, "/run_code", body, results))
        wait_for("one call queued",
                 lambda: s.metrics().get("sv_queue_depth") == 1, s)
        status, headers, r = s.post_json("/run_code", body)
        check(status == 504 and headers.get("Retry-After") == "1"
              and "overloaded" in r["message"] and r["mask_sample"] is True,
              f"overload: {status} {headers} {r}", s)
        s.proc.send_signal(signal.SIGTERM)
        wait_for("draining", lambda: s.request("GET", "/healthz")[0] == 503,
                 s)
        status, _, r = s.post_json("/run_code", body)
        check(status == 504 and "draining" in r["message"],
              f"draining: {status} {r}", s)
        status, _, _ = s.request("GET", "/v1/ping")
        check(status == 503, f"ping while draining: {status}", s)
        for t in threads:
            t.join(TIMEOUT)
        check([x[0] for x in results] == [200, 200]
              and all(x[2]["status"] == "Success" for x in results),
              f"calls in flight finish: {results}", s)
        # The drain ends by itself once they are answered.
        check(s.proc.wait(TIMEOUT) == 0, "exit status after the drain", s)
    finally:
        if s.proc.poll() is None:
            s.stop()
    print("ok: overload is 504 with Retry-After; a drain answers 504 to new "
          "calls and finishes the ones in flight")


def faults_mode(binary, tmp):
    retry_case(binary, tmp)
    malformed_case(binary, tmp)
    overload_and_drain_case(binary, tmp)


# -- tokens (scripted provider) -------------------------------------------------

def usage_errors(binary, tmp):
    bad_config = os.path.join(tmp, "bad.yaml")
    with open(bad_config, "w") as f:
        f.write("languages:\n  cpp:\n    source: main.cpp\n    runn: [x]\n")
    for args, needle in [
            (["--open-routes", "run_code,verify"], 'unknown route "verify"'),
            (["--open-routes", "run_code", "--open-from", "10.0.0.0/99"],
             "10.0.0.0/99"),
            (["--open-routes", "run_code", "--open-from", "intranet"],
             "not an IP address"),
            (["--open-from", "10.0.0.0/8"], "--open-from needs --open-routes"),
            (["--compat-config", bad_config], "languages.cpp.runn")]:
        p = subprocess.run([binary, "--listen", "127.0.0.1:0", *args],
                           capture_output=True, text=True, timeout=60)
        check(p.returncode == 2 and needle in p.stderr,
              f"{args}: exit {p.returncode} {p.stderr!r}")
    print("ok: bad --open-routes, --open-from, --compat-config: exit 2 naming "
          "the value")


def non_loopback_address():
    """An address of this host that is not loopback, or None."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            u.connect(("192.0.2.1", 9))  # no packet is sent
            addr = u.getsockname()[0]
    except OSError:
        return None
    return None if addr.startswith("127.") else addr


def tokens_mode(binary, tmp):
    usage_errors(binary, tmp)
    tokens = os.path.join(tmp, "tokens")
    with open(tokens, "w") as f:
        f.write("alice\n")
    auth = {"Authorization": "Bearer alice"}
    code = {"code": "1", "language": "python"}
    execute = {"generated_code": "1", "language": "python", "timeout": 5}
    s = scripted_server(binary, tmp, "closed", {}, ["--token-file", tokens],
                        probe=False)
    try:
        for path, body in [("/run_code", code), ("/execute", execute)]:
            status, headers, _ = s.request("POST", path, json.dumps(body))
            check(status == 401 and headers.get("WWW-Authenticate") ==
                  "Bearer", f"{path} without a token: {status}", s)
            status, _, _ = s.post_json(path, body, auth)
            check(status == 200, f"{path} with a token: {status}", s)
        status, _, _ = s.request("GET", "/v1/languages")
        check(status == 401, f"languages without a token: {status}", s)
        for path in ("/v1/ping", "/health"):
            status, _, _ = s.request("GET", path)
            check(status == 200, f"{path} without a token: {status}", s)
        check(s.stop() == 0, "exit status", s)
    finally:
        if s.proc.poll() is None:
            s.stop()
    s = scripted_server(binary, tmp, "open", {},
                        ["--token-file", tokens, "--open-routes", "run_code"],
                        probe=False)
    try:
        check("/run_code, /v1/languages served WITHOUT a token to 127.0.0.0/8"
              in s.stderr_tail(), "no warning at start", s)
        status, _, r = s.post_json("/run_code", code)
        check(status == 200 and r["status"] == "Success",
              f"open /run_code from loopback: {status} {r}", s)
        status, _, _ = s.request("GET", "/v1/languages")
        check(status == 200, f"open /v1/languages: {status}", s)
        status, _, _ = s.post_json("/execute", execute)
        check(status == 401, f"/execute not declared open: {status}", s)
        status, _, _ = s.request("POST", "/v1/sandboxes", "{}")
        check(status == 401, f"the sandbox API stays closed: {status}", s)
        status, _, _ = s.request("POST", "/v1/verify", "{}")
        check(status == 401, f"/v1/verify stays closed: {status}", s)
        check(s.stop() == 0, "exit status", s)
    finally:
        if s.proc.poll() is None:
            s.stop()
    print("ok: 401 unless declared open; open routes from loopback without a "
          "token; the rest closed")
    addr = non_loopback_address()
    if addr is None:
        print("note: no non-loopback address here: --open-from not exercised "
              "from outside loopback")
        return
    # A documentation network this host is not in, then this host alone.
    outside = "203.0.113.0/24" if addr.startswith("198.51.100.") \
        else "198.51.100.0/24"
    for nets, expect in [(outside, 401), (addr + "/32", 200)]:
        s = Server(binary, tmp, [
            "--provider-config", write_scripted(tmp, "from"),
            "--token-file", tokens, "--open-routes", "run_code,execute",
            "--open-from", nets], "from-" + str(expect), listen="0.0.0.0:0")
        try:
            status, _, _ = s.request("POST", "/run_code", json.dumps(code),
                                     host=addr)
            check(status == expect, f"from {addr} with --open-from {nets}: "
                  f"{status}, expected {expect}", s)
            status, _, _ = s.request("POST", "/execute", json.dumps(execute),
                                     {**auth}, host=addr)
            check(status == 200, f"with a token from {addr}: {status}", s)
            check(s.stop() == 0, "exit status", s)
        finally:
            if s.proc.poll() is None:
                s.stop()
    print(f"ok: --open-from: a peer ({addr}) outside the listed networks "
          "needs a token, one inside does not")

# -- concurrency (scripted provider) ------------------------------------------

def raise_nofile(n):
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < n:
        print(f"note: RLIMIT_NOFILE hard limit {hard} < {n}")
        sys.exit(SKIP)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, n), hard))


def status_of(raw):
    m = re.match(rb"HTTP/1\.1 (\d{3}) ", raw)
    return int(m.group(1)) if m else None


def body_of(raw):
    head, _, body = raw.partition(b"\r\n\r\n")
    return json.loads(body) if body else None


def all_at_once(port, requests, deadline_s):
    """Sends every request on its own connection at once; the raw answers
    (b"" for a connection that ended without one)."""
    sel = selectors.DefaultSelector()
    conns = {}
    for req in requests:
        sock = socket.socket()
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", port))
        conns[sock] = {"out": req, "in": b""}
        sel.register(sock, selectors.EVENT_WRITE)
    deadline = time.monotonic() + deadline_s
    left = len(conns)
    while left and time.monotonic() < deadline:
        for key, events in sel.select(timeout=0.5):
            sock, c = key.fileobj, conns[key.fileobj]
            try:
                if events & selectors.EVENT_WRITE:
                    c["out"] = c["out"][sock.send(c["out"]):]
                    if not c["out"]:
                        sel.modify(sock, selectors.EVENT_READ)
                    continue
                chunk = sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                chunk = b""
            if chunk:
                c["in"] += chunk
                continue
            left -= 1
            sel.unregister(sock)
    for sock in conns:
        sock.close()
    return [c["in"] for c in conns.values()], left


def concurrency_mode(binary, tmp, n=1000):
    raise_nofile(2 * n + 200)  # sv-serve inherits it
    ledger = os.path.join(tmp, "many.ledger")
    s = scripted_server(binary, tmp, "many", {
        "ledger_file": ledger,
        "steps": {"exec": ["ok"] + [{"fault": "delay", "delay_ms": 20}] * n}},
        ["--max-queue", "300"])
    try:
        requests = []
        for i in range(n):
            if i % 5 == 4:
                path, body = "/execute", {"generated_code": "print(49)",
                                          "language": "python", "timeout": 5}
            else:
                path, body = "/run_code", {"code": SQUARE, "stdin": str(i),
                                           "language": "python"}
            data = json.dumps(body).encode()
            requests.append(
                b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\n"
                b"Connection: close\r\nContent-Type: application/json\r\n"
                b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" +
                data)
        answers, left = all_at_once(s.port, requests, 120)
        statuses = [status_of(a) for a in answers]
        bad = [st for st in statuses if st not in (200, 504)]
        check(left == 0 and not bad,
              f"{left} unanswered, others {sorted(set(map(str, bad)))}", s)
        for a, st in zip(answers, statuses):
            r = body_of(a)
            if st == 504:
                check(r.get("mask_sample") is True, f"504 unmasked: {r}", s)
            else:
                check(r.get("status") == "Success" or
                      r.get("process_status") == "completed", f"200: {r}", s)
        ok, m = wait_all_stopped(s)
        check(ok, f"sandboxes left: {m}", s)
        check(s.stop() == 0, "exit status", s)
    finally:
        if s.proc.poll() is None:
            s.stop()
    book = json.loads(open(ledger).read().splitlines()[-1])
    # The probe's sandbox besides the calls'; each stopped exactly once.
    check(book["live"] == 0 and book["not_stopped_once"] == 0
          and book["creates"] == statuses.count(200) + 1,
          f"ledger: {book}, {statuses.count(200)} answered 200")
    print(f"ok: {n} calls at once: {statuses.count(200)} 200, "
          f"{statuses.count(504)} 504 (overloaded, masked), none dropped; "
          f"the ledger: {book['creates']} sandboxes, each stopped once")


def main():
    if len(sys.argv) != 3:
        sys.exit(f"usage: {sys.argv[0]} SV_SERVE MODE")
    binary, mode = sys.argv[1:]
    modes = {"faults": faults_mode, "tokens": tokens_mode,
             "concurrency": concurrency_mode}
    if mode not in modes:
        sys.exit(f"unknown mode {mode}")
    with tempfile.TemporaryDirectory(prefix="sv-compat-") as tmp:
        modes[mode](binary, tmp)


if __name__ == "__main__":
    main()
