#!/usr/bin/env python3
"""sv-serve's sandbox API end to end, real sockets on 127.0.0.1 (standard
library only), on the scripted provider.

Called as: e2e_sandboxes.py SV_SERVE MODE
  MODE api: every route and status code, ownership across two tokens,
    idempotent create (sequential and concurrent: one sandbox made), the
    per-token limit (429), TTL and idle reaping, SIGTERM stopping every
    sandbox (the provider's ledger: nothing left live).
  MODE lifetime: a create whose client went away is stopped as soon as it
    is made, one made after --sandbox-create-timeout-s too (its caller had
    504); an Idempotency-Key replay of a sandbox being stopped is 409
    `sandbox_stopping` (state "stopping"), a new one once it is gone (the
    provider's ledger: every sandbox stopped).
  MODE files: binary files on the local provider: raw bytes in and out
    (application/octet-stream), {"base64"} values of a JSON upload,
    absolute paths (/sandbox, and /tmp under bwrap as root), '..' and
    symlink escapes refused naming the path, the size limits named.
Every wait is bounded.
"""

import base64
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_serve import TIMEOUT, Server, check, wait_until  # noqa: E402


def call(s, method, path, body=None, token=None, key=None):
    headers = {}
    if token is not None:
        headers["Authorization"] = "Bearer " + token
    if key is not None:
        headers["Idempotency-Key"] = key
    if body is not None and not isinstance(body, (str, bytes)):
        body = json.dumps(body)
    status, hdrs, raw = s.request(method, path, body, headers)
    return status, hdrs, raw


def js(raw):
    return json.loads(raw) if raw else None


def error_code(raw):
    return js(raw)["error"]["code"]


def ledger_book(path):
    return json.loads(open(path).read().splitlines()[-1])


def write_tokens(tmp):
    tokens = os.path.join(tmp, "tokens")
    with open(tokens, "w") as f:
        f.write("alice\nbob\n")
    return tokens


def api_routes(binary, tmp):
    """Every route and code, ownership, the per-token limit, drain."""
    ledger = os.path.join(tmp, "routes.ledger")
    config = os.path.join(tmp, "routes.json")
    with open(config, "w") as f:
        json.dump({"scripted": {"ledger_file": ledger,
                                "result_text": "\u00e9\x00bytes"}}, f)
    s = Server(binary, tmp, ["--provider-config", config, "--token-file",
                             write_tokens(tmp), "--max-sandboxes-per-token",
                             "3"], "routes")
    try:
        st, hdrs, raw = call(s, "POST", "/v1/sandboxes", {})
        check(st == 401 and hdrs.get("WWW-Authenticate") == "Bearer"
              and error_code(raw) == "unauthorized", f"no token: {st}", s)
        st, _, raw = call(s, "POST", "/v1/sandboxes", {"ttl_s": 30},
                          token="alice")
        check(st == 201, f"create: {st} {raw}", s)
        made = js(raw)
        sid = made["sandbox_id"]
        check(made["provider_name"] == "scripted" and made["ttl_s"] == 30,
              f"create body: {made}", s)
        base = "/v1/sandboxes/" + sid
        st, _, raw = call(s, "GET", base, token="alice")
        check(st == 200 and js(raw) == {"status": "running"},
              f"status: {st} {raw}", s)
        st, _, raw = call(s, "PUT", base + "/files",
                          {"dir": "", "files": {"a.txt": "hi"}},
                          token="alice")
        check(st == 204 and raw == b"", f"upload: {st} {raw}", s)
        st, _, raw = call(s, "POST", base + "/exec",
                          {"argv": ["true"], "timeout_s": 5}, token="alice")
        check(st == 200 and js(raw)["return_code"] == 0
              and js(raw)["error_type"] == "none", f"exec: {st} {raw}", s)
        path = urllib.parse.quote("result dir/r.json")
        st, hdrs, raw = call(s, "GET", f"{base}/files?path={path}",
                             token="alice")
        check(st == 200 and raw == "\u00e9\x00bytes".encode()
              and hdrs.get("Content-Type") == "application/octet-stream",
              f"download: {st} {hdrs} {raw!r}", s)
        # Errors of each route.
        for method, path, body, want, code in (
                ("POST", "/v1/sandboxes", "{", 400, "invalid_request"),
                ("POST", "/v1/sandboxes", {"nope": 1}, 400, "invalid_request"),
                ("POST", "/v1/sandboxes", "[" * 300 + "]" * 300, 400,
                 "invalid_request"),
                ("PUT", base + "/files", {"dir": "x"}, 400, "invalid_request"),
                ("PUT", base + "/files", {"files": {"a": 1}}, 400,
                 "invalid_request"),
                ("POST", base + "/exec", {"argv": []}, 400, "invalid_request"),
                ("GET", base + "/files", None, 400, "invalid_request"),
                ("GET", base + "/files?path=%zz", None, 400,
                 "invalid_request"),
                ("GET", "/v1/sandboxes/sbx-nope", None, 404,
                 "no_such_sandbox"),
                ("GET", base + "/other", None, 404, "no_such_endpoint"),
                ("PATCH", base, None, 405, "method_not_allowed"),
                ("GET", "/v1/sandboxes", None, 405, "method_not_allowed")):
            st, hdrs, raw = call(s, method, path, body, token="alice")
            check(st == want and error_code(raw) == code,
                  f"{method} {path}: {st} {raw}", s)
            if want == 405:
                check("Allow" in hdrs, f"405 without Allow: {hdrs}", s)
        # An id that is not UTF-8 (raw bytes in the path).
        sock = socket.create_connection(("127.0.0.1", s.port), TIMEOUT)
        sock.sendall(b"GET /v1/sandboxes/\xff\xfe HTTP/1.1\r\nHost: x\r\n"
                     b"Authorization: Bearer alice\r\nConnection: close"
                     b"\r\n\r\n")
        sock.settimeout(TIMEOUT)
        reply = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            reply += chunk
        sock.close()
        check(reply.startswith(b"HTTP/1.1 404") and b"no_such_sandbox" in reply,
              f"a non-UTF-8 id: {reply!r}", s)
        st, _, raw = call(s, "POST", "/v1/sandboxes", {}, token="alice",
                          key="bad key!")
        check(st == 400 and error_code(raw) == "invalid_request",
              f"bad key: {st}", s)
        st, _, raw = call(s, "POST", "/v1/sandboxes", {}, token="alice",
                          key="k" * 201)
        check(st == 400, f"long key: {st}", s)
        # Another token sees nothing of alice's.
        for method, path, body in (
                ("GET", base, None),
                ("PUT", base + "/files", {"dir": "", "files": {}}),
                ("POST", base + "/exec", {"argv": ["true"], "timeout_s": 1}),
                ("GET", base + "/files?path=r.json", None),
                ("DELETE", base, None)):
            st, _, raw = call(s, method, path, body, token="bob")
            check(st == 404 and error_code(raw) == "no_such_sandbox",
                  f"bob {method} {path}: {st} {raw}", s)
        st, _, _ = call(s, "GET", base, token="alice")
        check(st == 200, f"still alice's after bob's DELETE: {st}", s)
        # Per-token limit: alice has 1, may make 2 more; bob is apart.
        ids = []
        for _ in range(2):
            st, _, raw = call(s, "POST", "/v1/sandboxes", {}, token="alice")
            check(st == 201, f"create under the limit: {st}", s)
            ids.append(js(raw)["sandbox_id"])
        st, hdrs, raw = call(s, "POST", "/v1/sandboxes", {}, token="alice")
        check(st == 429 and hdrs.get("Retry-After") == "1"
              and error_code(raw) == "too_many_sandboxes",
              f"over the limit: {st} {hdrs} {raw}", s)
        st, _, _ = call(s, "POST", "/v1/sandboxes", {}, token="bob")
        check(st == 201, f"bob's own: {st}", s)
        # DELETE: 204, again 204 (owner), then 404 for everything else.
        st, _, raw = call(s, "DELETE", base, token="alice")
        check(st == 204 and raw == b"", f"delete: {st} {raw}", s)
        st, _, _ = call(s, "DELETE", base, token="alice")
        check(st == 204, f"delete again: {st}", s)
        st, _, _ = call(s, "DELETE", base, token="bob")
        check(st == 404, f"bob deletes alice's stopped one: {st}", s)
        st, _, raw = call(s, "GET", base, token="alice")
        check(st == 404 and error_code(raw) == "no_such_sandbox",
              f"status after delete: {st}", s)
        st, _, _ = call(s, "POST", "/v1/sandboxes", {}, token="alice")
        check(st == 201, f"a slot is free again: {st}", s)
        m = s.metrics()
        check(m.get("sv_api_sandboxes_live") == 4
              and m.get("sv_sandboxes_live") == 4
              and m.get("sv_api_sandbox_creates_total") == 5,
              f"metrics: {m}", s)
        # SIGTERM: creates refused, every sandbox stopped.
        s.proc.send_signal(signal.SIGTERM)
        check(s.proc.wait(15) == 0, "exit status after SIGTERM", s)
    finally:
        if s.proc.poll() is None:
            s.stop()
    book = ledger_book(ledger)
    check(book["live"] == 0 and book["creates"] == 5, f"ledger: {book}")
    print("ok: every route and code, ownership, per-token limit, SIGTERM "
          "stops every sandbox")


def api_idempotent(binary, tmp):
    """The same key gives the same sandbox, sequentially and while the first
    create is still in flight; exactly one sandbox is made."""
    ledger = os.path.join(tmp, "idem.ledger")
    config = os.path.join(tmp, "idem.json")
    with open(config, "w") as f:
        json.dump({"scripted": {"ledger_file": ledger, "steps": {
            "create": [{"fault": "delay", "delay_ms": 400}]}}}, f)
    s = Server(binary, tmp, ["--provider-config", config, "--token-file",
                             write_tokens(tmp)], "idem")
    try:
        results = []
        lock = threading.Lock()

        def create():
            r = call(s, "POST", "/v1/sandboxes", {"ttl_s": 60},
                     token="alice", key="retry-1")
            with lock:
                results.append(r)

        threads = [threading.Thread(target=create) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(TIMEOUT)
        statuses = sorted(r[0] for r in results)
        ids = {js(r[2])["sandbox_id"] for r in results}
        check(len(results) == 8 and statuses == [200] * 7 + [201]
              and len(ids) == 1, f"concurrent: {statuses} {ids}", s)
        st, _, raw = call(s, "POST", "/v1/sandboxes", {"ttl_s": 60},
                          token="alice", key="retry-1")
        check(st == 200 and js(raw)["sandbox_id"] in ids,
              f"sequential replay: {st} {raw}", s)
        st, _, raw = call(s, "POST", "/v1/sandboxes", {"ttl_s": 61},
                          token="alice", key="retry-1")
        check(st == 422 and error_code(raw) == "idempotency_key_reused",
              f"same key, other spec: {st} {raw}", s)
        st, _, raw = call(s, "POST", "/v1/sandboxes", {"ttl_s": 60},
                          token="bob", key="retry-1")
        check(st == 201 and js(raw)["sandbox_id"] not in ids,
              f"keys are per token: {st} {raw}", s)
        check(s.metrics().get("sv_api_sandbox_creates_total") == 2,
              "two creates reached the provider", s)
        check(s.stop() == 0, "exit status", s)
    finally:
        if s.proc.poll() is None:
            s.stop()
    book = ledger_book(ledger)
    check(book["creates"] == 2 and book["live"] == 0, f"ledger: {book}")
    print("ok: idempotent create (8 at once: one sandbox; replay 200)")


def api_reaping(binary, tmp):
    """An abandoned sandbox is stopped at its TTL, an idle one at the idle
    timeout; a TTL above the maximum is cut to it."""
    ledger = os.path.join(tmp, "reap.ledger")
    config = os.path.join(tmp, "reap.json")
    with open(config, "w") as f:
        json.dump({"scripted": {"ledger_file": ledger}}, f)
    s = Server(binary, tmp, ["--provider-config", config,
                             "--sandbox-idle-s", "1.5",
                             "--max-sandbox-ttl-s", "100"], "reap")
    try:
        st, _, raw = call(s, "POST", "/v1/sandboxes", {"ttl_s": 0.5})
        check(st == 201, f"create: {st}", s)
        short = js(raw)["sandbox_id"]
        st, _, raw = call(s, "POST", "/v1/sandboxes", {"ttl_s": 1e5})
        check(st == 201 and js(raw)["ttl_s"] == 100, f"capped: {raw}", s)
        idle = js(raw)["sandbox_id"]
        # Which reason reaped which sandbox is read from the log, never
        # from when a look found it gone: on a busy machine a look at the
        # idle one may come after its 1.5 s. The waits are bounds only.
        wait_until("the TTL reaping", lambda: call(
            s, "GET", "/v1/sandboxes/" + short)[0] == 404, timeout=30,
            server=s)
        wait_until("the idle reaping", lambda: s.metrics().get(
            "sv_api_sandboxes_live") == 0, timeout=30, server=s)
        check(s.metrics().get("sv_api_sandboxes_reaped_total") == 2,
              "two reaped", s)
        log = s.stderr_tail_all()
        check(f"reaping sandbox {short} (TTL)" in log
              and f"reaping sandbox {idle} (idle)" in log,
              "the short one reaped at its TTL, the other idle", s)
        st, _, _ = call(s, "DELETE", "/v1/sandboxes/" + short)
        check(st == 204, f"delete of a reaped one: {st}", s)
        check(s.stop() == 0, "exit status", s)
    finally:
        if s.proc.poll() is None:
            s.stop()
    book = ledger_book(ledger)
    check(book["live"] == 0, f"ledger: {book}")
    print("ok: TTL and idle reaping")


def lifetime_unclaimed(binary, tmp):
    """Creates nobody can claim are stopped when made, not left to idle."""
    ledger = os.path.join(tmp, "unclaimed.ledger")
    config = os.path.join(tmp, "unclaimed.json")
    with open(config, "w") as f:
        json.dump({"scripted": {"ledger_file": ledger, "steps": {
            "create": [{"fault": "delay", "delay_ms": 800},
                       {"fault": "delay", "delay_ms": 2500}]}}}, f)
    s = Server(binary, tmp, ["--provider-config", config,
                             "--sandbox-create-timeout-s", "1"], "unclaimed")
    try:
        # A client that disconnects during its create.
        sock = socket.create_connection(("127.0.0.1", s.port), TIMEOUT)
        sock.sendall(b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Length: 2\r\n\r\n{}")
        wait_until("the create to start", lambda: s.metrics().get(
            "sv_api_sandbox_creates_total") == 1, timeout=5, server=s)
        sock.close()
        wait_until("the abandoned sandbox stopped", lambda: (
            lambda m: m.get("sv_api_sandboxes_unclaimed_total") == 1
            and m.get("sv_api_sandboxes_live") == 0)(s.metrics()),
            timeout=10, server=s)
        # A create slower than --sandbox-create-timeout-s: 504 at 1 s, its
        # sandbox stopped when it comes.
        st, _, raw = call(s, "POST", "/v1/sandboxes", {})
        check(st == 504, f"slow create: {st} {raw}", s)
        wait_until("the late sandbox stopped", lambda: (
            lambda m: m.get("sv_api_sandboxes_unclaimed_total") == 2
            and m.get("sv_api_sandboxes_live") == 0)(s.metrics()),
            timeout=10, server=s)
        # The next create is an ordinary one.
        st, _, raw = call(s, "POST", "/v1/sandboxes", {})
        check(st == 201, f"create after: {st} {raw}", s)
        check(s.stop() == 0, "exit status", s)
    finally:
        if s.proc.poll() is None:
            s.stop()
    book = ledger_book(ledger)
    check(book["creates"] == 3 and book["live"] == 0, f"ledger: {book}")
    print("ok: a create whose client left and one past its deadline: "
          "stopped when made")


def lifetime_replay(binary, tmp):
    """An Idempotency-Key replay while its sandbox is being stopped."""
    ledger = os.path.join(tmp, "replay.ledger")
    config = os.path.join(tmp, "replay.json")
    with open(config, "w") as f:
        json.dump({"scripted": {"ledger_file": ledger, "steps": {
            "stop": [{"fault": "delay", "delay_ms": 1500}]}}}, f)
    s = Server(binary, tmp, ["--provider-config", config], "replay")
    try:
        st, _, raw = call(s, "POST", "/v1/sandboxes", {"ttl_s": 60},
                          key="k-1")
        check(st == 201, f"create: {st} {raw}", s)
        first = js(raw)["sandbox_id"]
        deleted = []
        t = threading.Thread(target=lambda: deleted.append(
            call(s, "DELETE", "/v1/sandboxes/" + first)[0]))
        t.start()
        # Being stopped: its other routes are 404 already.
        wait_until("the stop to start", lambda: call(
            s, "GET", "/v1/sandboxes/" + first)[0] == 404, timeout=5,
            server=s)
        st, _, raw = call(s, "POST", "/v1/sandboxes", {"ttl_s": 60},
                          key="k-1")
        err = js(raw)["error"]
        check(st == 409 and err["code"] == "sandbox_stopping" and
              err["state"] == "stopping" and err["sandbox_id"] == first,
              f"replay while stopping: {st} {raw}", s)
        t.join(TIMEOUT)
        check(deleted == [204], f"delete: {deleted}", s)
        st, _, raw = call(s, "POST", "/v1/sandboxes", {"ttl_s": 60},
                          key="k-1")
        check(st == 201 and js(raw)["sandbox_id"] != first,
              f"the key after the stop: {st} {raw}", s)
        check(s.stop() == 0, "exit status", s)
    finally:
        if s.proc.poll() is None:
            s.stop()
    book = ledger_book(ledger)
    check(book["creates"] == 2 and book["live"] == 0, f"ledger: {book}")
    print("ok: a replay of a stopping sandbox is 409 sandbox_stopping; "
          "a new one after")


def lifetime_verify_disconnect(binary, tmp):
    """A /v1/verify client that disconnects during create: the create is
    awaited and its sandbox stopped (the ledger: created 1, live 0)."""
    ledger = os.path.join(tmp, "verify.ledger")
    config = os.path.join(tmp, "verify.json")
    with open(config, "w") as f:
        json.dump({"scripted": {"ledger_file": ledger, "steps": {
            "create": [{"fault": "delay", "delay_ms": 800}]}}}, f)
    s = Server(binary, tmp, ["--provider-config", config], "verify")
    try:
        body = json.dumps({"id": "gone", "files": {"sandbox_runner.py": ""},
                           "request": {}, "exec_timeout_s": 5,
                           "config": {"ready_timeout_s": 5}}).encode()
        sock = socket.create_connection(("127.0.0.1", s.port), TIMEOUT)
        sock.sendall(b"POST /v1/verify HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Length: " + str(len(body)).encode() +
                     b"\r\n\r\n" + body)
        wait_until("the create in flight", lambda: s.metrics().get(
            "sv_supervisor_in_flight") == 1, timeout=5, server=s)
        sock.close()
        wait_until("the cancel", lambda: s.metrics().get(
            "sv_cancelled_total") == 1, timeout=5, server=s)
        wait_until("the late sandbox stopped", lambda: (
            lambda m: m.get("sv_sandboxes_created_total") == 1
            and m.get("sv_sandboxes_live") == 0)(s.metrics()),
            timeout=10, server=s)
        check(s.stop() == 0, "exit status", s)
    finally:
        if s.proc.poll() is None:
            s.stop()
    book = ledger_book(ledger)
    check(book["creates"] == 1 and book["live"] == 0, f"ledger: {book}")
    print("ok: a /v1/verify client gone during create: its sandbox stopped")


BYTES = b"\x00\xff\x00bin\xfe\n\x80" + bytes(range(256))


def files_api(binary, tmp):
    """Bytes both ways, absolute paths, escapes and limits, named."""
    isolated = os.geteuid() == 0 and shutil.which("bwrap") is not None
    config = os.path.join(tmp, "files.json")
    with open(config, "w") as f:
        json.dump({"local": {"root": os.path.join(tmp, "files-root"),
                             "max_download_bytes": 4096}}, f)
    s = Server(binary, tmp, ["--provider-config", config, "--max-body-bytes",
                             str(1 << 16)], "files")
    raw_type = {"Content-Type": "application/octet-stream"}

    def put_raw(base, path, data, headers=raw_type):
        q = urllib.parse.quote(path, safe="")
        return s.request("PUT", f"{base}/files?path={q}", data, headers)

    def get(base, path):
        q = urllib.parse.quote(path, safe="")
        return s.request("GET", f"{base}/files?path={q}")

    def refused(answer, status, code, needle, what):
        st, _, raw = answer
        check(st == status and error_code(raw) == code and
              needle in js(raw)["error"]["message"], f"{what}: {st} {raw}", s)

    try:
        st, _, raw = call(s, "POST", "/v1/sandboxes", {"ttl_s": 60})
        check(st == 201, f"create: {st} {raw}", s)
        base = "/v1/sandboxes/" + js(raw)["sandbox_id"]
        # Raw bytes in, raw bytes out, relative and absolute in the workdir.
        for path in ("rel/b.bin", "/sandbox/abs/b.bin"):
            st, _, raw = put_raw(base, path, BYTES)
            check(st == 204, f"PUT {path}: {st} {raw}", s)
            st, hdrs, raw = get(base, path)
            check(st == 200 and raw == BYTES and hdrs.get("Content-Type") ==
                  "application/octet-stream", f"GET {path}: {st} {raw!r}", s)
        # {"base64": ...} in a JSON upload, text beside it.
        st, _, raw = call(s, "PUT", base + "/files", {
            "dir": "/sandbox/j", "files": {
                "b.bin": {"base64": base64.b64encode(BYTES).decode()},
                "t.txt": "text"}})
        check(st == 204, f"JSON upload of bytes: {st} {raw}", s)
        check(get(base, "j/b.bin")[2] == BYTES and
              get(base, "/sandbox/j/t.txt")[2] == b"text", "JSON upload", s)
        refused(call(s, "PUT", base + "/files", {
            "files": {"b.bin": {"base64": "A"}}}), 400, "invalid_request",
            "files.b.bin.base64: not base64", "bad base64")
        st, _, raw = call(s, "POST", base + "/exec", {
            "argv": ["sh", "-c", "cmp rel/b.bin abs/b.bin && cmp rel/b.bin "
                     "j/b.bin && echo same"], "timeout_s": 20})
        check(st == 200 and js(raw)["stdout"] == "same\n", f"cmp: {raw}", s)
        # /tmp: the sandbox's own under bwrap; else refused by name.
        if isolated:
            st, _, raw = put_raw(base, "/tmp/x/bin.dat", BYTES)
            check(st == 204, f"PUT /tmp/x/bin.dat: {st} {raw}", s)
            st, _, raw = call(s, "POST", base + "/exec", {
                "argv": ["sh", "-c", "cmp /tmp/x/bin.dat /sandbox/rel/b.bin "
                         "&& ln -s /etc /tmp/etc && ln -s /etc/passwd "
                         "/tmp/x/pw && echo ok"], "timeout_s": 20})
            check(st == 200 and js(raw)["stdout"] == "ok\n",
                  f"exec in /tmp: {raw}", s)
            check(get(base, "/tmp/x/bin.dat")[2] == BYTES, "GET /tmp", s)
            refused(get(base, "/tmp/etc/passwd"), 400, "invalid_path",
                    "/tmp/etc is a symlink, refusing to follow it",
                    "symlinked directory")
            refused(put_raw(base, "/tmp/etc/x", b"x"), 400, "invalid_path",
                    "/tmp/etc is a symlink, refusing to follow it",
                    "upload through a symlink")
            refused(get(base, "/tmp/x/pw"), 400, "not_regular_file",
                    "/tmp/x/pw is a symlink, refusing to follow it",
                    "symlink as the file")
        else:
            refused(put_raw(base, "/tmp/x/bin.dat", BYTES), 400,
                    "invalid_path", '"/tmp/x/bin.dat" is not writable in the '
                    "sandbox", "/tmp without bwrap")
        for path in ("../x.bin", "/sandbox/../etc/x", "a//b"):
            refused(put_raw(base, path, b"x"), 400, "invalid_path",
                    f'path "{path}" escapes the sandbox', f"PUT {path}")
        refused(get(base, "../x.bin"), 400, "invalid_path",
                '"../x.bin" escapes the sandbox', "GET ../x.bin")
        refused(put_raw(base, "/usr/x.bin", b"x"), 400, "invalid_path",
                '"/usr/x.bin" is not writable in the sandbox', "PUT /usr")
        refused(get(base, "/etc/passwd"), 400, "invalid_path",
                '"/etc/passwd" is not writable in the sandbox', "GET /etc")
        refused(put_raw(base, "/x.bin", b"x"), 400, "invalid_path",
                'path "/x.bin" is not a file in a directory', "PUT /x.bin")
        refused(s.request("PUT", base + "/files", b"x", raw_type), 400,
                "invalid_request", "?path=FILE", "no path")
        # The limits, named: the body cap and the provider's download cap.
        refused(put_raw(base, "big.bin", b"\xff" * ((1 << 16) + 1)), 413,
                "payload_too_large", "body longer than --max-body-bytes "
                f"{1 << 16}", "over --max-body-bytes")
        st, _, raw = put_raw(base, "dl.bin", b"\xff" * 4097)
        check(st == 204, f"PUT dl.bin: {st}", s)
        refused(get(base, "dl.bin"), 500, "too_large",
                "dl.bin is 4097 bytes, over the 4096 byte download cap",
                "over max_download_bytes")
        st, _, _ = call(s, "DELETE", base)
        check(st == 204, f"DELETE: {st}", s)
    finally:
        s.stop()
    print(f"files: bytes both ways, escapes refused "
          f"({'bwrap, /tmp' if isolated else 'no bwrap: /tmp refused'})")


def main():
    if len(sys.argv) != 3:
        sys.exit(f"usage: {sys.argv[0]} SV_SERVE MODE")
    binary, mode = sys.argv[1:]
    with tempfile.TemporaryDirectory(prefix="sv-serve-sbx-") as tmp:
        if mode == "api":
            api_routes(binary, tmp)
            api_idempotent(binary, tmp)
            api_reaping(binary, tmp)
        elif mode == "lifetime":
            lifetime_unclaimed(binary, tmp)
            lifetime_replay(binary, tmp)
            lifetime_verify_disconnect(binary, tmp)
        elif mode == "files":
            files_api(binary, tmp)
        else:
            sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
