"""A NeMo Gym sandbox provider of another kind, for the tests: a sandbox is
a private directory on this host standing for the sandbox's ``/sandbox``,
a command a real ``/bin/sh`` in its own process group, killed at its
timeout. It follows NeMo Gym's provider protocol (nemo_gym/sandbox/
providers/base.py) so the seed's function can be shown to drive any
provider object, not only sv-serve's. Not isolation: tests only."""

import asyncio
import os
import posixpath
import shutil
import signal
import tempfile
from pathlib import Path

from sv_client._nemo_types import SandboxExecResult, SandboxHandle

MOUNT = "/sandbox"


class LocalDirProvider:
    name = "local_dir"

    def __init__(self, root):
        self.root = root
        os.makedirs(root, exist_ok=True)
        self.live = set()
        self.closed = 0
        self.specs = []

    def _host(self, handle, path):
        path = posixpath.normpath(posixpath.join(MOUNT, path or ""))
        if path != MOUNT and not path.startswith(MOUNT + "/"):
            raise ValueError(f"{path!r} lies outside {MOUNT}")
        return os.path.join(handle.raw, path[len(MOUNT):].lstrip("/"))

    async def create(self, spec):
        self.specs.append(spec)
        directory = tempfile.mkdtemp(prefix="sbx-", dir=self.root)
        self.live.add(directory)
        return SandboxHandle(sandbox_id=os.path.basename(directory),
                             provider_name=self.name, raw=directory)

    async def exec(self, handle, command, *, cwd=None, env=None,
                   timeout_s=None, user=None):
        if user is not None:
            raise ValueError("no users here")
        proc = await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", command, cwd=self._host(handle, cwd),
            env={**os.environ, **(env or {})}, start_new_session=True,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
        except asyncio.TimeoutError:
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            return SandboxExecResult(stdout=None, stderr="timed out",
                                     return_code=124, error_type="timeout")
        return SandboxExecResult(stdout=out.decode(errors="replace"),
                                 stderr=err.decode(errors="replace"),
                                 return_code=proc.returncode)

    async def upload_file(self, handle, source_path, target_path):
        target = self._host(handle, target_path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(source_path, target)

    async def download_file(self, handle, source_path, target_path):
        source = self._host(handle, source_path)
        if not os.path.isfile(source):
            raise FileNotFoundError(source_path)
        Path(target_path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target_path)

    async def status(self, handle):
        return "running" if handle.raw in self.live else "stopped"

    async def close(self, handle):
        if handle.raw in self.live:
            self.live.discard(handle.raw)
            self.closed += 1
            shutil.rmtree(handle.raw, ignore_errors=True)

    async def aclose(self):
        pass
