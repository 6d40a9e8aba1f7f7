#!/usr/bin/env python3
"""sv-serve under hostile or heavy clients, real sockets on 127.0.0.1
(standard library only), on the scripted provider.

Called as: e2e_hardening.py SV_SERVE MODE
  MODE tls: TLS with a CA and certificate made here by the openssl CLI
    (exit 77 without it): verify and the sandbox API over https, plain HTTP
    to the TLS port refused with a 400, junk and a stalled handshake cut
    off, bad files refused at start.
  MODE connections: 1,000 connections at once, each a verify: every one
    answered 200 or 429, none dropped (RLIMIT_NOFILE raised; 77 if the hard
    limit is too low).
  MODE slowloris: clients trickling headers and bodies are cut off at the
    header and body deadlines while others are served.
  MODE unauthenticated: a request without a token is answered 401 from its
    header, before any body byte is read (a 64 MiB Content-Length and no
    body: 401 at once); 50 token-less clients sending 8 MiB bodies leave
    the server's peak RSS (VmHWM) within 64 MiB of where it was; 404 and
    /healthz with a body are answered from the header too.
  MODE cap: --max-connections 8: the 9th connection is answered 503 and
    closed, counted in sv_connections_refused_total; freed slots serve
    again.
  MODE json: a 60 MiB body of `[[],[],...]` (20 million values) to
    /v1/verify and to the sandbox API is refused 400 naming the limit
    (--max-json-values), with the server's peak RSS (VmHWM) under 10x the
    body; a body just under the limit is graded, and the memory goes back
    (VmRSS after within 64 MiB of before).
  MODE emfile: sv-serve under RLIMIT_NOFILE 64 and 150 connections held:
    out of descriptors, the accept loop pauses (one log line, not a spin)
    and serves again once the connections are closed.
  MODE metrics: with --token-file, /metrics needs the token; with
    --metrics-listen, a second port serves /metrics and /healthz without
    one and nothing else.
  MODE fuzz: a few thousand mutated request lines, headers and bodies, and
    structure-aware JSON bodies of the sandbox API: no crash, no hang, every
    answer well-formed HTTP; the server serves after.
Every wait is bounded.
"""

import http.client
import json
import os
import random
import re
import resource
import selectors
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_serve import (TIMEOUT, Server, check, parse_metrics,  # noqa: E402
                       submission, wait_until)

SKIP = 77


def scripted_config(tmp, name, extra=None):
    path = os.path.join(tmp, name + ".json")
    block = {"scripted": extra or {}}
    with open(path, "w") as f:
        json.dump(block, f)
    return path


def status_of(reply):
    m = re.match(rb"HTTP/1\.[01] (\d{3}) ", reply)
    return int(m.group(1)) if m else None


def exchange(port, data, timeout=5, half_close=True):
    """Sends `data`, reads until the server closes; (bytes, closed)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout)
    out = b""
    try:
        try:
            sock.sendall(data)
            if half_close:
                sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                return out, False
            except OSError:
                return out, True
            if not chunk:
                return out, True
            out += chunk
        return out, False
    finally:
        sock.close()


# -- tls ----------------------------------------------------------------------

def make_certs(tmp):
    openssl = shutil.which("openssl")
    if openssl is None:
        print("skip: no openssl CLI")
        sys.exit(SKIP)

    def run(*args):
        subprocess.run([openssl, *args], check=True, capture_output=True,
                       timeout=60, cwd=tmp)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
        "-out", "ca.pem", "-days", "1", "-subj", "/CN=sv-serve test CA")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key",
        "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    with open(os.path.join(tmp, "san.cnf"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey",
        "ca.key", "-CAcreateserial", "-out", "server.pem", "-days", "1",
        "-extfile", "san.cnf")
    return (os.path.join(tmp, "ca.pem"), os.path.join(tmp, "server.pem"),
            os.path.join(tmp, "server.key"))


def tls_mode(binary, tmp):
    ca, cert, key = make_certs(tmp)
    tokens = os.path.join(tmp, "tokens")
    with open(tokens, "w") as f:
        f.write("tls-token\n")
    config = scripted_config(tmp, "tls")
    # Refused at start: one file without the other, a file that is no PEM.
    r = subprocess.run([binary, "--listen", "127.0.0.1:0", "--tls-cert", cert],
                       capture_output=True, text=True, timeout=30)
    check(r.returncode == 2 and "together" in r.stderr, f"cert only: {r}")
    r = subprocess.run([binary, "--listen", "127.0.0.1:0", "--provider-config",
                        config, "--tls-cert", tokens, "--tls-key", key],
                       capture_output=True, text=True, timeout=30)
    check(r.returncode == 1 and "--tls-cert" in r.stderr, f"bad cert: {r}")

    s = Server(binary, tmp, ["--provider-config", config, "--token-file",
                             tokens, "--tls-cert", cert, "--tls-key", key,
                             "--header-timeout-s", "1"], "tls")
    ctx = ssl.create_default_context(cafile=ca)
    auth = {"Authorization": "Bearer tls-token"}

    def https(method, path, body=None, headers=None):
        c = http.client.HTTPSConnection("127.0.0.1", s.port, timeout=TIMEOUT,
                                        context=ctx)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        finally:
            c.close()

    try:
        st, _, _ = https("GET", "/healthz")
        check(st == 200, f"healthz over TLS: {st}", s)
        st, _, body = https("POST", "/v1/verify", submission("t1"), auth)
        check(st == 200 and json.loads(body)["ok"], f"verify: {st}", s)
        st, _, body = https("POST", "/v1/sandboxes", "{}", auth)
        check(st == 201, f"create over TLS: {st} {body}", s)
        sid = json.loads(body)["sandbox_id"]
        st, _, body = https("POST", f"/v1/sandboxes/{sid}/exec",
                            json.dumps({"argv": ["true"], "timeout_s": 5}),
                            auth)
        check(st == 200 and json.loads(body)["return_code"] == 0,
              f"exec over TLS: {st}", s)
        st, _, _ = https("DELETE", f"/v1/sandboxes/{sid}", None, auth)
        check(st == 204, f"delete over TLS: {st}", s)
        # Keep-alive: several requests on one TLS connection.
        c = http.client.HTTPSConnection("127.0.0.1", s.port, timeout=TIMEOUT,
                                        context=ctx)
        for _ in range(3):
            c.request("GET", "/healthz")
            r = c.getresponse()
            check(r.status == 200 and r.read() == b"ok\n", "keep-alive", s)
        c.close()
        # A client that does not trust the CA fails its handshake.
        try:
            http.client.HTTPSConnection(
                "127.0.0.1", s.port, timeout=TIMEOUT,
                context=ssl.create_default_context()).request("GET", "/")
            check(False, "an untrusted certificate was accepted", s)
        except ssl.SSLError:
            pass
        # Plain HTTP to the TLS port: a clean 400, then closed.
        reply, closed = exchange(s.port, b"GET /healthz HTTP/1.1\r\n"
                                 b"Host: x\r\n\r\n", half_close=False)
        check(status_of(reply) == 400 and b"speaks TLS" in reply and closed,
              f"plain HTTP to TLS: {reply!r}", s)
        # Junk, and a handshake that stalls, are cut off.
        for junk in (b"\x16\x03\x01\x00\x05hello", os.urandom(512), b""):
            t0 = time.monotonic()
            _, closed = exchange(s.port, junk, timeout=5, half_close=False)
            check(closed and time.monotonic() - t0 < 4,
                  f"junk {junk[:8]!r} not cut off", s)
        st, _, _ = https("GET", "/healthz")
        check(st == 200, "serving after junk", s)
        check(s.stop() == 0, "exit status", s)
    finally:
        if s.proc.poll() is None:
            s.stop()
    print("ok: TLS (verify, sandbox API, keep-alive), plain HTTP refused "
          "with 400, junk and stalls cut off, bad files refused")


# -- connections --------------------------------------------------------------

def raise_nofile(need):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < need:
        print(f"skip: RLIMIT_NOFILE hard limit {hard} < {need}")
        sys.exit(SKIP)
    want = need if hard == resource.RLIM_INFINITY else min(hard, need)
    if soft == resource.RLIM_INFINITY or soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def connections_mode(binary, tmp, n=1000):
    raise_nofile(2 * n + 200)  # sv-serve inherits it
    config = scripted_config(tmp, "many")
    s = Server(binary, tmp, ["--provider-config", config, "--max-queue",
                             "200"], "many")
    try:
        sel = selectors.DefaultSelector()
        body = submission("c").encode()
        req = (b"POST /v1/verify HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
               b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" +
               body)
        conns = {}
        for i in range(n):
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", s.port))
            conns[sock] = {"out": req, "in": b"", "done": False}
            sel.register(sock, selectors.EVENT_WRITE)
        deadline = time.monotonic() + 20
        left = n
        while left and time.monotonic() < deadline:
            for key, events in sel.select(timeout=0.5):
                sock = key.fileobj
                c = conns[sock]
                try:
                    if events & selectors.EVENT_WRITE:
                        sent = sock.send(c["out"])
                        c["out"] = c["out"][sent:]
                        if not c["out"]:
                            sel.modify(sock, selectors.EVENT_READ)
                        continue
                    chunk = sock.recv(65536)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError as e:
                    chunk = b""
                    c["error"] = repr(e)
                if chunk:
                    c["in"] += chunk
                    continue
                c["done"] = True
                left -= 1
                sel.unregister(sock)
                sock.close()
        statuses = [status_of(c["in"]) for c in conns.values()]
        for sock, c in conns.items():
            if not c["done"]:
                sock.close()
        bad = [st for st in statuses if st not in (200, 429)]
        check(left == 0 and not bad,
              f"{left} unanswered, others {sorted(set(map(str, bad)))}", s)
        st, _, _ = s.request("GET", "/healthz")
        check(st == 200, "serving after", s)
        check(s.stop() == 0, "exit status", s)
    finally:
        if s.proc.poll() is None:
            s.stop()
    print(f"ok: {n} connections at once: {statuses.count(200)} 200, "
          f"{statuses.count(429)} 429, none dropped")


# -- slowloris ----------------------------------------------------------------

def slowloris_mode(binary, tmp, slow=40):
    config = scripted_config(tmp, "slow")
    s = Server(binary, tmp, ["--provider-config", config, "--header-timeout-s",
                             "1", "--body-timeout-s", "1"], "slow")
    try:
        socks = []
        header = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 1000
        body_req = (b"PUT /v1/sandboxes/x/files HTTP/1.1\r\nHost: x\r\n"
                    b"Content-Length: 100000\r\n\r\n" + b"{" * 1000)
        for i in range(slow):
            sock = socket.create_connection(("127.0.0.1", s.port), TIMEOUT)
            sock.setblocking(False)
            socks.append([sock, header if i % 2 else body_req, 0, None])
        t0 = time.monotonic()
        served = []
        while time.monotonic() - t0 < 3.5:
            for entry in socks:  # one more byte each, every 50 ms
                sock, data, pos, closed = entry
                if closed is not None:
                    continue
                try:
                    if sock.recv(4096) == b"":
                        entry[3] = time.monotonic() - t0
                        continue
                except BlockingIOError:
                    pass
                except OSError:
                    entry[3] = time.monotonic() - t0
                    continue
                if pos < len(data):
                    try:
                        sock.send(data[pos:pos + 1])
                        entry[2] = pos + 1
                    except OSError:
                        entry[3] = time.monotonic() - t0
            t1 = time.monotonic()
            st, _, _ = s.request("GET", "/healthz")
            served.append((st, time.monotonic() - t1))
            time.sleep(0.05)
        for entry in socks:
            entry[0].close()
        late = [e[3] for e in socks if e[3] is None or e[3] > 2.5]
        check(not late, f"{len(late)} slow clients not cut off by 2.5 s", s)
        check(served and all(st == 200 and dt < 1 for st, dt in served),
              f"others not served: {served[:5]}", s)
        check(s.stop() == 0, "exit status", s)
    finally:
        if s.proc.poll() is None:
            s.stop()
    print(f"ok: {slow} slowloris clients cut off at their deadlines, "
          f"{len(served)} others served meanwhile")


# -- unauthenticated ----------------------------------------------------------

def sanitized(binary):
    """Whether sv-serve was built with ASan: its allocator keeps freed
    memory in quarantine, so RSS bounds are measured, not asserted."""
    out = subprocess.run(["ldd", binary], capture_output=True,
                         text=True).stdout
    return "libasan" in out


def vm_hwm_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM in /proc/PID/status")


def read_reply(sock, timeout):
    """What the server sends until it closes or `timeout` passes;
    (bytes, closed)."""
    out = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            return out, False
        except OSError:
            return out, True
        if not chunk:
            return out, True
        out += chunk
    return out, False


def unauthenticated_mode(binary, tmp, clients=50, each=8 << 20):
    tokens = os.path.join(tmp, "tokens")
    with open(tokens, "w") as f:
        f.write("the-token\n")
    config = scripted_config(tmp, "unauth")
    s = Server(binary, tmp, ["--provider-config", config, "--token-file",
                             tokens, "--body-timeout-s", "30"], "unauth")
    big = 64 << 20  # the default --max-body-bytes: a body sv-serve accepts
    try:
        # The header alone: the 401 comes without waiting for the body.
        for extra in (b"", b"Expect: 100-continue\r\n"):
            sock = socket.create_connection(("127.0.0.1", s.port), TIMEOUT)
            sock.sendall(b"POST /v1/verify HTTP/1.1\r\nHost: x\r\n" + extra +
                         b"Content-Length: " + str(big).encode() +
                         b"\r\n\r\n")
            reply, closed = read_reply(sock, 3)
            sock.close()
            check(status_of(reply) == 401 and b"unauthorized" in reply and
                  b"100 Continue" not in reply and closed,
                  f"401 from the header ({extra!r}): {reply[:200]!r} "
                  f"closed={closed}", s)
        # So are a 404, a 405 and /healthz with a body.
        for head, want in ((b"POST /nope", 404), (b"POST /healthz", 405),
                           (b"GET /healthz", 200)):
            sock = socket.create_connection(("127.0.0.1", s.port), TIMEOUT)
            sock.sendall(head + b" HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                         str(big).encode() + b"\r\n\r\n")
            reply, closed = read_reply(sock, 3)
            sock.close()
            check(status_of(reply) == want and closed,
                  f"{head!r} from the header: {reply[:200]!r}", s)
        # Authenticated, the body is still read: a 2-byte JSON body is 400.
        st, _, _ = s.request("POST", "/v1/verify", "{}",
                             {"Authorization": "Bearer the-token"})
        check(st == 400, f"authenticated invalid body: {st}", s)
        # 50 clients pushing bodies without a token: nothing of them kept.
        before = vm_hwm_kib(s.proc.pid)
        chunk = b"x" * 65536
        answers = []

        def push(i):
            sock = socket.create_connection(("127.0.0.1", s.port), TIMEOUT)
            try:
                sock.sendall(b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n"
                             b"Content-Length: " + str(each).encode() +
                             b"\r\n\r\n")
                sent = 0
                try:
                    while sent < each:
                        sent += sock.send(chunk)
                except OSError:
                    pass
                reply, _ = read_reply(sock, 5)
                answers.append(status_of(reply))
            finally:
                sock.close()

        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(push, range(clients)))
        after = vm_hwm_kib(s.proc.pid)
        grown = (after - before) // 1024
        check(grown < 64 or sanitized(binary),
              f"peak RSS grew by {grown} MiB for {clients} "
              f"token-less clients of {each >> 20} MiB each", s)
        check(s.proc.poll() is None, "sv-serve died", s)
        st, _, _ = s.request("GET", "/healthz")
        check(st == 200, "serving after", s)
        check(s.stop() == 0, "exit status", s)
    finally:
        if s.proc.poll() is None:
            s.stop()
    print(f"ok: 401 from the header; {clients} token-less clients of "
          f"{each >> 20} MiB: peak RSS {before // 1024} -> {after // 1024} "
          f"MiB ({answers.count(401)} saw their 401)")


def vm_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS in /proc/PID/status")


def json_mode(binary, tmp, size=60 << 20):
    config = scripted_config(tmp, "json")
    s = Server(binary, tmp, ["--provider-config", config], "json")
    try:
        st, _, _ = s.request("POST", "/v1/verify", submission("warm"))
        check(st == 200, f"warm-up: {st}", s)
        base = vm_hwm_kib(s.proc.pid)
        empties = size // 3
        bomb = b"[" + b"[]," * (empties - 1) + b"[]]"
        head = json.loads(submission("bomb"))
        del head["request"]
        prefix = json.dumps(head)[:-1].encode() + b', "request": '
        body = prefix + bomb + b"}"
        st, _, raw = s.request("POST", "/v1/verify", body,
                               {"Content-Type": "application/json"})
        check(st == 400 and b"more than 1000000 values" in raw,
              f"/v1/verify of {len(body) >> 20} MiB: {st} {raw[:300]!r}", s)
        small = b"[" + b"[]," * (3 << 20) + b"[]]"  # 9 MiB, 3 million
        st, _, raw = s.request("POST", "/v1/sandboxes", small)
        check(st == 400 and b"more than 1000000 values" in raw,
              f"/v1/sandboxes: {st} {raw[:300]!r}", s)
        peak = vm_hwm_kib(s.proc.pid)
        grown = (peak - base) * 1024
        check(grown < 10 * len(body) or sanitized(binary),
              f"peak RSS grew by {grown >> 20} MiB for a body of "
              f"{len(body) >> 20} MiB", s)
        # Just under the limit: graded, and the memory given back.
        rss_before = vm_rss_kib(s.proc.pid)
        n = 200000
        ok_body = prefix + b"[" + b"[]," * (n - 1) + b"[]]}"
        st, _, raw = s.request("POST", "/v1/verify", ok_body)
        check(st == 200 and json.loads(raw)["ok"],
              f"{n} values: {st} {raw[:300]!r}", s)
        rss_after = vm_rss_kib(s.proc.pid)
        check(rss_after - rss_before < 64 * 1024 or sanitized(binary),
              f"RSS {rss_before >> 10} -> {rss_after >> 10} MiB after a "
              f"graded body of {n} values", s)
        check(s.stop() == 0, "exit status", s)
    finally:
        if s.proc.poll() is None:
            s.stop()
    print(f"ok: {len(body) >> 20} MiB of [[],...] refused 400 naming the "
          f"limit, peak RSS {base >> 10} -> {peak >> 10} MiB; {n} values "
          f"graded, RSS {rss_before >> 10} -> {rss_after >> 10} MiB after")


def emfile_mode(binary, tmp, nofile=64, held_n=150):
    config = scripted_config(tmp, "emfile")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, hard))
    try:
        s = Server(binary, tmp, ["--provider-config", config,
                                 "--header-timeout-s", "30"], "emfile")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    def accept_lines():
        return [line for line in s.stderr_tail_all().splitlines()
                if "accept" in line]

    held = []
    try:
        for _ in range(held_n):  # the kernel's backlog takes them all
            held.append(socket.create_connection(("127.0.0.1", s.port),
                                                 TIMEOUT))
        wait_until("the first failed accept", lambda: accept_lines(), 10, s)
        time.sleep(1)  # a spinning loop would log thousands of lines here
        lines = accept_lines()
        check(len(lines) == 1 and "Too many open files" in lines[0],
              f"{len(lines)} accept lines in 1 s: {lines[:3]}", s)
        for sock in held:
            sock.close()
        held = []
        wait_until("serving again", lambda: s.request(
            "GET", "/healthz")[0] == 200, 15, s)
        m = s.metrics()
        check(m.get("sv_accept_failures_total", 0) >= 1,
              "failed accepts not counted", s)
        check(any("accepting again" in line for line in accept_lines()),
              "no line for the end of the episode", s)
        check(s.stop() == 0, "exit status", s)
    finally:
        for sock in held:
            sock.close()
        if s.proc.poll() is None:
            s.stop()
    print(f"ok: out of descriptors with {held_n} connections: "
          f"{m.get('sv_accept_failures_total'):.0f} paced accept failures, "
          f"{len(lines)} log line, served again after")


def metrics_mode(binary, tmp):
    tokens = os.path.join(tmp, "tokens")
    with open(tokens, "w") as f:
        f.write("the-token\n")
    config = scripted_config(tmp, "metrics")
    s = Server(binary, tmp, ["--provider-config", config, "--token-file",
                             tokens, "--metrics-listen", "127.0.0.1:0"],
               "metrics")
    try:
        # Printed right after `listening on` (maybe already buffered: a
        # select() would not see it).
        line = s.proc.stdout.readline()
        m = re.fullmatch(r"metrics on 127\.0\.0\.1:(\d+)\n", line or "")
        check(m is not None, f"no 'metrics on' line: {line!r}", s)
        mport = int(m.group(1))
        st, hdrs, _ = s.request("GET", "/metrics")
        check(st == 401 and hdrs.get("WWW-Authenticate") == "Bearer",
              f"/metrics without a token: {st}", s)
        st, _, _ = s.request("GET", "/metrics", None,
                             {"Authorization": "Bearer wrong"})
        check(st == 401, f"/metrics with a wrong token: {st}", s)
        s.token = "the-token"
        check("sv_http_requests_total{code=\"401\"}" in s.metrics(),
              "/metrics with the token", s)
        st, _, _ = s.request("GET", "/healthz")
        check(st == 200, f"/healthz needs no token: {st}", s)

        def on_metrics_port(method, path, body=None):
            c = http.client.HTTPConnection("127.0.0.1", mport,
                                           timeout=TIMEOUT)
            try:
                c.request(method, path, body=body)
                r = c.getresponse()
                return r.status, r.read()
            finally:
                c.close()

        st, raw = on_metrics_port("GET", "/metrics")
        check(st == 200 and "sv_connections_open" in parse_metrics(
            raw.decode()), f"--metrics-listen /metrics: {st}", s)
        st, _ = on_metrics_port("GET", "/healthz")
        check(st == 200, f"--metrics-listen /healthz: {st}", s)
        for method, path, body in (("POST", "/v1/verify", submission("m")),
                                   ("POST", "/v1/sandboxes", "{}"),
                                   ("GET", "/v1/languages", None)):
            st, _ = on_metrics_port(method, path, body)
            check(st == 404, f"--metrics-listen {method} {path}: {st}", s)
        check(s.stop() == 0, "exit status", s)
    finally:
        if s.proc.poll() is None:
            s.stop()
    print("ok: /metrics behind the token; --metrics-listen serves /metrics "
          "and /healthz only, token-less")


def cap_mode(binary, tmp, cap=8):
    config = scripted_config(tmp, "cap")
    s = Server(binary, tmp, ["--provider-config", config, "--max-connections",
                             str(cap), "--header-timeout-s", "20"], "cap")
    held = []
    try:
        for _ in range(cap):
            held.append(socket.create_connection(("127.0.0.1", s.port),
                                                 TIMEOUT))
        # Accepted in order: the next one is over the cap.
        sock = socket.create_connection(("127.0.0.1", s.port), TIMEOUT)
        reply, closed = read_reply(sock, 5)
        sock.close()
        check(status_of(reply) == 503 and b"too_many_connections" in reply
              and closed, f"over the cap: {reply[:200]!r} closed={closed}", s)
        for sock in held[:2]:
            sock.close()
        del held[:2]
        served = []

        def healthy():
            try:
                st, _, _ = s.request("GET", "/healthz")
            except OSError:
                return False
            served.append(st)
            return st == 200
        wait_until("a freed slot to serve", healthy, 10, s)
        m = s.metrics()
        check(m.get("sv_connections_refused_total", 0) >= 1,
              f"refusals not counted: {m.get('sv_connections_refused_total')}",
              s)
        check(m.get("sv_connections_open", 0) <= cap, "open over the cap", s)
        for sock in held:
            sock.close()
        check(s.stop() == 0, "exit status", s)
    finally:
        for sock in held:
            sock.close()
        if s.proc.poll() is None:
            s.stop()
    print(f"ok: --max-connections {cap}: the next one 503 and closed, "
          f"served again once slots were freed")


# -- fuzz ---------------------------------------------------------------------

SEEDS = [
    b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /metrics HTTP/1.0\r\n\r\n",
    b"POST /v1/verify HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
    b"\r\nContent-Length: %d\r\n\r\n%s",
    b"POST /v1/verify/batch HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked"
    b"\r\n\r\n%x\r\n%s\r\n0\r\n\r\n",
    b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k-1\r\n"
    b"Content-Length: 2\r\n\r\n{}",
    b"PUT /v1/sandboxes/sbx-1/files HTTP/1.1\r\nHost: x\r\nContent-Length: "
    b"31\r\n\r\n{\"dir\": \"d\", \"files\": {\"a\": \"\"}}",
    b"GET /v1/sandboxes/sbx-1/files?path=a%20b HTTP/1.1\r\nHost: x\r\n\r\n",
    b"DELETE /v1/sandboxes/sbx-1 HTTP/1.1\r\nHost: x\r\nExpect: "
    b"100-continue\r\n\r\n",
]


def seed_requests():
    body = submission("f").encode()
    out = []
    for seed in SEEDS:
        if b"%d" in seed:
            seed = seed % (len(body), body)
        elif b"%x" in seed:
            seed = seed % (len(body), body)
        out.append(seed)
    return out


def mutate(rng, data):
    data = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        op = rng.randrange(9)
        pos = rng.randrange(len(data) + 1)
        if op == 0 and data:  # flip a byte
            data[min(pos, len(data) - 1)] = rng.randrange(256)
        elif op == 1:  # insert random bytes
            data[pos:pos] = os.urandom(rng.randint(1, 16))
        elif op == 2:  # delete a range
            del data[pos:pos + rng.randint(1, 32)]
        elif op == 3:  # truncate
            del data[pos:]
        elif op == 4:  # a special token
            data[pos:pos] = rng.choice([
                b"\r\n", b"\n", b"\r\n\r\n", b":", b" ", b"\x00", b"%",
                b"Content-Length: 99999999999999999999\r\n",
                b"Content-Length: -5\r\n", b"Transfer-Encoding: chunked\r\n",
                b"Content-Length: 3\r\nContent-Length: 4\r\n",
                b"ffffffffffffffff\r\n", b"Authorization: Bearer \xff\r\n",
                b"Idempotency-Key: " + b"x" * 300 + b"\r\n", b"\xc3\x28",
                b"HTTP/1.1", b"/v1/sandboxes/", b"?path=%zz", b"{" * 40])
        elif op == 5:  # repeat a slice
            piece = bytes(data[pos:pos + rng.randint(1, 64)])
            data[pos:pos] = piece * rng.randint(2, 50)
        elif op == 6:  # a long header
            data[pos:pos] = b"X-" + b"a" * rng.choice([10, 1000, 20000]) + \
                b": v\r\n"
        elif op == 7:  # swap the method
            data = bytearray(re.sub(rb"^[A-Z]+", rng.choice(
                [b"GET", b"PUT", b"BREW", b"", b"G\x00T", b"POST" * 50]),
                bytes(data), count=1))
        else:  # case and whitespace games
            data = bytearray(bytes(data).swapcase()) if rng.random() < 0.5 \
                else bytearray(bytes(data).replace(b" ", b"\t", 1))
    return bytes(data)


def random_json(rng, depth=0):
    kind = rng.randrange(8 if depth < 4 else 5)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.choice([0, -1, 1, 2 ** 63, 1e308, -0.5, 3.5])
    if kind == 3:
        return rng.choice(["", "a", "../x", "/etc/passwd", "\u00e9", "\x00",
                           "x" * 5000])
    if kind == 4:
        return rng.choice([[], {}, "sandbox"])
    if kind == 5:
        return [random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    keys = ["image", "ttl_s", "workdir", "env", "argv", "timeout_s", "cwd",
            "dir", "files", "log_path", "metadata", "resources", "zzz"]
    return {rng.choice(keys): random_json(rng, depth + 1)
            for _ in range(rng.randint(0, 5))}


def fuzz_mode(binary, tmp, cases=3000, json_cases=1500):
    config = scripted_config(tmp, "fuzz")
    s = Server(binary, tmp, ["--provider-config", config, "--header-timeout-s",
                             "1", "--body-timeout-s", "1", "--max-body-bytes",
                             "65536", "--max-sandboxes-per-token", "100000"],
               "fuzz")
    rng = random.Random(12)
    seeds = seed_requests()
    inputs = []
    for i in range(cases):
        if i % 10 == 0:
            inputs.append(os.urandom(rng.randint(1, 300)))
        else:
            inputs.append(mutate(rng, rng.choice(seeds)))
    problems = []
    lock = threading.Lock()

    def one(data):
        reply, closed = exchange(s.port, data, timeout=5)
        ok = closed and (reply == b"" or status_of(reply) is not None)
        if not ok:
            with lock:
                problems.append((data[:200], reply[:200], closed))

    try:
        st, _, raw = s.request("POST", "/v1/sandboxes", "{}")
        sid = json.loads(raw)["sandbox_id"]
        t0 = time.monotonic()
        with ThreadPoolExecutor(32) as pool:
            list(pool.map(one, inputs))
        check(not problems, f"{len(problems)} bad exchanges, e.g. "
              f"{problems[:3]}", s)
        check(s.proc.poll() is None, "sv-serve died", s)
        # Structure-aware: random JSON to every body route.
        routes = [("POST", "/v1/sandboxes"),
                  ("PUT", f"/v1/sandboxes/{sid}/files"),
                  ("POST", f"/v1/sandboxes/{sid}/exec"),
                  ("POST", "/v1/verify")]
        statuses = []

        def one_json(i):
            method, path = routes[i % len(routes)]
            body = json.dumps(random_json(random.Random(i)))
            st, _, raw = s.request(method, path, body)
            statuses.append(st)
            if st >= 500 or (st >= 400 and "error" not in json.loads(raw)
                             and path != "/v1/verify"):
                with lock:
                    problems.append((method, path, body[:200], st, raw[:200]))

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(one_json, range(json_cases)))
        check(not problems, f"JSON bodies: {problems[:3]}", s)
        elapsed = time.monotonic() - t0
        st, _, _ = s.request("GET", "/healthz")
        check(st == 200, "serving after the fuzz", s)
        _, _, raw = s.request("GET", "/metrics")
        parse_metrics(raw.decode())
        st, _, _ = s.request("GET", f"/v1/sandboxes/{sid}")
        check(st == 200, f"the first sandbox is still there: {st}", s)
        check(s.stop() == 0, "exit status", s)
    finally:
        if s.proc.poll() is None:
            s.stop()
    print(f"ok: {cases} mutated requests and {json_cases} random JSON bodies "
          f"in {elapsed:.1f} s: no crash, no hang, codes "
          f"{sorted(set(statuses))}")


def main():
    if len(sys.argv) != 3:
        sys.exit(f"usage: {sys.argv[0]} SV_SERVE MODE")
    binary, mode = sys.argv[1:]
    modes = {"tls": tls_mode, "connections": connections_mode,
             "slowloris": slowloris_mode, "fuzz": fuzz_mode,
             "unauthenticated": unauthenticated_mode, "cap": cap_mode,
             "json": json_mode, "emfile": emfile_mode,
             "metrics": metrics_mode}
    if mode not in modes:
        sys.exit(f"unknown mode {mode}")
    with tempfile.TemporaryDirectory(prefix="sv-serve-hard-") as tmp:
        modes[mode](binary, tmp)


if __name__ == "__main__":
    main()
