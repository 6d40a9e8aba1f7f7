#!/usr/bin/env python3
"""The seed's function (clients/python, sv_client) against a real sv-serve
child process on 127.0.0.1 (standard library unittest).

Called as: e2e_sv_client.py SV_SERVE PYTHON MODE
  scripted: the provider argument in each form, parse_result getting
    result.json's exact text, sandbox faults as failure kinds, invalid
    submissions, the sync form, verify()'s responses, masks on a sandbox
    that is down, many calls at once.
  local: real runners: pass, wrong answer, crash (log tail), timeout, a
    result that is not JSON parsed by the caller, no result.json, a parser
    that raises, work_dir absolute and relative, a NeMo Gym provider object
    of another kind. (Binary files: e2e_nemo_gym_provider.py binary.)
  config: configuration errors raised, never masked (issue 19 item 24):
    wrong or missing token, a URL that is not sv-serve, TLS mismatches;
    beside them the transient faults that are masked.
Every wait is bounded.
"""

import asyncio
import json
import os
import sys
import tempfile
import time
import unittest

import svtest

svtest.use_source_tree()

from sv_client import (ConfigurationError, SandboxClient,  # noqa: E402
                       SandboxVerificationConfig, SandboxVerificationError,
                       SvServeProvider, run_verification_sandbox,
                       run_verification_sandbox_sync, verify, verify_sync)
from local_provider import LocalDirProvider  # noqa: E402

SV_SERVE = PYTHON = None
TMP = None
FILES = {"sandbox_runner.py": ""}  # the scripted provider runs nothing
SCRIPTED_RESULT = '{"reward": 1.0}'  # its result.json, byte for byte


def config(**kw):
    kw.setdefault("ready_timeout_s", 10)
    kw.setdefault("python", PYTHON)
    return SandboxVerificationConfig(**kw)


def run(provider, files=None, request=None, exec_timeout_s=5,
        parse_result=None, **kw):
    return run_verification_sandbox_sync(
        provider, kw.pop("cfg", None) or config(), files or FILES,
        request if request is not None else {}, exec_timeout_s, parse_result,
        **kw)


class Failing:
    """assertFails: the call raises SandboxVerificationError; returns it."""

    def assertFails(self, call, kind, state=None, cause=None):
        with self.assertRaises(SandboxVerificationError) as e:
            call()
        x = e.exception
        self.assertEqual(x.failure_kind, kind, repr(x))
        if state is not None:
            self.assertEqual(x.state, state, repr(x))
        if cause is not None:
            self.assertEqual(x.cause, cause, repr(x))
        return x


class Scripted(unittest.TestCase, Failing):
    @classmethod
    def setUpClass(cls):
        cls.ok = svtest.Server(SV_SERVE, TMP, "ok", {"scripted": {}})
        cls.faulty = svtest.Server(SV_SERVE, TMP, "faulty", {"scripted": {
            "steps": {"exec": ["garbage"] * 1000}}})
        cls.junk = svtest.Server(SV_SERVE, TMP, "junk", {"scripted": {
            "steps": {"download": ["garbage"] * 1000}}})
        cls.slow = svtest.Server(SV_SERVE, TMP, "slow", {"scripted": {
            "starting_polls": 3}})

    @classmethod
    def tearDownClass(cls):
        for s in (cls.ok, cls.faulty, cls.junk, cls.slow):
            s.stop()

    def test_every_provider_form(self):
        url = self.ok.url
        forms = {
            "settings": {"url": url, "token": None},
            "block": {"sv_serve": {"url": url}},
            "block with default_metadata": {
                "sv_serve": {"url": url}, "default_metadata": {"a": "b"}},
            "binding": {"sandbox": {"sv_serve": {"url": url},
                                    "default_metadata": {"a": "b"}}},
            "provider object": SvServeProvider(url),
            "client object": SandboxClient(url),
        }
        for name, provider in forms.items():
            with self.subTest(form=name):
                self.assertEqual(run(provider), {"reward": 1.0})
        forms["provider object"].client.close_idle()
        forms["client object"].close_idle()

    def test_parse_result_gets_the_exact_text(self):
        seen = []
        out = run({"url": self.ok.url},
                  parse_result=lambda text: seen.append(text) or "parsed")
        self.assertEqual((out, seen), ("parsed", [SCRIPTED_RESULT]))
        seen.clear()
        out = run({"url": self.junk.url}, parse_result=seen.append)
        self.assertEqual(seen, ["\x01\x02 this is not JSON {"])
        x = self.assertFails(lambda: run({"url": self.junk.url}),
                             "verifier_error", "parse", "invalid_result")
        self.assertIn("JSONDecodeError", x.message)

    def test_sandbox_fault_is_provider_unavailable(self):
        x = self.assertFails(lambda: run({"url": self.faulty.url}),
                             "provider_unavailable", "exec", "error")
        self.assertIn("lost the runner", x.message)

    def test_create_waits_until_running(self):
        self.assertEqual(run({"url": self.slow.url}), {"reward": 1.0})

    def test_invalid_submissions(self):
        p = {"url": self.ok.url}
        cases = [({"harness.py": ""}, {}, "/sandbox", "sandbox_runner.py"),
                 ({**FILES, "../x.py": ""}, {}, "/sandbox", "../x.py"),
                 ({**FILES, "result.json": ""}, {}, "/sandbox", "reserved"),
                 (FILES, {"x": object()}, "/sandbox", "not JSON"),
                 (FILES, {}, "/sandbox/../etc", "work_dir")]
        for files, request, work_dir, what in cases:
            with self.subTest(what=what):
                x = self.assertFails(
                    lambda: run(p, files, request, work_dir=work_dir),
                    "invalid_request", "validate", "invalid_request")
                self.assertIn(what, x.message)

    def test_bad_arguments_are_configuration_errors(self):
        for provider in ({}, {"url": "ftp://x"}, "http://127.0.0.1:1",
                         {"no_such_provider": {}}, {"sv_serve": {"uri": "x"}}):
            with self.subTest(provider=provider):
                with self.assertRaises(ConfigurationError):
                    run(provider)
        with self.assertRaises(ConfigurationError) as e:
            run({"url": self.ok.url}, cfg={"pyton": "python3"})
        self.assertIn("pyton", str(e.exception))

    def test_sync_form_inside_a_running_loop(self):
        async def inside():
            return run({"url": self.ok.url})
        self.assertEqual(asyncio.run(inside()), {"reward": 1.0})

    def test_verify_responses(self):
        p = {"url": self.ok.url}
        self.assertEqual(verify_sync(p, config(), FILES, {}, 5),
                         {"reward": 1.0, "mask_sample": False,
                          "instance_config": {"mask_sample": False}})
        out = verify_sync({"url": self.faulty.url}, config(), FILES, {}, 5)
        self.assertEqual(out, {
            "reward": 0.0, "mask_sample": True,
            "instance_config": {"mask_sample": True},
            "failure_kind": "provider_unavailable",
            "failure_reason": out["failure_reason"], "state": "exec",
            "cause": "error"})
        out = verify_sync(p, config(), FILES, {}, 5,
                          parse_result=lambda text: {"reward": "high"})
        self.assertEqual((out["mask_sample"], out["failure_kind"],
                          out["instance_config"]),
                         (True, "verifier_error", {"mask_sample": True}))
        out = asyncio.run(verify(p, config(), FILES, {}, 5,
                                 parse_result=lambda t: 0.5))
        self.assertEqual(out["reward"], 0.5)

    def test_masks_when_the_sandbox_service_is_down(self):
        s = svtest.Server(SV_SERVE, TMP, "gone", {"scripted": {}})
        url = s.url
        self.assertEqual(s.stop(), 0)
        for provider in ({"url": url}, {"sv_serve": {"url": url}},
                         SvServeProvider(url)):
            out = verify_sync(provider, config(), FILES, {}, 5)
            self.assertEqual(
                (out["reward"], out["mask_sample"], out["instance_config"],
                 out["failure_kind"], out["state"]),
                (0.0, True, {"mask_sample": True}, "provider_unavailable",
                 "create"))
            self.assertIn("cannot connect", out["failure_reason"])

    def test_many_at_once(self):
        provider = SvServeProvider(self.ok.url, connections=16)

        async def many():
            try:
                return await asyncio.gather(*[run_verification_sandbox(
                    provider, config(), FILES, {"i": i}, 5, json.loads)
                    for i in range(200)])
            finally:
                await provider.aclose()
        started = time.monotonic()
        self.assertEqual(asyncio.run(many()), [{"reward": 1.0}] * 200)
        self.assertLess(time.monotonic() - started, 60)


RUNNER = r'''
import json, sys, time
req = json.load(open(sys.argv[1]))
if req.get("crash"):
    print("runner crashed on purpose", file=sys.stderr)
    sys.exit(3)
if req.get("sleep"):
    time.sleep(req["sleep"])
if req.get("skip"):
    sys.exit(0)
if req.get("bytes"):
    open(sys.argv[2], "wb").write(b"\xff\xfe not utf-8")
    sys.exit(0)
if req.get("plain"):
    open(sys.argv[2], "w").write("reward=%s\n" % (req["plain"] == 42))
    sys.exit(0)
reward = 1.0 if req.get("answer") == 42 else 0.0
json.dump({"reward": reward, "echo": req}, open(sys.argv[2], "w"))
'''


class Local(unittest.TestCase, Failing):
    @classmethod
    def setUpClass(cls):
        cls.root = os.path.join(TMP, "sandboxes")
        cls.s = svtest.Server(SV_SERVE, TMP, "local", {"local": {
            "root": cls.root, "python": PYTHON, "isolation": "none"}})
        cls.provider = {"sv_serve": {"url": cls.s.url}}
        cls.files = {"sandbox_runner.py": RUNNER}

    @classmethod
    def tearDownClass(cls):
        cls.s.stop()
        left = os.listdir(cls.root) if os.path.isdir(cls.root) else []
        if left:
            raise AssertionError(f"sandboxes left behind: {left}")

    def one(self, request, exec_timeout_s=10, parse_result=json.loads, **kw):
        return run(kw.pop("provider", self.provider), kw.pop("files",
                   self.files), request, exec_timeout_s, parse_result, **kw)

    def test_pass_and_wrong_answer(self):
        self.assertEqual(self.one({"answer": 42}),
                         {"reward": 1.0, "echo": {"answer": 42}})
        self.assertEqual(self.one({"answer": 7})["reward"], 0.0)
        self.assertEqual(verify_sync(self.provider, config(), self.files,
                                     {"answer": 7}, 10)["mask_sample"], False)

    def test_result_that_is_not_json(self):
        seen = []

        def parse(text):
            seen.append(text)
            return 1.0 if text == "reward=True\n" else 0.0
        self.assertEqual(self.one({"plain": 42}, parse_result=parse), 1.0)
        self.assertEqual(seen, ["reward=True\n"])
        out = verify_sync(self.provider, config(), self.files, {"plain": 1},
                          10, parse)
        self.assertEqual((out["reward"], out["mask_sample"]), (0.0, False))

    def test_runner_crash_is_verifier_error_with_the_log_tail(self):
        x = self.assertFails(lambda: self.one({"crash": True}),
                             "verifier_error", "exec", "error")
        self.assertIn("status 3", x.message)
        self.assertIn("runner crashed on purpose", x.log_tail)

    def test_timeout_is_verifier_error(self):
        started = time.monotonic()
        self.assertFails(lambda: self.one({"sleep": 30}, exec_timeout_s=1),
                         "verifier_error", "exec", "timeout")
        self.assertLess(time.monotonic() - started, 15)

    def test_no_result_and_bad_results(self):
        x = self.assertFails(lambda: self.one({"skip": True}),
                             "verifier_error", "download", "invalid_result")
        self.assertIn("no result.json", x.message)
        self.assertFails(lambda: self.one({"bytes": True}), "verifier_error",
                         "download", "invalid_result")
        x = self.assertFails(
            lambda: self.one({"answer": 42}, parse_result=lambda t: 1 / 0),
            "verifier_error", "parse", "invalid_result")
        self.assertIn("ZeroDivisionError", x.message)

    def test_work_dir_and_metadata(self):
        for work_dir in ("/sandbox", "/sandbox/calls", "mine/calls"):
            with self.subTest(work_dir=work_dir):
                self.assertEqual(self.one({"answer": 42}, work_dir=work_dir,
                                          metadata={"task": "t"})["reward"],
                                 1.0)

    def test_a_nemo_gym_provider_object_of_another_kind(self):
        provider = LocalDirProvider(os.path.join(TMP, "dir-provider"))
        self.assertEqual(self.one({"answer": 42}, provider=provider),
                         {"reward": 1.0, "echo": {"answer": 42}})
        x = self.assertFails(lambda: self.one({"crash": True},
                                              provider=provider),
                             "verifier_error", "exec", "error")
        self.assertIn("runner crashed on purpose", x.log_tail)
        self.assertFails(lambda: self.one({"sleep": 30}, exec_timeout_s=1,
                                          provider=provider),
                         "verifier_error", "exec", "timeout")
        self.assertEqual(provider.live, set())
        self.assertEqual(provider.closed, 3)


def main():
    global SV_SERVE, PYTHON, TMP
    if len(sys.argv) != 4:
        sys.exit(f"usage: {sys.argv[0]} SV_SERVE PYTHON scripted|local|config")
    SV_SERVE, PYTHON, mode = sys.argv[1:]
    import e2e_sv_client_config as config_cases
    cases = {"scripted": [Scripted], "local": [Local],
             "config": config_cases.cases(SV_SERVE, PYTHON)}[mode]
    with tempfile.TemporaryDirectory(prefix="sv-client-test-") as tmp:
        TMP = tmp
        config_cases.TMP = tmp
        sys.exit(svtest.run_suites(cases))


if __name__ == "__main__":
    main()
