"""Configuration errors are raised, never masked (issue 19 item 24); the
transient faults beside them are masked. Run by e2e_sv_client.py config."""

import asyncio
import os
import socket
import unittest

import svtest

from sv_client import (ConfigurationError, SandboxVerificationConfig,
                       SandboxVerificationError, SvServeConfigurationError,
                       SvServeProvider, run_verification_sandbox,
                       run_verification_sandbox_sync, verify, verify_sync)
from sv_client import _nemo_types

TMP = None
FILES = {"sandbox_runner.py": ""}


def cases(sv_serve, python):
    class Base(unittest.TestCase):
        def config(self):
            return SandboxVerificationConfig(python=python,
                                             ready_timeout_s=10)

        def raises_configuration(self, provider, reason):
            """Every form raises ConfigurationError(reason): the seed's
            function, sync and async, and verify, sync and async."""
            calls = {
                "run sync": lambda: run_verification_sandbox_sync(
                    provider, self.config(), FILES, {}, 5, None),
                "run async": lambda: asyncio.run(run_verification_sandbox(
                    provider, self.config(), FILES, {}, 5, None)),
                "verify sync": lambda: verify_sync(
                    provider, self.config(), FILES, {}, 5),
                "verify async": lambda: asyncio.run(verify(
                    provider, self.config(), FILES, {}, 5)),
            }
            errors = []
            for name, call in calls.items():
                with self.subTest(call=name):
                    with self.assertRaises(ConfigurationError) as e:
                        call()
                    self.assertNotIsInstance(e.exception,
                                             SandboxVerificationError)
                    self.assertEqual(e.exception.reason, reason,
                                     str(e.exception))
                    errors.append(e.exception)
            return errors[0]

        def masked(self, provider, kind="provider_unavailable"):
            out = verify_sync(provider, self.config(), FILES, {}, 5)
            self.assertEqual((out["mask_sample"], out["instance_config"],
                              out["failure_kind"]),
                             (True, {"mask_sample": True}, kind), out)
            return out

    class Tokens(Base):
        @classmethod
        def setUpClass(cls):
            cls.s = svtest.Server(sv_serve, TMP, "tokens", {"scripted": {}},
                                  token="right-token")

        @classmethod
        def tearDownClass(cls):
            cls.s.stop()

        def test_the_right_token_grades(self):
            token_file = os.path.join(TMP, "right")
            with open(token_file, "w") as f:
                f.write("right-token\n")
            for provider in ({"url": self.s.url, "token": "right-token"},
                             {"sv_serve": {"url": self.s.url,
                                           "token_file": token_file}}):
                self.assertEqual(run_verification_sandbox_sync(
                    provider, self.config(), FILES, {}, 5, None),
                    {"reward": 1.0})

        def test_wrong_or_missing_token_is_raised(self):
            for token in ("wrong-token", None):
                with self.subTest(token=token):
                    e = self.raises_configuration(
                        {"url": self.s.url, "token": token}, "unauthorized")
                    self.assertEqual(e.http_status, 401)
                    self.assertIn("401", str(e))

        def test_provider_create_with_a_wrong_token(self):
            provider = SvServeProvider(self.s.url, token="wrong-token")
            async def create():
                try:
                    await provider.create(_nemo_types.SandboxSpec())
                finally:
                    await provider.aclose()
            with self.assertRaises(SvServeConfigurationError) as e:
                asyncio.run(create())
            self.assertIsInstance(e.exception,
                                  _nemo_types.SandboxCreateError)
            self.assertEqual(e.exception.reason, "unauthorized")

        def test_an_empty_token_file_is_raised(self):
            empty = os.path.join(TMP, "empty")
            open(empty, "w").close()
            e = self.raises_configuration(
                {"sv_serve": {"url": self.s.url, "token_file": empty}},
                "settings")
            self.assertIn("empty", str(e))

    class NotSvServe(Base):
        def serve(self, status, body, ctype="text/html"):
            fake = svtest.FakeServer(lambda m, p, b: (status, ctype, body))
            self.addCleanup(fake.close)
            return {"url": fake.url}

        def test_404_from_something_else_is_raised(self):
            e = self.raises_configuration(
                self.serve(404, b"<html>Not Found</html>"), "unknown_route")
            self.assertIn("not sv-serve", str(e))

        def test_an_answer_sv_serve_never_gives_is_raised(self):
            self.raises_configuration(self.serve(200, b"<html>hi</html>"),
                                      "not_sv_serve")

        def test_transient_faults_are_masked(self):
            out = self.masked(self.serve(503, b"draining\n", "text/plain"))
            self.assertEqual(out["cause"], "error")
            out = self.masked(self.serve(
                429, b'{"error": {"code": "too_many_sandboxes", '
                b'"message": "m"}}', "application/json"))
            self.assertEqual(out["cause"], "overloaded")
            out = self.masked(self.serve(500, b"boom"))
            self.assertEqual(out["state"], "create")

        def test_a_refused_connection_is_masked(self):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            out = self.masked({"url": f"http://127.0.0.1:{port}"})
            self.assertIn("cannot connect", out["failure_reason"])

        def test_a_silent_server_is_masked_as_a_timeout(self):
            with socket.socket() as listener:
                listener.bind(("127.0.0.1", 0))
                listener.listen(8)
                url = f"http://127.0.0.1:{listener.getsockname()[1]}"
                cfg = SandboxVerificationConfig(ready_timeout_s=0.5)
                out = verify_sync({"url": url}, cfg, FILES, {}, 5)
            self.assertEqual((out["mask_sample"], out["failure_kind"],
                              out["cause"]),
                             (True, "provider_unavailable", "timeout"))

    class Tls(Base):
        @classmethod
        def setUpClass(cls):
            cls.certs = svtest.make_certificates(TMP)
            if cls.certs is None:
                raise unittest.SkipTest("no openssl CLI")
            c = cls.certs
            cls.tls = svtest.Server(sv_serve, TMP, "tls", {"scripted": {}},
                                    tls=(c["server.pem"], c["server.key"]))
            cls.plain = svtest.Server(sv_serve, TMP, "plain",
                                      {"scripted": {}})

        @classmethod
        def tearDownClass(cls):
            cls.tls.stop()
            cls.plain.stop()

        def test_the_right_ca_grades(self):
            provider = {"sv_serve": {"url": self.tls.url,
                                     "ca_file": self.certs["ca.pem"]}}
            self.assertEqual(run_verification_sandbox_sync(
                provider, self.config(), FILES, {}, 5, None), {"reward": 1.0})

        def test_another_ca_is_raised(self):
            e = self.raises_configuration(
                {"url": self.tls.url, "ca_file": self.certs["other.pem"]},
                "tls")
            self.assertIn("CERTIFICATE_VERIFY_FAILED", str(e))

        def test_plaintext_to_a_tls_server_is_raised(self):
            url = self.tls.url.replace("https://", "http://")
            self.raises_configuration({"url": url}, "tls")

        def test_tls_to_a_plaintext_server_is_raised(self):
            url = self.plain.url.replace("http://", "https://")
            self.raises_configuration(
                {"url": url, "ca_file": self.certs["ca.pem"]}, "tls")

    return [Tokens, NotSvServe, Tls]
