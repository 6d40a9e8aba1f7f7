#!/usr/bin/env python3
"""The NeMo Gym sandbox provider plugin (nemo_gym_provider.py) against a real
sv-serve on 127.0.0.1, driven the way NeMo Gym's AsyncSandbox drives a
provider (nemo_gym/sandbox/api.py: start = create + upload of spec.files,
exec with cwd defaulting to spec.workdir, upload, download, status, stop =
close + aclose). NeMo Gym cannot be installed here, so the driver below
follows its documented behaviour. Standard library only; every wait bounded.

Called as: e2e_nemo_gym_provider.py SV_SERVE PLUGIN_DIR
"""

import asyncio
import dataclasses
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
from pathlib import Path

TIMEOUT_S = 20


def check(cond, what):
    if not cond:
        raise AssertionError(what)


@dataclasses.dataclass(frozen=True)
class SandboxSpec:
    """NeMo Gym's SandboxSpec fields (providers/base.py)."""
    image: "str | None" = None
    ttl_s: "float | None" = None
    ready_timeout_s: "float | None" = None
    workdir: "str | None" = None
    env: dict = dataclasses.field(default_factory=dict)
    files: dict = dataclasses.field(default_factory=dict)
    metadata: dict = dataclasses.field(default_factory=dict)
    resources: dict = dataclasses.field(default_factory=dict)
    entrypoint: "list | None" = None
    provider_options: dict = dataclasses.field(default_factory=dict)


class AsyncSandbox:
    """NeMo Gym's AsyncSandbox, as api.py drives a provider."""

    def __init__(self, provider, spec):
        self._provider, self._spec = provider, spec
        self._handle, self._stopped, self._closed = None, True, False

    def _require_handle(self):
        if self._handle is None or self._stopped:
            raise RuntimeError("Sandbox has not been started")
        return self._handle

    async def start(self):
        handle = await self._provider.create(self._spec)
        try:
            if self._spec.files:
                with tempfile.TemporaryDirectory() as tmp_dir:
                    for index, (target, contents) in enumerate(self._spec.files.items()):
                        source = Path(tmp_dir) / f"file-{index}"
                        source.write_text(contents, encoding="utf-8")
                        await self._provider.upload_file(handle, source, target)
        except Exception:
            await self._provider.close(handle)
            await self._provider.aclose()
            self._closed = True
            raise
        self._handle, self._stopped = handle, False
        return self

    async def exec(self, command, *, cwd=None, env=None, timeout_s=180, user=None):
        return await self._provider.exec(
            self._require_handle(), command,
            cwd=cwd if cwd is not None else self._spec.workdir,
            env=env, timeout_s=timeout_s, user=user)

    async def upload(self, local_path, remote_path):
        await self._provider.upload_file(self._require_handle(), Path(local_path), remote_path)

    async def download(self, remote_path, local_path):
        await self._provider.download_file(self._require_handle(), remote_path, Path(local_path))

    async def status(self):
        if self._handle is None:
            return "unknown"
        if self._stopped:
            return "stopped"
        return await self._provider.status(self._handle)

    async def stop(self):
        if self._closed:
            return
        try:
            if self._handle is not None and not self._stopped:
                self._stopped = True
                await self._provider.close(self._handle)
        finally:
            await self._provider.aclose()
            self._closed = True

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.stop()


class Server:
    """A real sv-serve on port 0; stopped (bounded) at the end."""

    def __init__(self, binary, tmp, block, token=None, extra=()):
        cfg = os.path.join(tmp, "provider.json")
        with open(cfg, "w") as f:
            json.dump(block, f)
        args = [binary, "--listen", "127.0.0.1:0", "--provider-config", cfg,
                "--log-level", "warn", *extra]
        if token:
            with open(os.path.join(tmp, "token"), "w") as f:
                f.write(token + "\n")
            args += ["--token-file", os.path.join(tmp, "token")]
        self.err = open(os.path.join(tmp, "stderr"), "w")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.err, text=True)
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        line = self.proc.stdout.readline() if ready else ""
        m = re.fullmatch(r"listening on 127\.0\.0\.1:(\d+)\n", line)
        check(m is not None, f"no 'listening on' line: {line!r}")
        self.url = f"{'https' if extra else 'http'}://127.0.0.1:{m.group(1)}"

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.err.close()


def local_block(tmp):
    return {"local": {"isolation": "none", "root": os.path.join(tmp, "root")}}


async def bounded(aw, what, timeout=TIMEOUT_S):
    try:
        return await asyncio.wait_for(aw, timeout)
    except asyncio.TimeoutError:
        raise AssertionError(f"{what}: no answer within {timeout} s")


# -- the cases -----------------------------------------------------------------

async def lifecycle(plugin, server, tmp):
    """start (with spec.files), exec, upload, download, status, stop."""
    provider = plugin.SvServeProvider(url=server.url)
    spec = SandboxSpec(workdir="/workspace", env={"GREETING": "hello"},
                       files={"task/input.txt": "forty-two\n", "/workspace/top.txt": "top"},
                       metadata={"task": "nemo"}, resources={"cpu": 1, "memory_mib": 512},
                       ttl_s=120, ready_timeout_s=10)
    async with AsyncSandbox(provider, spec) as box:
        await bounded(box.start(), "start")
        check(await box.status() == plugin.SandboxStatus.RUNNING, "not running")
        r = await bounded(box.exec("cat task/input.txt top.txt; echo \"$GREETING $EXTRA\"; echo err >&2; exit 4",
                                   env={"EXTRA": "there"}), "exec")
        check(r.error_type is None, f"error_type {r.error_type}: {r.stderr}")
        check(r.return_code == 4, f"return_code {r.return_code}")
        check(r.stdout == "forty-two\ntophello there\n", f"stdout {r.stdout!r}")
        check(r.stderr == "err\n", f"stderr {r.stderr!r}")
        r = await bounded(box.exec("pwd", cwd="/workspace/task"), "exec cwd")
        check(r.return_code == 0 and r.stdout.strip().endswith("/task"), f"cwd: {r}")

        local = Path(tmp) / "solution.py"
        local.write_text("print(6 * 7)\n")
        await bounded(box.upload(local, "code/solution.py"), "upload")
        r = await bounded(box.exec("python3 code/solution.py > out.txt"), "exec python")
        check(r.return_code == 0, f"python: {r}")
        target = Path(tmp) / "down" / "out.txt"
        await bounded(box.download("/workspace/out.txt", target), "download")
        check(target.read_text() == "42\n", f"downloaded {target.read_text()!r}")

        try:
            await box.download("missing.txt", Path(tmp) / "x")
            check(False, "a missing file downloaded")
        except FileNotFoundError:
            pass
        for bad in (lambda: box.exec("id", user="root"),
                    lambda: box.upload(local, "/etc/passwd"),
                    lambda: box.exec("true", cwd="/elsewhere")):
            try:
                await bad()
                check(False, "accepted a call it cannot honour")
            except ValueError:
                pass
        handle = box._handle
    # Stopped: the sandbox is gone on the server, a second stop is a no-op.
    check(await provider.status(handle) == plugin.SandboxStatus.STOPPED, "not stopped")
    await provider.close(handle)
    print("ok: start, exec, upload, download, status, stop")


async def timeout(plugin, server):
    provider = plugin.SvServeProvider(url=server.url)
    async with AsyncSandbox(provider, SandboxSpec()) as box:
        await bounded(box.start(), "start")
        t0 = time.monotonic()
        r = await bounded(box.exec("sleep 30", timeout_s=0.5), "exec")
        check(r.error_type == "timeout", f"error_type {r.error_type}")
        check(time.monotonic() - t0 < 10, "the timeout took too long")
    print("ok: an exec over its timeout is error_type timeout")


async def concurrent(plugin, server):
    provider = plugin.SvServeProvider(url=server.url, connections=4)

    async def one(i):
        async with AsyncSandbox(provider, SandboxSpec(files={"n.txt": str(i)})) as box:
            await box.start()
            r = await box.exec("cat n.txt")
            return r.stdout

    outs = await bounded(asyncio.gather(*(one(i) for i in range(8))), "8 sandboxes")
    check(outs == [str(i) for i in range(8)], f"outputs {outs}")
    print("ok: 8 sandboxes at once over 4 connections")


async def wrong_token(plugin, binary, tmp):
    server = Server(binary, tmp, {"scripted": {}}, token="the-right-one")
    try:
        token_file = os.path.join(tmp, "wrong")
        with open(token_file, "w") as f:
            f.write("not-it\n")
        provider = plugin.SvServeProvider(url=server.url, token_file=token_file)
        try:
            await bounded(AsyncSandbox(provider, SandboxSpec()).start(), "start")
            check(False, "a wrong token created a sandbox")
        except plugin.SandboxCreateError as e:
            check("401" in str(e) and "unauthorized" in str(e), f"error: {e}")
        right = plugin.SvServeProvider(url=server.url, token="the-right-one")
        async with AsyncSandbox(right, SandboxSpec()) as box:
            await bounded(box.start(), "start with the right token")
    finally:
        server.stop()
    print("ok: a wrong token is SandboxCreateError (401)")


async def starting(plugin, binary, tmp):
    """create() returns only once the sandbox runs (3 'starting' first)."""
    server = Server(binary, tmp, {"scripted": {"starting_polls": 3}})
    try:
        provider = plugin.SvServeProvider(url=server.url)
        handle = await bounded(provider.create(SandboxSpec(ready_timeout_s=10)), "create")
        check(await provider.status(handle) == plugin.SandboxStatus.RUNNING, "not running")
        await provider.close(handle)
        check(await provider.status(handle) == plugin.SandboxStatus.STOPPED, "not stopped")
    finally:
        server.stop()
    print("ok: create waits through 'starting' until running")


async def over_tls(plugin, binary, tmp):
    """https with the test CA; another CA is refused."""
    openssl = shutil.which("openssl")
    if openssl is None:
        print("skipped (no openssl CLI): over TLS")
        return

    def run(*args):
        subprocess.run([openssl, *args], check=True, capture_output=True, timeout=60, cwd=tmp)

    for ca in ("ca", "other"):
        run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca + ".key",
            "-out", ca + ".pem", "-days", "1", "-subj", "/CN=" + ca)
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
        "-subj", "/CN=127.0.0.1")
    with open(os.path.join(tmp, "san.cnf"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.pem", "-days", "1", "-extfile", "san.cnf")
    server = Server(binary, tmp, {"scripted": {}},
                    extra=("--tls-cert", os.path.join(tmp, "server.pem"),
                           "--tls-key", os.path.join(tmp, "server.key")))
    try:
        check(server.url.startswith("https://"), server.url)
        good = plugin.SvServeProvider(url=server.url, ca_file=os.path.join(tmp, "ca.pem"))
        async with AsyncSandbox(good, SandboxSpec()) as box:
            await bounded(box.start(), "start over TLS")
            r = await bounded(box.exec("true"), "exec over TLS")
            check(r.error_type is None, f"exec over TLS: {r}")
        bad = plugin.SvServeProvider(url=server.url, ca_file=os.path.join(tmp, "other.pem"))
        try:
            await bounded(AsyncSandbox(bad, SandboxSpec()).start(), "start with another CA")
            check(False, "another CA was accepted")
        except plugin.SandboxCreateError as e:
            check("TLS" in str(e) or "certificate" in str(e), f"error: {e}")
    finally:
        server.stop()
    print("ok: over TLS with the test CA; another CA refused")


async def server_gone(plugin, binary, tmp):
    # Scripted behind it: a kill -9 leaves no real sandbox behind.
    server = Server(binary, tmp, {"scripted": {}})
    provider = plugin.SvServeProvider(url=server.url, timeout_s=5)
    box = AsyncSandbox(provider, SandboxSpec())
    await bounded(box.start(), "start")
    server.stop(signal.SIGKILL)
    r = await bounded(box.exec("echo hi"), "exec on a dead server")
    check(r.error_type == "sandbox", f"error_type {r.error_type}")
    check(r.return_code == plugin.SANDBOX_RUNTIME_RETURN_CODE, f"return_code {r.return_code}")
    check(r.stdout is None and "connect" in r.stderr, f"stderr {r.stderr!r}")
    check(await box.status() == plugin.SandboxStatus.UNKNOWN, "status")
    try:
        await box.download("x", Path(tmp) / "x")
        check(False, "downloaded from a dead server")
    except plugin.SvServeError as e:
        check(e.transport and e.code == "connect", f"error: {e!r}")
    await bounded(box.stop(), "stop never raises")
    t0 = time.monotonic()
    try:
        await bounded(AsyncSandbox(provider, SandboxSpec()).start(), "start on a dead server")
        check(False, "created on a dead server")
    except plugin.SandboxCreateError as e:
        check("connect" in str(e), f"error: {e}")
    check(time.monotonic() - t0 < 5, "create on a dead server took too long")
    print("ok: server gone: exec error_type sandbox, status unknown, stop quiet, create raises")


async def main_async(binary, plugin):
    with tempfile.TemporaryDirectory(prefix="sv-nemo-") as tmp:
        server = Server(binary, tmp, local_block(tmp))
        try:
            await lifecycle(plugin, server, tmp)
            await timeout(plugin, server)
            await concurrent(plugin, server)
        finally:
            server.stop()
        root = os.path.join(tmp, "root")
        left = os.listdir(root) if os.path.isdir(root) else []
        check(left == [], f"left under the sandbox root: {left}")
        for name in ("token-case", "gone-case", "starting-case", "tls-case"):
            os.mkdir(os.path.join(tmp, name))
        await wrong_token(plugin, binary, os.path.join(tmp, "token-case"))
        await server_gone(plugin, binary, os.path.join(tmp, "gone-case"))
        await starting(plugin, binary, os.path.join(tmp, "starting-case"))
        await over_tls(plugin, binary, os.path.join(tmp, "tls-case"))
    check(plugin.register() is False, "register() without NeMo Gym")


def main():
    if len(sys.argv) != 3:
        sys.exit(f"usage: {sys.argv[0]} SV_SERVE PLUGIN_DIR")
    sys.path.insert(0, sys.argv[2])
    import nemo_gym_provider as plugin
    asyncio.run(main_async(sys.argv[1], plugin))


if __name__ == "__main__":
    main()
