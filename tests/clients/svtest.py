"""What the Python client tests share: a real sv-serve on 127.0.0.1 port 0,
a stand-in HTTP server that is not sv-serve, test certificates. Standard
library only; every wait bounded."""

import http.server
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT_SRC = os.path.normpath(os.path.join(HERE, "..", "..", "clients",
                                           "python", "src"))
SKIP = 77


def use_source_tree():
    """Imports sv_client from clients/python/src (not an installed copy)."""
    sys.path.insert(0, CLIENT_SRC)


class Server:
    """sv-serve on 127.0.0.1:0 with a provider block; ``stop`` is bounded."""

    def __init__(self, binary, tmp, name, block, token=None, tls=None,
                 extra=()):
        self.dir = os.path.join(tmp, name)
        os.makedirs(self.dir, exist_ok=True)
        config = os.path.join(self.dir, "provider.json")
        with open(config, "w") as f:
            json.dump(block, f)
        args = [binary, "--listen", "127.0.0.1:0", "--provider-config",
                config, "--log-level", "warn", *extra]
        if token:
            tokens = os.path.join(self.dir, "tokens")
            with open(tokens, "w") as f:
                f.write(token + "\n")
            args += ["--token-file", tokens]
        if tls:
            args += ["--tls-cert", tls[0], "--tls-key", tls[1]]
        self.err_path = os.path.join(self.dir, "stderr")
        self.err = open(self.err_path, "w")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE,
                                     stderr=self.err, text=True)
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        line = self.proc.stdout.readline() if ready else ""
        m = re.fullmatch(r"listening on 127\.0\.0\.1:(\d+)\n", line)
        if m is None:
            self.stop()
            raise AssertionError(f"no 'listening on' line: {line!r}: "
                                 f"{open(self.err_path).read()[-2000:]}")
        self.port = int(m.group(1))
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError("sv-serve did not stop within 30 s")
        finally:
            self.err.close()
            self.proc.stdout.close()


class FakeServer:
    """An HTTP server on 127.0.0.1 that is not sv-serve: every request is
    recorded ``(method, path, headers, body)`` and answered by
    ``answer(method, path, body) -> (status, content_type, body bytes)``."""

    def __init__(self, answer):
        seen = self.requests = []

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def handle_one(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                seen.append((self.command, self.path, dict(self.headers),
                             body))
                status, ctype, data = answer(self.command, self.path, body)
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = handle_one

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                                     Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       args=(0.05,), daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)


def make_certificates(tmp):
    """A test CA, a server certificate for 127.0.0.1 signed by it, and
    another CA; None without the openssl CLI. Returns a dict of paths."""
    openssl = shutil.which("openssl")
    if openssl is None:
        return None

    def run(*args):
        subprocess.run([openssl, *args], check=True, capture_output=True,
                       timeout=60, cwd=tmp)

    for ca in ("ca", "other"):
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
    return {name: os.path.join(tmp, name) for name in
            ("ca.pem", "other.pem", "server.pem", "server.key")}


def run_suites(cases):
    """Runs unittest cases; the exit status says whether all passed."""
    import unittest
    suite = unittest.TestSuite(
        unittest.defaultTestLoader.loadTestsFromTestCase(c) for c in cases)
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    return 0 if result.wasSuccessful() else 1
