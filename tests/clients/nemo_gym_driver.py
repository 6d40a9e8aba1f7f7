"""NeMo Gym's AsyncSandbox as its nemo_gym/sandbox/api.py drives a provider
(written from its source: NeMo Gym is not installed here), and a recording
stand-in that answers the sandbox API as sv-serve does."""

import json
import tempfile
from pathlib import Path

import svtest
from sv_client._nemo_types import SandboxStatus


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
            with tempfile.TemporaryDirectory() as tmp:
                for i, (target, text) in enumerate(self._spec.files.items()):
                    source = Path(tmp) / f"file-{i}"
                    source.write_text(text, encoding="utf-8")
                    await self._provider.upload_file(handle, source, target)
        except Exception:
            await self._provider.close(handle)
            await self._provider.aclose()
            self._closed = True
            raise
        self._handle, self._stopped = handle, False
        return self

    async def exec(self, command, *, cwd=None, env=None, timeout_s=180,
                   user=None):
        return await self._provider.exec(
            self._require_handle(), command,
            cwd=cwd if cwd is not None else self._spec.workdir,
            env=env, timeout_s=timeout_s, user=user)

    async def upload(self, local_path, remote_path):
        await self._provider.upload_file(self._require_handle(),
                                         Path(local_path), remote_path)

    async def download(self, remote_path, local_path):
        await self._provider.download_file(self._require_handle(),
                                           remote_path, Path(local_path))

    async def status(self):
        if self._handle is None:
            return SandboxStatus.UNKNOWN
        if self._stopped:
            return SandboxStatus.STOPPED
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


def fake_sv_serve(status_sequence=("running",)):
    """A recording stand-in that answers as sv-serve does."""
    states = list(status_sequence)

    def answer(method, path, body):
        if method == "POST" and path == "/v1/sandboxes":
            return 201, "application/json", json.dumps(
                {"sandbox_id": "sbx-1", "provider_name": "x", "state": "",
                 "ttl_s": 120}).encode()
        if method == "GET" and path == "/v1/sandboxes/sbx-1":
            state = states.pop(0) if len(states) > 1 else states[0]
            return 200, "application/json", json.dumps(
                {"status": state}).encode()
        if path.endswith("/exec"):
            return 200, "application/json", json.dumps(
                {"stdout": "o", "stderr": "", "return_code": 0,
                 "error_type": "none", "message": "", "log_tail": ""}).encode()
        return 204, "application/json", b""
    return svtest.FakeServer(answer)
