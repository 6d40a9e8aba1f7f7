#!/usr/bin/env python3
"""The Python client (examples/clients/python/sv_client.py) against a real
sv-serve child process on 127.0.0.1 (standard library unittest).

Called as: e2e_sv_client.py SV_SERVE PYTHON MODE
  MODE scripted: the scripted provider: pass, sandbox fault, invalid request,
    wrong token, server gone, 429/5xx/garbage from a fake server, the async
    form concurrently, the NeMo Gym-style verify helper.
  MODE local: the local provider: pass, wrong answer, runner crash, runner
    timeout, a result the parser rejects, parse_result, work_dir, async.
Every wait is bounded.
"""

import asyncio
import http.server
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "clients",
                                "python"))

import sv_client  # noqa: E402
from sv_client import (SandboxVerificationConfig,  # noqa: E402
                       SandboxVerificationError, run_verification_sandbox,
                       run_verification_sandbox_async, verify, verify_async)

SV_SERVE = PYTHON = MODE = None
TMP = None


class Server:
    """sv-serve on port 0; stopped (bounded) by `stop`."""

    def __init__(self, name, block, args=()):
        config = os.path.join(TMP, name + ".json")
        with open(config, "w") as f:
            json.dump(block, f)
        self.err_path = os.path.join(TMP, name + ".stderr")
        self.err = open(self.err_path, "w")
        self.proc = subprocess.Popen(
            [SV_SERVE, "--listen", "127.0.0.1:0", "--provider-config", config,
             *args], stdout=subprocess.PIPE, stderr=self.err, text=True)
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        line = self.proc.stdout.readline() if ready else ""
        m = re.fullmatch(r"listening on 127\.0\.0\.1:(\d+)\n", line)
        if m is None:
            self.stop()
            raise AssertionError(f"no 'listening on' line: {line!r}: "
                                 f"{open(self.err_path).read()[-2000:]}")
        self.port = int(m.group(1))
        self.url = f"http://127.0.0.1:{self.port}"

    def provider(self, token=None):
        return {"url": self.url, "token": token}

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError("sv-serve did not stop within 30 s")
        finally:
            self.err.close()


def config(**kw):
    kw.setdefault("ready_timeout_s", 10)
    kw.setdefault("python", PYTHON)
    return SandboxVerificationConfig(**kw)


FILES = {"sandbox_runner.py": ""}  # the scripted provider runs nothing


class Scripted(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ok = Server("ok", {"scripted": {}})
        cls.faulty = Server("faulty", {"scripted": {
            "steps": {"exec": ["garbage"] * 100}}})
        tokens = os.path.join(TMP, "tokens")
        with open(tokens, "w") as f:
            f.write("right-token\n")
        cls.guarded = Server("guarded", {"scripted": {}},
                             ["--token-file", tokens])

    @classmethod
    def tearDownClass(cls):
        for s in (cls.ok, cls.faulty, cls.guarded):
            s.stop()

    def test_pass(self):
        self.assertEqual(run_verification_sandbox(
            self.ok.provider(), config(), FILES, {"q": 1}, 5), {"reward": 1.0})

    def test_parse_result_gets_the_text(self):
        seen = []
        out = run_verification_sandbox(
            self.ok.provider(), config(), FILES, {}, 5,
            parse_result=lambda text: seen.append(text) or "parsed")
        self.assertEqual(out, "parsed")
        self.assertEqual(json.loads(seen[0]), {"reward": 1.0})

    def test_sandbox_fault_is_provider_unavailable(self):
        with self.assertRaises(SandboxVerificationError) as e:
            run_verification_sandbox(self.faulty.provider(), config(), FILES,
                                     {}, 5)
        self.assertEqual((e.exception.failure_kind, e.exception.state),
                         ("provider_unavailable", "exec"))

    def test_invalid_request(self):
        with self.assertRaises(SandboxVerificationError) as e:
            run_verification_sandbox(self.ok.provider(), config(),
                                     {"harness.py": ""}, {}, 5)
        x = e.exception
        self.assertEqual((x.failure_kind, x.state, x.cause, x.http_status),
                         ("invalid_request", "validate", "invalid_request",
                          400))
        self.assertIn("sandbox_runner.py", x.message)

    def test_not_json_is_invalid_request(self):
        with self.assertRaises(SandboxVerificationError) as e:
            run_verification_sandbox(self.ok.provider(), config(), FILES,
                                     {"x": object()}, 5)
        self.assertEqual(e.exception.failure_kind, "invalid_request")

    def test_bad_provider_is_invalid_request(self):
        for provider in ({}, {"url": "ftp://x"}, "http://127.0.0.1:1"):
            with self.assertRaises(SandboxVerificationError) as e:
                run_verification_sandbox(provider, config(), FILES, {}, 5)
            self.assertEqual(e.exception.failure_kind, "invalid_request")

    def test_wrong_token(self):
        self.assertEqual(run_verification_sandbox(
            self.guarded.provider("right-token"), config(), FILES, {}, 5),
            {"reward": 1.0})
        for token in ("wrong-token", None):
            with self.assertRaises(SandboxVerificationError) as e:
                run_verification_sandbox(self.guarded.provider(token),
                                         config(), FILES, {}, 5)
            self.assertEqual((e.exception.failure_kind,
                              e.exception.http_status),
                             ("provider_unavailable", 401))

    def test_server_gone(self):
        s = Server("gone", {"scripted": {}})
        provider = s.provider()
        self.assertEqual(s.stop(), 0)
        with self.assertRaises(SandboxVerificationError) as e:
            run_verification_sandbox(provider, config(), FILES, {}, 5)
        self.assertEqual(e.exception.failure_kind, "provider_unavailable")
        self.assertIn("ConnectionRefused", e.exception.message)
        with self.assertRaises(SandboxVerificationError) as e:
            asyncio.run(run_verification_sandbox_async(provider, config(),
                                                       FILES, {}, 5))
        self.assertEqual(e.exception.failure_kind, "provider_unavailable")
        self.assertEqual(verify(provider, config(), FILES, {}, 5)["reward"],
                         0.0)

    def test_async_concurrently(self):
        async def many():
            return await asyncio.gather(*[run_verification_sandbox_async(
                self.ok.provider(), config(), FILES, {"i": i}, 5)
                for i in range(50)])
        started = time.monotonic()
        self.assertEqual(asyncio.run(many()), [{"reward": 1.0}] * 50)
        self.assertLess(time.monotonic() - started, 20)

    def test_async_errors(self):
        with self.assertRaises(SandboxVerificationError) as e:
            asyncio.run(run_verification_sandbox_async(
                self.ok.provider(), config(), {"x.py": ""}, {}, 5))
        self.assertEqual(e.exception.failure_kind, "invalid_request")
        with self.assertRaises(SandboxVerificationError) as e:
            asyncio.run(run_verification_sandbox_async(
                self.guarded.provider("nope"), config(), FILES, {}, 5))
        self.assertEqual(e.exception.failure_kind, "provider_unavailable")

    def test_verify_helper(self):
        self.assertEqual(verify(self.ok.provider(), config(), FILES, {}, 5),
                         {"reward": 1.0, "mask_sample": False})
        out = verify(self.faulty.provider(), config(), FILES, {}, 5)
        self.assertEqual((out["reward"], out["mask_sample"],
                          out["failure_kind"]),
                         (0.0, True, "provider_unavailable"))
        out = asyncio.run(verify_async(self.faulty.provider(), config(),
                                       FILES, {}, 5))
        self.assertEqual(out["failure_kind"], "provider_unavailable")
        out = verify(self.ok.provider(), config(), FILES, {}, 5,
                     parse_result=lambda text: {"reward": "high"})
        self.assertEqual((out["mask_sample"], out["failure_kind"]),
                         (True, "verifier_error"))


class FakeServer(unittest.TestCase):
    """Transport errors sv-serve itself does not produce on demand."""

    def serve(self, status, body, content_type="application/json"):
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass
        httpd = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=httpd.serve_forever, args=(0.05,),
                         daemon=True).start()
        self.addCleanup(httpd.server_close)
        self.addCleanup(httpd.shutdown)
        return {"url": f"http://127.0.0.1:{httpd.server_port}"}

    def expect(self, provider, cause):
        for call in (
                lambda: run_verification_sandbox(provider, config(), FILES,
                                                 {}, 5),
                lambda: asyncio.run(run_verification_sandbox_async(
                    provider, config(), FILES, {}, 5))):
            with self.assertRaises(SandboxVerificationError) as e:
                call()
            self.assertEqual((e.exception.failure_kind, e.exception.cause),
                             ("provider_unavailable", cause))

    def test_5xx(self):
        self.expect(self.serve(500, b"boom"), "error")
        self.expect(self.serve(503, b"draining\n", "text/plain"), "error")

    def test_429(self):
        self.expect(self.serve(429, b"{}"), "overloaded")

    def test_garbage(self):
        self.expect(self.serve(200, b"not json"), "error")

    def test_silent_server_times_out(self):
        import socket
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        self.addCleanup(listener.close)
        old = sv_client._HTTP_SLACK_S
        sv_client._HTTP_SLACK_S = -14.5  # ready 10 + exec 5: 0.5 s
        self.addCleanup(setattr, sv_client, "_HTTP_SLACK_S", old)
        self.expect({"url": f"http://127.0.0.1:{listener.getsockname()[1]}"},
                    "timeout")


RUNNER = r'''
import json, sys, time
req = json.load(open(sys.argv[1]))
if req.get("crash"):
    print("runner crashed on purpose", file=sys.stderr)
    sys.exit(3)
if req.get("sleep"):
    time.sleep(req["sleep"])
if req.get("garbage"):
    open(sys.argv[2], "w").write("not json")
    sys.exit(0)
reward = 1.0 if req.get("answer") == 42 else 0.0
json.dump({"reward": reward, "echo": req}, open(sys.argv[2], "w"))
'''


class Local(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = os.path.join(TMP, "sandboxes")
        cls.s = Server("local", {"local": {"root": cls.root,
                                           "python": PYTHON}})
        cls.files = {"sandbox_runner.py": RUNNER}

    @classmethod
    def tearDownClass(cls):
        cls.s.stop()

    def run_one(self, request, exec_timeout_s=10, **kw):
        return run_verification_sandbox(self.s.provider(), config(),
                                        self.files, request, exec_timeout_s,
                                        **kw)

    def failure(self, request, exec_timeout_s=10, **kw):
        with self.assertRaises(SandboxVerificationError) as e:
            self.run_one(request, exec_timeout_s, **kw)
        return e.exception

    def test_pass(self):
        self.assertEqual(self.run_one({"answer": 42}),
                         {"reward": 1.0, "echo": {"answer": 42}})

    def test_wrong_answer_is_a_result(self):
        self.assertEqual(self.run_one({"answer": 7})["reward"], 0.0)
        self.assertEqual(verify(self.s.provider(), config(), self.files,
                                {"answer": 7}, 10)["mask_sample"], False)

    def test_runner_crash_is_verifier_error(self):
        x = self.failure({"crash": True})
        self.assertEqual((x.failure_kind, x.state), ("verifier_error", "exec"))
        self.assertIn("runner crashed on purpose", x.log_tail)

    def test_timeout_is_verifier_error(self):
        started = time.monotonic()
        x = self.failure({"sleep": 30}, exec_timeout_s=1)
        self.assertEqual((x.failure_kind, x.state, x.cause),
                         ("verifier_error", "exec", "timeout"))
        self.assertLess(time.monotonic() - started, 15)

    def test_rejected_result_is_verifier_error(self):
        x = self.failure({"garbage": True})
        self.assertEqual((x.failure_kind, x.state),
                         ("verifier_error", "parse"))

    def test_parse_result(self):
        self.assertEqual(self.run_one(
            {"answer": 42},
            parse_result=lambda text: json.loads(text)["reward"]), 1.0)
        x = self.failure({"answer": 42}, parse_result=lambda text: 1 / 0)
        self.assertEqual((x.failure_kind, x.state, x.cause),
                         ("verifier_error", "parse", "invalid_result"))
        self.assertIn("ZeroDivisionError", x.message)

    def test_work_dir_and_metadata(self):
        self.assertEqual(self.run_one({"answer": 42}, work_dir="mine/calls",
                                      metadata={"task": "t"})["reward"], 1.0)
        x = self.failure({}, work_dir="../escape")
        self.assertEqual(x.failure_kind, "invalid_request")

    def test_async_concurrently(self):
        async def many():
            return await asyncio.gather(*[run_verification_sandbox_async(
                self.s.provider(), config(), self.files,
                {"answer": 42 if i % 2 == 0 else i}, 10) for i in range(8)],
                return_exceptions=True)
        out = asyncio.run(many())
        self.assertEqual([o["reward"] for o in out],
                         [1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0])


def main():
    global SV_SERVE, PYTHON, MODE, TMP
    if len(sys.argv) != 4:
        sys.exit(f"usage: {sys.argv[0]} SV_SERVE PYTHON scripted|local")
    SV_SERVE, PYTHON, MODE = sys.argv[1:]
    cases = {"scripted": [Scripted, FakeServer], "local": [Local]}[MODE]
    with tempfile.TemporaryDirectory(prefix="sv-client-test-") as tmp:
        TMP = tmp
        suite = unittest.TestSuite(
            unittest.defaultTestLoader.loadTestsFromTestCase(c) for c in cases)
        ok = unittest.TextTestRunner(verbosity=2).run(suite).wasSuccessful()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
