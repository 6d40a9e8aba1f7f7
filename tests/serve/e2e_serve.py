#!/usr/bin/env python3
"""sv-serve end to end, real sockets on 127.0.0.1 (standard library only).

Called as: e2e_serve.py SV_SERVE MAKE_JOBS PYTHON MODE
  MODE scripted: every endpoint and error on the scripted provider (fast):
    verify, invalid 400 naming the field, bad and deep JSON, 401/404/405/413,
    streamed batch, a disconnect cancelling its verification, token reload
    on SIGHUP, SIGTERM drain, /metrics parsed.
  MODE local: HumanEval submissions through the local provider; nothing is
    left under the sandbox root.
Every wait is bounded.
"""

import http.client
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

TIMEOUT = 20  # seconds, for any one HTTP exchange


def check(cond, what, server=None):
    if not cond:
        if server is not None:
            print("--- stderr of sv-serve ---\n" + server.stderr_tail())
        raise AssertionError(what)


class Server:
    """The real sv-serve on port 0; stopped (bounded) on exit."""

    def __init__(self, binary, tmp, args, name):
        self.err_path = os.path.join(tmp, name + ".stderr")
        self.err = open(self.err_path, "w")
        self.proc = subprocess.Popen(
            [binary, "--listen", "127.0.0.1:0", "--log-level", "info", *args],
            stdout=subprocess.PIPE, stderr=self.err, text=True)
        line = self._read_line(30)
        m = re.fullmatch(r"listening on 127\.0\.0\.1:(\d+)\n", line or "")
        check(m is not None, f"no 'listening on' line: {line!r}", self)
        self.port = int(m.group(1))
        # The token /metrics is asked with (servers with --token-file).
        self.token = first_token(args)

    def _read_line(self, timeout):
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        return self.proc.stdout.readline() if ready else None

    def stderr_tail_all(self):
        self.err.flush()
        with open(self.err_path, errors="replace") as f:
            return f.read()

    def stderr_tail(self):
        self.err.flush()
        with open(self.err_path) as f:
            return f.read()[-4000:]

    def conn(self):
        return http.client.HTTPConnection("127.0.0.1", self.port,
                                          timeout=TIMEOUT)

    def request(self, method, path, body=None, headers=None):
        c = self.conn()
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        finally:
            c.close()

    def metrics(self):
        headers = {}
        if self.token is not None:
            headers["Authorization"] = "Bearer " + self.token
        status, _, body = self.request("GET", "/metrics", None, headers)
        check(status == 200, f"/metrics: {status}", self)
        return parse_metrics(body.decode())

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(f"sv-serve did not stop within {timeout} s")
        finally:
            self.err.close()


def first_token(args):
    """The first token of a --token-file in `args` (None without one):
    what /metrics is asked with."""
    if "--token-file" not in args:
        return None
    with open(args[args.index("--token-file") + 1]) as f:
        tokens = [line.strip() for line in f if line.strip()]
    return tokens[0] if tokens else None


SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')


def parse_metrics(text):
    """{name{labels}: value}; every line must be Prometheus text."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("# HELP ") or line.startswith("# TYPE "):
            continue
        m = SAMPLE.match(line)
        check(m is not None, f"not a Prometheus sample: {line!r}")
        out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def wait_until(what, cond, timeout=10, server=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    check(False, f"timed out waiting for {what}", server)


def submission(sid, **extra):
    sub = {"id": sid, "files": {"sandbox_runner.py": ""}, "request": {},
           "exec_timeout_s": 5,
           "config": {"ready_timeout_s": 5, "stop_timeout_s": 5}}
    sub.update(extra)
    return json.dumps(sub)


def nested(depth):
    value = 1
    for _ in range(depth):
        value = [value]
    return value


def post(server, path, body, token=None):
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = "Bearer " + token
    return server.request("POST", path, body, headers)


# -- scripted ----------------------------------------------------------------

def scripted_basics(binary, tmp):
    config = os.path.join(tmp, "basic.json")
    with open(config, "w") as f:
        json.dump({"scripted": {}}, f)
    s = Server(binary, tmp, ["--provider-config", config,
                             "--max-body-bytes", "4096",
                             "--max-json-depth", "16"], "basic")
    try:
        status, _, body = s.request("GET", "/healthz")
        check(status == 200 and body == b"ok\n", f"healthz {status}", s)

        status, _, body = post(s, "/v1/verify", submission("one"))
        out = json.loads(body)
        check(status == 200 and out["id"] == "one" and out["ok"] is True
              and out["result"] == {"reward": 1.0}, f"verify: {status} {out}",
              s)

        bad = json.dumps({"id": "x", "files": {"sandbox_runner.py": ""}})
        status, _, body = post(s, "/v1/verify", bad)
        out = json.loads(body)
        f = out["failure"]
        check(status == 400 and f["failure_kind"] == "invalid_request"
              and "request" in f["message"] and out["id"] == "x"
              and not f["message"].startswith("line "),
              f"invalid: {status} {out}", s)

        status, _, body = post(s, "/v1/verify", "{not json")
        check(status == 400 and json.loads(body)["failure"]["failure_kind"]
              == "invalid_request", f"bad JSON: {status} {body}", s)

        deep = json.dumps({"id": "d", "files": {"sandbox_runner.py": ""},
                           "request": {"a": nested(20)}})
        status, _, body = post(s, "/v1/verify", deep)
        msg = json.loads(body)["failure"]["message"]
        check(status == 400 and "deeper" in msg, f"deep: {status} {msg}", s)

        status, _, _ = s.request("GET", "/nothing")
        check(status == 404, f"404: {status}", s)
        status, headers, _ = s.request("GET", "/v1/verify")
        check(status == 405 and headers.get("Allow") == "POST",
              f"405: {status} {headers}", s)
        status, headers, _ = s.request("POST", "/healthz", "x")
        check(status == 405 and "GET" in headers.get("Allow", ""),
              f"405 healthz: {status} {headers}", s)
        status, _, _ = post(s, "/v1/verify", "x" * 5000)
        check(status == 413, f"413: {status}", s)
        # Headers beyond the bound: 431, never buffered.
        status, _, _ = s.request("GET", "/healthz",
                                 headers={"X-Big": "y" * 20000})
        check(status == 431, f"431: {status}", s)

        m = s.metrics()
        check(m.get('sv_http_requests_total{code="200"}', 0) >= 2
              and m.get('sv_http_requests_total{code="413"}') == 1
              and m.get('sv_verifications_total{outcome="ok",failure_kind="",'
                        'state="",cause=""}') == 1
              and m.get("sv_in_flight") == 0
              and m.get("sv_sandboxes_created_total") == 1
              and m.get("sv_sandboxes_stopped_total") == 1
              and 'sv_verification_seconds_bucket{le="+Inf"}' in m,
              f"metrics: {m}", s)
        check(s.stop() == 0, "exit status after SIGTERM", s)
    finally:
        if s.proc.poll() is None:
            s.stop()
    print("ok: verify, 400s, 404, 405, 413, 431, metrics")


def scripted_batch_streams(binary, tmp):
    """The fast line arrives while the slow one is still running."""
    config = os.path.join(tmp, "batch.json")
    with open(config, "w") as f:
        json.dump({"scripted": {"steps": {
            "exec": ["ok", {"fault": "delay", "delay_ms": 2000}]}}}, f)
    s = Server(binary, tmp, ["--provider-config", config], "batch")
    try:
        body = "\n".join([submission("b1"), "not json", submission("b2")])
        c = s.conn()
        t0 = time.monotonic()
        c.request("POST", "/v1/verify/batch", body=body + "\n",
                  headers={"Content-Type": "application/x-ndjson"})
        r = c.getresponse()
        check(r.status == 200 and r.getheader("Transfer-Encoding")
              == "chunked", f"batch: {r.status} {r.getheaders()}", s)
        arrivals = []
        for _ in range(3):
            line = r.readline()
            arrivals.append((time.monotonic() - t0, json.loads(line)))
        check(r.read() == b"", "nothing after the last line", s)
        c.close()
        lines = sorted(o["line"] for _, o in arrivals)
        check(lines == [1, 2, 3], f"one line per input line: {arrivals}", s)
        bad = [o for _, o in arrivals if o["line"] == 2][0]
        check(bad["failure"]["failure_kind"] == "invalid_request"
              and bad["id"] is None, f"line 2: {bad}", s)
        graded = [(t, o) for t, o in arrivals if o["line"] != 2]
        check(all(o["ok"] for _, o in graded), f"graded: {graded}", s)
        check(graded[0][0] < 1.5 and graded[1][0] >= 1.9,
              f"not streamed: {[(t, o['id']) for t, o in arrivals]}", s)
        check(s.stop() == 0, "exit status", s)
    finally:
        if s.proc.poll() is None:
            s.stop()
    print("ok: batch streamed in completion order")


def scripted_disconnect_cancels(binary, tmp):
    """A client that goes away: its hanging verification is cancelled and
    its sandbox stopped (the provider's ledger: nothing left live)."""
    ledger = os.path.join(tmp, "ledger.jsonl")
    config = os.path.join(tmp, "hang.json")
    with open(config, "w") as f:
        json.dump({"scripted": {"steps": {"exec": ["hang"] * 3},
                                "ledger_file": ledger}}, f)
    s = Server(binary, tmp, ["--provider-config", config], "disconnect")
    try:
        for path, body in (("/v1/verify", submission("h1",
                                                      exec_timeout_s=60)),
                           ("/v1/verify/batch",
                            submission("h2", exec_timeout_s=60) + "\n" +
                            submission("h3", exec_timeout_s=60) + "\n")):
            before = s.metrics().get("sv_sandboxes_stopped_total", 0)
            sock = socket.create_connection(("127.0.0.1", s.port), TIMEOUT)
            req = (f"POST {path} HTTP/1.1\r\nHost: x\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n{body}")
            sock.sendall(req.encode())
            wait_until("the verification in flight",
                       lambda: s.metrics().get("sv_supervisor_in_flight", 0)
                       >= 1 and s.metrics().get("sv_sandboxes_live", 0) >= 1,
                       server=s)
            sock.close()
            wait_until("its cancellation",
                       lambda: s.metrics().get("sv_in_flight") == 0
                       and s.metrics().get("sv_supervisor_in_flight") == 0
                       and s.metrics().get("sv_sandboxes_live") == 0,
                       server=s)
            after = s.metrics()["sv_sandboxes_stopped_total"]
            check(after > before, f"{path}: stopped {before} -> {after}", s)
        check(s.stop() == 0, "exit status", s)
    finally:
        if s.proc.poll() is None:
            s.stop()
    book = json.loads(open(ledger).read().splitlines()[-1])
    check(book["live"] == 0 and book["creates"] == 3, f"ledger: {book}")
    print("ok: disconnects cancel (verify and batch), nothing left live")


def scripted_tokens(binary, tmp):
    tokens = os.path.join(tmp, "tokens")
    with open(tokens, "w") as f:
        f.write("first-token\n\n  second-token  \n")
    config = os.path.join(tmp, "tokens.json")
    with open(config, "w") as f:
        json.dump({"scripted": {}}, f)
    s = Server(binary, tmp, ["--provider-config", config,
                             "--token-file", tokens], "tokens")
    try:
        status, headers, _ = post(s, "/v1/verify", submission("t"))
        check(status == 401 and headers.get("WWW-Authenticate") == "Bearer",
              f"no token: {status} {headers}", s)
        status, _, _ = post(s, "/v1/verify", submission("t"), "wrong")
        check(status == 401, f"wrong token: {status}", s)
        status, _, _ = post(s, "/v1/verify", submission("t"), "second-token")
        check(status == 200, f"good token: {status}", s)
        status, _, _ = s.request("GET", "/healthz")
        check(status == 200, "healthz needs no token", s)
        with open(tokens, "w") as f:
            f.write("third-token\n")
        s.proc.send_signal(signal.SIGHUP)
        wait_until("the reload", lambda: post(
            s, "/v1/verify", submission("t"), "third-token")[0] == 200,
            server=s)
        status, _, _ = post(s, "/v1/verify", submission("t"), "first-token")
        check(status == 401, f"old token after SIGHUP: {status}", s)
        check(s.stop() == 0, "exit status", s)
    finally:
        if s.proc.poll() is None:
            s.stop()
    print("ok: 401 with WWW-Authenticate, tokens re-read on SIGHUP")


def scripted_drain(binary, tmp):
    """SIGTERM: healthz 503, new work 503, the one in flight finishes."""
    config = os.path.join(tmp, "drain.json")
    with open(config, "w") as f:
        json.dump({"scripted": {"steps": {
            "exec": [{"fault": "delay", "delay_ms": 1500}]}}}, f)
    s = Server(binary, tmp, ["--provider-config", config], "drain")
    try:
        result = {}

        def slow():
            result["r"] = post(s, "/v1/verify", submission("slow"))

        t = threading.Thread(target=slow)
        t.start()
        wait_until("the slow one in flight",
                   lambda: s.metrics().get("sv_in_flight") == 1, server=s)
        s.proc.send_signal(signal.SIGTERM)
        wait_until("healthz 503",
                   lambda: s.request("GET", "/healthz")[0] == 503, server=s)
        status, _, _ = post(s, "/v1/verify", submission("late"))
        check(status == 503, f"new work while draining: {status}", s)
        t.join(TIMEOUT)
        check(not t.is_alive(), "the slow request did not end", s)
        status, _, body = result["r"]
        check(status == 200 and json.loads(body)["ok"],
              f"in flight at SIGTERM: {status} {body}", s)
        check(s.proc.wait(10) == 0, "exit status after the drain", s)
    finally:
        if s.proc.poll() is None:
            s.stop()
    # A batch streaming at SIGTERM gets every line before sv-serve exits.
    s = Server(binary, tmp, ["--provider-config", config], "drain-batch")
    try:
        c = s.conn()
        body = "\n".join(submission(f"d{i}") for i in range(3)) + "\n"
        c.request("POST", "/v1/verify/batch", body=body)
        r = c.getresponse()
        first = json.loads(r.readline())
        s.proc.send_signal(signal.SIGTERM)
        rest = [json.loads(line) for line in r.read().splitlines()]
        c.close()
        ids = sorted([first["id"]] + [o["id"] for o in rest])
        check(ids == ["d0", "d1", "d2"] and first["ok"]
              and all(o["ok"] for o in rest), f"drained batch: {ids}", s)
        check(s.proc.wait(10) == 0, "exit status after the batch drain", s)
    finally:
        if s.proc.poll() is None:
            s.stop()
    print("ok: SIGTERM drains (a verify and a streaming batch)")


def closed_within(sock, seconds):
    """Whether the server closes `sock` within `seconds` (reads discarded)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            if sock.recv(65536) == b"":
                return True
        except socket.timeout:
            return False
        except ConnectionResetError:
            return True
    return False


def scripted_limits(binary, tmp):
    """429 with Retry-After when the queue is full; slow clients timed out;
    requests that are not HTTP get 400 and the server goes on."""
    config = os.path.join(tmp, "limits.json")
    with open(config, "w") as f:
        json.dump({"scripted": {"steps": {
            "exec": [{"fault": "delay", "delay_ms": 1500}]}}}, f)
    s = Server(binary, tmp, ["--provider-config", config,
                             "--concurrency", "1", "--max-queue", "0",
                             "--header-timeout-s", "0.5",
                             "--body-timeout-s", "0.5"], "limits")
    try:
        result = {}
        t = threading.Thread(target=lambda: result.update(
            r=post(s, "/v1/verify", submission("slow"))))
        t.start()
        wait_until("the slow one in flight",
                   lambda: s.metrics().get("sv_supervisor_in_flight") == 1,
                   server=s)
        status, headers, body = post(s, "/v1/verify", submission("more"))
        check(status == 429 and headers.get("Retry-After") == "1"
              and json.loads(body)["failure"]["cause"] == "overloaded",
              f"429: {status} {headers} {body}", s)
        t.join(TIMEOUT)
        check(result["r"][0] == 200, f"the slow one: {result}", s)

        t0 = time.monotonic()
        header_only = socket.create_connection(("127.0.0.1", s.port), TIMEOUT)
        header_only.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        body_short = socket.create_connection(("127.0.0.1", s.port), TIMEOUT)
        body_short.sendall(b"POST /v1/verify HTTP/1.1\r\nHost: x\r\n"
                           b"Content-Length: 100\r\n\r\n{\"id\"")
        check(closed_within(header_only, 5) and closed_within(body_short, 5)
              and time.monotonic() - t0 < 5, "slow clients not timed out", s)
        header_only.close()
        body_short.close()

        for junk in (b"HELLO\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n",
                     b"\x00\xff" * 50 + b"\r\n\r\n",
                     b"POST /v1/verify HTTP/1.1\r\nContent-Length: -1\r\n\r\n"):
            sock = socket.create_connection(("127.0.0.1", s.port), TIMEOUT)
            sock.sendall(junk)
            sock.settimeout(TIMEOUT)
            reply = sock.recv(65536)
            sock.close()
            check(reply.startswith(b"HTTP/1.1 400"), f"{junk!r}: {reply!r}", s)
        status, _, _ = s.request("GET", "/healthz")
        check(status == 200, "alive after junk", s)
        check(s.stop() == 0, "exit status", s)
    finally:
        if s.proc.poll() is None:
            s.stop()
    print("ok: 429 Retry-After, slowloris timed out, junk is 400")


def scripted_many_connections(binary, tmp, n=300):
    """n connections at once, each a verify: every one answered 200 or
    429, none dropped."""
    config = os.path.join(tmp, "many.json")
    with open(config, "w") as f:
        json.dump({"scripted": {}}, f)
    s = Server(binary, tmp, ["--provider-config", config,
                             "--max-queue", "50"], "many")
    try:
        statuses = []
        lock = threading.Lock()
        start = threading.Barrier(n, timeout=TIMEOUT)

        def one(i):
            try:
                start.wait()
                status, _, _ = post(s, "/v1/verify", submission(f"m{i}"))
            except Exception as e:  # counted as dropped
                status = repr(e)
            with lock:
                statuses.append(status)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(2 * TIMEOUT)
        check(len(statuses) == n and all(x in (200, 429) for x in statuses),
              f"answers: {sorted(set(map(str, statuses)))}", s)
        check(s.stop() == 0, "exit status", s)
    finally:
        if s.proc.poll() is None:
            s.stop()
    print(f"ok: {n} connections at once, {statuses.count(200)} answered 200, "
          f"{statuses.count(429)} 429")


# -- local --------------------------------------------------------------------

def local_humaneval(binary, tmp, make_jobs, python):
    root = os.path.join(tmp, "sandboxes")
    config = os.path.join(tmp, "local.json")
    with open(config, "w") as f:
        json.dump({"local": {"root": root}}, f)
    jobs = subprocess.run([python, make_jobs, "--python", python, "--variant",
                           "alternate", "--limit", "4"], check=True,
                          capture_output=True, text=True,
                          timeout=60).stdout.splitlines()
    s = Server(binary, tmp, ["--provider-config", config], "local")
    try:
        first = json.loads(jobs[0])
        status, _, body = post(s, "/v1/verify", jobs[0])
        out = json.loads(body)
        check(status == 200 and out["ok"] and out["id"] == first["id"]
              and out["result"]["reward"] == 1.0, f"verify: {status} {out}", s)
        status, _, body = post(s, "/v1/verify/batch", "\n".join(jobs) + "\n")
        outs = [json.loads(line) for line in body.decode().splitlines()]
        check(status == 200 and len(outs) == 4, f"batch: {status} {outs}", s)
        for o in outs:
            want = 0.0 if o["id"].endswith("#broken") else 1.0
            check(o["ok"] and o["result"]["reward"] == want, f"batch: {o}", s)
        check(s.stop() == 0, "exit status", s)
    finally:
        if s.proc.poll() is None:
            s.stop()
    left = os.listdir(root) if os.path.isdir(root) else []
    check(left == [], f"left under the sandbox root: {left}")
    print("ok: HumanEval on the local provider, nothing left")


def main():
    if len(sys.argv) != 5:
        sys.exit(f"usage: {sys.argv[0]} SV_SERVE MAKE_JOBS PYTHON MODE")
    binary, make_jobs, python, mode = sys.argv[1:]
    with tempfile.TemporaryDirectory(prefix="sv-serve-test-") as tmp:
        if mode == "scripted":
            scripted_basics(binary, tmp)
            scripted_batch_streams(binary, tmp)
            scripted_disconnect_cancels(binary, tmp)
            scripted_tokens(binary, tmp)
            scripted_drain(binary, tmp)
            scripted_limits(binary, tmp)
            scripted_many_connections(binary, tmp)
        elif mode == "local":
            local_humaneval(binary, tmp, make_jobs, python)
        else:
            sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
