#!/usr/bin/env python3
"""NeMo Gym's sandbox provider protocol (sv_client.SvServeProvider) end to
end against a real sv-serve on 127.0.0.1, driven the way NeMo Gym's
AsyncSandbox drives a provider (nemo_gym/sandbox/api.py: start = create +
upload of spec.files, exec with cwd defaulting to spec.workdir, upload,
download, status, stop = close + aclose). NeMo Gym is not installed here:
the driver below follows its source. Standard library only; waits bounded.

Called as: e2e_nemo_gym_provider.py SV_SERVE protocol|binary
  protocol: the protocol end to end (bytes downloaded, text uploaded).
  binary: bytes both ways over the octet-stream route and {"base64"}
    values, absolute paths (/sandbox; /tmp under bwrap as root).
"""

import asyncio
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import unittest
from pathlib import Path

import svtest

svtest.use_source_tree()

from sv_client import (ConfigurationError, SandboxClient,  # noqa: E402
                       SandboxVerificationError,
                       SvServeConfigurationError, SvServeError,
                       SvServeProvider, SvServeUnsupportedError,
                       SANDBOX_RUNTIME_RETURN_CODE,
                       run_verification_sandbox_sync)
from nemo_gym_driver import AsyncSandbox, fake_sv_serve  # noqa: E402
from sv_client._nemo_types import (SandboxCreateError,  # noqa: E402
                                   SandboxCreateVerificationError,
                                   SandboxResources, SandboxSpec,
                                   SandboxStatus)

SV_SERVE = TMP = None
TIMEOUT_S = 20


def bounded(coro, timeout=TIMEOUT_S):
    async def main():
        return await asyncio.wait_for(coro, timeout)
    return asyncio.run(main())


class Lifecycle(unittest.TestCase):
    """A local provider behind sv-serve: real processes and files."""

    @classmethod
    def setUpClass(cls):
        cls.root = os.path.join(TMP, "root")
        cls.s = svtest.Server(SV_SERVE, TMP, "local", {"local": {
            "isolation": "none", "root": cls.root}})

    @classmethod
    def tearDownClass(cls):
        cls.s.stop()
        left = os.listdir(cls.root) if os.path.isdir(cls.root) else []
        if left:
            raise AssertionError(f"left under the sandbox root: {left}")

    def test_start_exec_upload_download_status_stop(self):
        bounded(self.lifecycle())

    async def lifecycle(self):
        provider = SvServeProvider(url=self.s.url)
        spec = SandboxSpec(
            env={"GREETING": "hello"}, metadata={"task": "nemo"},
            files={"task/input.txt": "forty-two\n", "/sandbox/top.txt": "top"},
            resources=SandboxResources(cpu=1, memory_mib=512), ttl_s=120,
            ready_timeout_s=10)
        local = Path(TMP) / "lifecycle"
        local.mkdir()
        async with AsyncSandbox(provider, spec) as box:
            await box.start()
            self.assertEqual(await box.status(), SandboxStatus.RUNNING)
            r = await box.exec("cat task/input.txt top.txt; echo \" $GREETING"
                               " $EXTRA\"; echo err >&2; exit 4",
                               env={"EXTRA": "there"})
            self.assertEqual((r.stdout, r.stderr, r.return_code,
                              r.error_type),
                             ("forty-two\ntop hello there\n", "err\n", 4, None))
            r = await box.exec("pwd", cwd="/sandbox/task")
            self.assertTrue(r.stdout.strip().endswith("/task"), r)
            r = await box.exec("pwd", cwd="task")
            self.assertTrue(r.stdout.strip().endswith("/task"), r)
            (local / "solution.py").write_text("print(6 * 7)\n")
            await box.upload(local / "solution.py", "code/solution.py")
            await box.upload(local / "solution.py", "/sandbox/abs/s.py")
            r = await box.exec("python3 code/solution.py > out.txt && "
                               "cmp code/solution.py abs/s.py")
            self.assertEqual(r.return_code, 0, r)
            await box.download("/sandbox/out.txt", local / "down" / "out.txt")
            self.assertEqual((local / "down" / "out.txt").read_text(), "42\n")
            await self.binary_download(box, local)
            await self.refusals(box, local, provider)
            handle = box._handle
        self.assertEqual(await provider.status(handle), SandboxStatus.STOPPED)
        await provider.close(handle)  # a second close is quiet
        await provider.aclose()

    async def binary_download(self, box, local):
        r = await box.exec(r"printf '\000\377\376\n' > made.bin")
        self.assertEqual(r.return_code, 0, r)
        await box.download("made.bin", local / "made.bin")
        self.assertEqual((local / "made.bin").read_bytes(), b"\x00\xff\xfe\n")

    async def refusals(self, box, local, provider):
        with self.assertRaises(FileNotFoundError):
            await box.download("missing.txt", local / "x")
        with self.assertRaisesRegex(ValueError, "user 'root'"):
            await box.exec("id", user="root")
        for bad in ("../../escape.txt", "/sandbox/../etc/x"):
            with self.assertRaises(ValueError, msg=bad):
                await box.upload(local / "solution.py", bad)
        with self.assertRaises(ValueError):
            await box.exec("true", cwd="../..")
        for spec, what in ((SandboxSpec(entrypoint=["sleep", "9"]),
                            "entrypoint"), (SandboxSpec(ports=(8080,)),
                                            "ports")):
            with self.assertRaises(SvServeUnsupportedError) as e:
                await provider.create(spec)
            self.assertIsInstance(e.exception, SandboxCreateError)
            self.assertIsInstance(e.exception, ValueError)
            self.assertIn(what, str(e.exception))
        with self.assertRaises(SandboxCreateError) as e:
            await provider.create(SandboxSpec(resources={"memory_mib": 1 << 40}))
        self.assertIn("memory_mib", str(e.exception))

    def test_timeout(self):
        async def main():
            provider = SvServeProvider(url=self.s.url)
            async with AsyncSandbox(provider, SandboxSpec()) as box:
                await box.start()
                r = await box.exec("sleep 30", timeout_s=0.5)
                self.assertEqual(r.error_type, "timeout")
        started = time.monotonic()
        bounded(main())
        self.assertLess(time.monotonic() - started, 15)

    def test_eight_sandboxes_over_four_connections(self):
        provider = SvServeProvider(url=self.s.url, connections=4)

        async def one(i):
            spec = SandboxSpec(files={"n.txt": str(i)})
            async with AsyncSandbox(provider, spec) as box:
                await box.start()
                return (await box.exec("cat n.txt")).stdout
        async def all_eight():
            return await asyncio.gather(*(one(i) for i in range(8)))
        outs = bounded(all_eight())
        self.assertEqual(outs, [str(i) for i in range(8)])


class Wire(unittest.TestCase):
    """What the provider sends: every field of a spec and an exec."""

    def test_create_and_exec_carry_every_field(self):
        fake = fake_sv_serve(("starting", "running"))
        self.addCleanup(fake.close)
        provider = SvServeProvider(fake.url, token="t0k")
        spec = SandboxSpec(
            image="python:3.12-slim", ttl_s=120, ready_timeout_s=10,
            workdir="/workspace", env={"A": "1"}, metadata={"m": "v"},
            resources={"cpu": 2, "memory_mib": 256, "disk_gib": 1},
            provider_options={"opt": True}, files={"ignored.txt": "x"})

        async def main():
            handle = await provider.create(spec)
            res = await provider.exec(handle, "echo hi", cwd="/workspace/t",
                                      env={"B": "2"}, timeout_s=7)
            await provider.close(handle)
            await provider.aclose()
            return res
        res = bounded(main())
        self.assertEqual((res.stdout, res.return_code, res.error_type),
                         ("o", 0, None))
        create = fake.requests[0]
        self.assertEqual((create[0], create[1]), ("POST", "/v1/sandboxes"))
        self.assertEqual(json.loads(create[3]), {
            "image": "python:3.12-slim", "ttl_s": 120, "ready_timeout_s": 10,
            "workdir": "/workspace", "env": {"A": "1"},
            "metadata": {"m": "v"}, "provider_options": {"opt": True},
            "resources": {"cpu": 2, "memory_mib": 256, "disk_gib": 1}})
        self.assertRegex(create[2]["Idempotency-Key"], r"^py-[0-9a-f]{32}$")
        self.assertEqual(create[2]["Authorization"], "Bearer t0k")
        polls = [r for r in fake.requests if r[0] == "GET"]
        self.assertEqual(len(polls), 2)  # starting, then running
        exe = [r for r in fake.requests if r[1].endswith("/exec")][0]
        self.assertEqual(json.loads(exe[3]), {
            "argv": ["/bin/sh", "-c", "echo hi"], "cwd": "t",
            "env": {"B": "2"}, "timeout_s": 7.0})
        self.assertEqual(fake.requests[-1][:2],
                         ("DELETE", "/v1/sandboxes/sbx-1"))

    def test_bytes_go_as_contracts_3_says(self):
        fake = fake_sv_serve()
        self.addCleanup(fake.close)
        provider = SvServeProvider(fake.url)
        local = Path(TMP) / "wire"
        local.mkdir()
        (local / "b.bin").write_bytes(b"\x00\xff")
        (local / "t.txt").write_text("caf\u00e9")

        async def main():
            handle = await provider.create(SandboxSpec())
            await provider.upload_file(handle, local / "b.bin", "/sandbox/d/b.bin")
            await provider.upload_file(handle, local / "b.bin", "/tests/b.bin")
            await provider.upload_file(handle, local / "t.txt", "/sandbox/d/t.txt")
            await provider.client.upload_files(handle.sandbox_id, "/x",
                                               {"b": b"\x00\xff", "t": "x"})
            await provider.aclose()
        bounded(main())
        puts = [r for r in fake.requests if r[0] == "PUT"]
        self.assertEqual([(r[1], r[2]["Content-Type"], r[3]) for r in puts[:2]],
                         [("/v1/sandboxes/sbx-1/files?path=d%2Fb.bin",
                           "application/octet-stream", b"\x00\xff"),
                          ("/v1/sandboxes/sbx-1/files?path=%2Ftests%2Fb.bin",
                           "application/octet-stream", b"\x00\xff")])
        self.assertEqual((puts[2][1], json.loads(puts[2][3])),
                         ("/v1/sandboxes/sbx-1/files",
                          {"dir": "d", "files": {"t.txt": "caf\u00e9"}}))
        self.assertEqual(json.loads(puts[3][3]), {
            "dir": "/x", "files": {"b": {"base64": "AP8="}, "t": "x"}})

    def test_a_sandbox_that_never_runs(self):
        fake = fake_sv_serve(("error",))
        self.addCleanup(fake.close)
        provider = SvServeProvider(fake.url)

        async def main():
            try:
                await provider.create(SandboxSpec(ready_timeout_s=5))
            finally:
                await provider.aclose()
        with self.assertRaises(SandboxCreateVerificationError) as e:
            bounded(main())
        self.assertIn("error", str(e.exception))
        self.assertEqual(fake.requests[-1][:2],
                         ("DELETE", "/v1/sandboxes/sbx-1"))


class Failures(unittest.TestCase):
    def test_wrong_token_is_a_configuration_error(self):
        s = svtest.Server(SV_SERVE, TMP, "token", {"scripted": {}},
                          token="the-right-one")
        self.addCleanup(s.stop)
        wrong = os.path.join(TMP, "wrong")
        with open(wrong, "w") as f:
            f.write("not-it\n")

        async def main():
            provider = SvServeProvider(url=s.url, token_file=wrong)
            with self.assertRaises(SvServeConfigurationError) as e:
                await AsyncSandbox(provider, SandboxSpec()).start()
            self.assertIsInstance(e.exception, SandboxCreateError)
            self.assertEqual((e.exception.reason, e.exception.http_status),
                             ("unauthorized", 401))
            right = SvServeProvider(url=s.url, token="the-right-one")
            async with AsyncSandbox(right, SandboxSpec()) as box:
                await box.start()
        bounded(main())

    def test_create_waits_through_starting(self):
        s = svtest.Server(SV_SERVE, TMP, "starting", {"scripted": {
            "starting_polls": 3}})
        self.addCleanup(s.stop)

        async def main():
            provider = SvServeProvider(url=s.url)
            handle = await provider.create(SandboxSpec(ready_timeout_s=10))
            self.assertEqual(await provider.status(handle),
                             SandboxStatus.RUNNING)
            await provider.close(handle)
            self.assertEqual(await provider.status(handle),
                             SandboxStatus.STOPPED)
            await provider.aclose()
        bounded(main())

    def test_over_tls(self):
        certs = svtest.make_certificates(TMP)
        if certs is None:
            self.skipTest("no openssl CLI")
        s = svtest.Server(SV_SERVE, TMP, "tls", {"scripted": {}},
                          tls=(certs["server.pem"], certs["server.key"]))
        self.addCleanup(s.stop)

        async def main():
            good = SvServeProvider(url=s.url, ca_file=certs["ca.pem"])
            async with AsyncSandbox(good, SandboxSpec()) as box:
                await box.start()
                self.assertIsNone((await box.exec("true")).error_type)
            bad = SvServeProvider(url=s.url, ca_file=certs["other.pem"])
            with self.assertRaises(SvServeConfigurationError) as e:
                await bad.create(SandboxSpec())
            self.assertEqual(e.exception.reason, "tls")
        bounded(main())

    def test_server_gone(self):
        s = svtest.Server(SV_SERVE, TMP, "gone", {"scripted": {}})

        async def main():
            provider = SvServeProvider(url=s.url, timeout_s=5)
            box = AsyncSandbox(provider, SandboxSpec())
            await box.start()
            s.stop(signal.SIGKILL)
            r = await box.exec("echo hi")
            self.assertEqual((r.error_type, r.return_code, r.stdout),
                             ("sandbox", SANDBOX_RUNTIME_RETURN_CODE, None))
            self.assertIn("connect", r.stderr)
            self.assertEqual(await box.status(), SandboxStatus.UNKNOWN)
            with self.assertRaises(SvServeError) as e:
                await box.download("x", Path(TMP) / "x")
            self.assertTrue(e.exception.transport)
            await box.stop()  # never raises
            with self.assertRaises(SandboxCreateError) as e:
                await provider.create(SandboxSpec(ready_timeout_s=5))
            self.assertNotIsInstance(e.exception, ConfigurationError)
            self.assertIn("connect", str(e.exception))
        bounded(main())



# NeMo Gym's SandboxProvider protocol (nemo_gym/sandbox/providers/base.py),
# as its documentation states it: each method, whether it is a coroutine,
# its parameters in order and how each is passed (P positional or keyword,
# K keyword only).
PROTOCOL = {
    "create": ["spec:P"],
    "exec": ["handle:P", "command:P", "cwd:K", "env:K", "timeout_s:K",
             "user:K"],
    "upload_file": ["handle:P", "source_path:P", "target_path:P"],
    "download_file": ["handle:P", "source_path:P", "target_path:P"],
    "status": ["handle:P"],
    "close": ["handle:P"],
    "aclose": [],
}


class Protocol(unittest.TestCase):
    """The provider has every member of the protocol, each a coroutine
    taking what NeMo Gym passes, the way it passes it; the entry point's
    class is constructible from a YAML block's keys alone."""

    def test_every_method_of_the_protocol(self):
        import inspect
        self.assertEqual(SvServeProvider.name, "sv_serve")
        kinds = {inspect.Parameter.POSITIONAL_OR_KEYWORD: "P",
                 inspect.Parameter.KEYWORD_ONLY: "K"}
        for method, params in PROTOCOL.items():
            fn = getattr(SvServeProvider, method, None)
            self.assertTrue(inspect.iscoroutinefunction(fn), method)
            got = [p for p in inspect.signature(fn).parameters.values()
                   if p.name != "self"]
            self.assertEqual(len(got), len(params), (method, got))
            for p, want in zip(got, params):
                name, kind = want.split(":")
                self.assertEqual(kinds.get(p.kind), kind, (method, p))
                self.assertEqual(p.name, name, (method, p))
                if kind == "K":
                    self.assertIsNone(p.default, (method, p))

    def test_made_from_a_yaml_block(self):
        # NeMo Gym's registry: provider_class(**settings).
        p = SvServeProvider(**{"url": "http://127.0.0.1:9",
                               "token": "t", "timeout_s": 5})
        self.assertEqual(p.client.url, "http://127.0.0.1:9")
        with self.assertRaises(TypeError):
            SvServeProvider(**{"url": "http://127.0.0.1:9", "colour": "red"})


class Binary(unittest.TestCase):
    """Bytes both ways: the octet-stream upload route, the
    {"base64"} values of a JSON upload, a seed submission with a binary
    file; absolute paths in the sandbox's /tmp (bwrap as root)."""

    @classmethod
    def setUpClass(cls):
        cls.root = os.path.join(TMP, "root")
        cls.s = svtest.Server(SV_SERVE, TMP, "binary", {"local": {
            "isolation": "none", "root": cls.root}})

    @classmethod
    def tearDownClass(cls):
        cls.s.stop()

    def test_provider_round_trip_of_bytes(self):
        data = bytes(range(256)) * 3
        local = Path(TMP) / "bytes"
        local.mkdir()
        (local / "up.bin").write_bytes(data)

        async def main():
            provider = SvServeProvider(url=self.s.url)
            async with AsyncSandbox(provider, SandboxSpec()) as box:
                await box.start()
                await box.upload(local / "up.bin", "/sandbox/bin/up.bin")
                await box.upload(local / "up.bin", "rel/up.bin")
                r = await box.exec("wc -c < bin/up.bin; cmp bin/up.bin "
                                   "rel/up.bin && echo same")
                self.assertEqual(r.stdout.split(), [str(len(data)), "same"])
                await box.download("/sandbox/bin/up.bin", local / "back.bin")
            self.assertEqual((local / "back.bin").read_bytes(), data)
        bounded(main())

    def test_json_upload_of_bytes(self):
        async def main():
            client = SandboxClient(self.s.url)
            sid = (await client.create({}, 10))["sandbox_id"]
            try:
                await client.upload_files(sid, "d", {"a.bin": b"\xff\x00\n",
                                                     "t.txt": "text"})
                self.assertEqual(await client.download(sid, "d/a.bin"),
                                 b"\xff\x00\n")
                self.assertEqual(await client.download(sid, "d/t.txt"),
                                 b"text")
            finally:
                await client.stop(sid)
                client.close_idle()
        bounded(main())

    def test_a_submission_with_a_binary_file(self):
        runner = ("import json, sys\n"
                  "data = open('fixture.bin', 'rb').read()\n"
                  "json.dump({'reward': 1.0, 'fixture': list(data)},"
                  " open(sys.argv[2], 'w'))\n")
        out = run_verification_sandbox_sync(
            {"sv_serve": {"url": self.s.url}},
            {"python": sys.executable, "ready_timeout_s": 10},
            {"sandbox_runner.py": runner, "fixture.bin": b"\x00\xff\xfe"},
            {}, 10, json.loads)
        self.assertEqual(out, {"reward": 1.0, "fixture": [0, 255, 254]})


    def test_absolute_tmp_paths_both_ways(self):
        if os.geteuid() != 0 or not shutil.which("bwrap"):
            # Without bwrap as root a sandbox has no /tmp of its own: the
            # provider refuses the path by name.
            expect = "is not writable in the sandbox"
        else:
            expect = None
        data = b"\x00\xff" + bytes(range(256)) + b"\xfe\x00"
        local = Path(TMP) / "tmp-bytes"
        local.mkdir()
        (local / "bin.dat").write_bytes(data)
        s = svtest.Server(SV_SERVE, TMP, "tmp-paths", {"local": {
            "root": os.path.join(TMP, "root-isolated")}})

        async def main():
            provider = SvServeProvider(url=s.url)
            async with AsyncSandbox(provider, SandboxSpec()) as box:
                await box.start()
                if expect:
                    with self.assertRaisesRegex(ValueError, expect):
                        await box.upload(local / "bin.dat", "/tmp/x/bin.dat")
                    return
                await box.upload(local / "bin.dat", "/tmp/x/bin.dat")
                r = await box.exec("wc -c < /tmp/x/bin.dat && "
                                   "cp /tmp/x/bin.dat /tmp/x/copy.dat && "
                                   "ln -s /etc /tmp/etc", cwd="/tmp/x")
                self.assertEqual(r.stdout.split(), [str(len(data))], r)
                await box.download("/tmp/x/copy.dat", local / "copy.dat")
                self.assertEqual((local / "copy.dat").read_bytes(), data)
                for bad, why in (("/tmp/etc/passwd", "/tmp/etc is a symlink"),
                                 ("/tmp/../etc/passwd", "escapes the sandbox"),
                                 ("/etc/passwd", "not writable")):
                    with self.assertRaisesRegex(ValueError, why, msg=bad):
                        await box.download(bad, local / "x")
                with self.assertRaisesRegex(ValueError, "/tmp/etc is a symlink"):
                    await box.upload(local / "bin.dat", "/tmp/etc/x.dat")
            await provider.aclose()
        try:
            bounded(main())
            if not expect:
                self.seed_function_in_tmp(s)
        finally:
            s.stop()

    def seed_function_in_tmp(self, s):
        """The seed's function with an absolute work_dir in /tmp, a binary
        fixture; a work_dir on the read-only root is invalid_request."""
        runner = ("import json, os, sys\n"
                  "data = open('fixture.bin', 'rb').read()\n"
                  "json.dump({'reward': 1.0, 'hex': data.hex(),"
                  " 'cwd': os.getcwd()}, open(sys.argv[2], 'w'))\n")
        files = {"sandbox_runner.py": runner, "fixture.bin": b"\x00\xff\xfe"}
        block = {"sv_serve": {"url": s.url}}
        out = run_verification_sandbox_sync(
            block, {"ready_timeout_s": 10}, files, {}, 10, json.loads,
            work_dir="/tmp/work")
        self.assertEqual(out["hex"], "00fffe")
        self.assertTrue(out["cwd"].startswith("/tmp/work/call-"), out)
        with self.assertRaises(SandboxVerificationError) as e:
            run_verification_sandbox_sync(
                block, {"ready_timeout_s": 10}, files, {}, 10, json.loads,
                work_dir="/usr/x")
        self.assertEqual((e.exception.failure_kind, e.exception.state),
                         ("invalid_request", "upload"), e.exception)
        self.assertIn("is not writable in the sandbox", str(e.exception))


def octet_stream_missing():
    """Why this sv-serve cannot take bytes (its answer to the octet-stream
    upload route), or "" when it can."""
    s = svtest.Server(SV_SERVE, TMP, "probe", {"scripted": {}})

    async def probe():
        client = SandboxClient(s.url)
        sid = (await client.create({}, 10))["sandbox_id"]
        try:
            await client.upload_bytes(sid, "probe.bin", b"\x00\xff")
            return ""
        except SvServeError as e:
            if e.status in (400, 404, 405):
                return str(e)
            raise
        except ConfigurationError as e:
            if e.http_status in (404, 405):
                return str(e)
            raise
        finally:
            await client.stop(sid)
            client.close_idle()
    try:
        return bounded(probe())
    finally:
        s.stop()


def main():
    global SV_SERVE, TMP
    if len(sys.argv) != 3 or sys.argv[2] not in ("protocol", "binary"):
        sys.exit(f"usage: {sys.argv[0]} SV_SERVE protocol|binary")
    SV_SERVE, mode = sys.argv[1:]
    with tempfile.TemporaryDirectory(prefix="sv-nemo-") as tmp:
        TMP = tmp
        if mode == "binary":
            # The route exists since issue 21 item 4: a refusal is a failure.
            why = octet_stream_missing()
            if why:
                sys.exit(f"FAILED: sv-serve answers the octet-stream upload "
                         f"route with: {why}")
            sys.exit(svtest.run_suites([Binary]))
        sys.exit(svtest.run_suites([Protocol, Lifecycle, Wire, Failures]))


if __name__ == "__main__":
    main()
