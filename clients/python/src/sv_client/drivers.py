"""The steps of a sandbox's life, on whatever runs it.

``SvServeDriver`` drives sv-serve's sandbox API (create until running,
upload, exec with a runner log, download, stop). ``ProviderDriver`` drives
any NeMo Gym ``SandboxProvider`` object through its protocol, so the seed's
function runs on NeMo Gym's own providers too. Both offer the same
coroutines: ``create(spec, ready_timeout_s) -> handle``, ``upload(handle,
directory, files)``, ``run(handle, argv, ...) -> exec result dict``,
``read(handle, path) -> bytes``, ``stop(handle)``, ``release()``.
"""

from __future__ import annotations

import asyncio
import posixpath
import shlex
import tempfile
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence

from .errors import SvServeError
from .sandboxes import FileContent, SandboxClient

DEFAULT_WORKDIR = "/sandbox"
FIRST_POLL_S = 0.01
MAX_POLL_S = 0.5
LOG_TAIL_BYTES = 2000


class SandboxNotReady(Exception):
    """The sandbox was made but never ran: ``timeout`` says whether its
    ready deadline passed (else it reported ``error`` or ``stopped``)."""

    def __init__(self, message: str, timeout: bool):
        super().__init__(message)
        self.timeout = timeout


def sandbox_path(path: str, workdir: str = DEFAULT_WORKDIR) -> str:
    """A path as sv-serve takes it: relative ones stay relative to the
    sandbox's workdir; an absolute one inside the workdir becomes relative
    (every sv-serve version takes that); other absolute ones go as they are
    (sv-serve confines them to the sandbox, or refuses them by name)."""
    path = str(path)
    if not posixpath.isabs(path) or ".." in path.split("/"):
        # A '..' goes as it is: sv-serve refuses it naming the path.
        return path
    norm = posixpath.normpath(path)
    base = posixpath.normpath(workdir or DEFAULT_WORKDIR)
    if norm == base:
        return ""
    if norm.startswith(base.rstrip("/") + "/"):
        return norm[len(base.rstrip("/")) + 1:]
    return norm


class SvServeDriver:
    """A sandbox's life on sv-serve."""

    def __init__(self, client: SandboxClient, owned: bool,
                 workdir: str = DEFAULT_WORKDIR):
        self.client = client
        self.owned = owned
        self.workdir = workdir

    async def create(self, spec: Mapping[str, Any], ready_timeout_s: float,
                     idempotency_key: Optional[str] = None) -> str:
        """Creates a sandbox and returns its id once it runs. Raises
        ``SvServeError``, ``ConfigurationError`` or ``SandboxNotReady`` (the
        sandbox is stopped then)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + float(ready_timeout_s)
        doc = await self.client.create(spec, ready_timeout_s, idempotency_key)
        sandbox_id = doc["sandbox_id"]
        try:
            await self._until_running(sandbox_id, deadline, ready_timeout_s)
        except BaseException:
            await self._stop_quietly(sandbox_id)
            raise
        return sandbox_id

    async def _until_running(self, sandbox_id, deadline, ready_timeout_s):
        loop = asyncio.get_running_loop()
        delay = FIRST_POLL_S
        while True:
            left = deadline - loop.time()
            if left <= 0:
                raise SandboxNotReady(f"sandbox {sandbox_id} not running "
                                      f"within its {ready_timeout_s:g} s "
                                      "deadline", True)
            try:
                status = await asyncio.wait_for(
                    self.client.status(sandbox_id), left)
            except asyncio.TimeoutError:
                continue  # the deadline has passed: said above
            if status == "running":
                return
            if status not in ("starting", "unknown"):
                raise SandboxNotReady(f"sandbox {sandbox_id} reported status "
                                      f"{status} before it was running", False)
            await asyncio.sleep(min(delay, max(0.0, left)))
            delay = min(delay * 2, MAX_POLL_S)

    async def _stop_quietly(self, sandbox_id):
        try:
            await asyncio.shield(self.client.stop(sandbox_id))
        except Exception:  # sv-serve's TTL reaps it
            pass

    async def upload(self, sandbox_id: str, directory: str,
                     files: Mapping[str, FileContent]) -> None:
        await self.client.upload_files(
            sandbox_id, sandbox_path(directory, self.workdir), files)

    async def run(self, sandbox_id: str, argv: Sequence[str], cwd: str,
                  env: Mapping[str, str], timeout_s: float, log_path: str,
                  grace_s: float) -> Dict[str, Any]:
        return await self.client.exec(
            sandbox_id, argv, timeout_s=timeout_s,
            cwd=sandbox_path(cwd, self.workdir), env=env,
            log_path=sandbox_path(log_path, self.workdir), grace_s=grace_s)

    async def read(self, sandbox_id: str, path: str) -> bytes:
        return await self.client.download(sandbox_id,
                                          sandbox_path(path, self.workdir))

    async def stop(self, sandbox_id: str) -> None:
        await self.client.stop(sandbox_id)

    async def release(self) -> None:
        if self.owned:
            self.client.close_idle()


class ProviderDriver:
    """A sandbox's life on a NeMo Gym ``SandboxProvider`` object (its
    ``create`` returns once the sandbox is ready)."""

    def __init__(self, provider: Any, owned: bool, spec_type: Any):
        self.provider = provider
        self.owned = owned
        self._spec_type = spec_type

    async def create(self, spec: Mapping[str, Any], ready_timeout_s: float,
                     idempotency_key: Optional[str] = None) -> Any:
        fields = {k: v for k, v in spec.items()
                  if k in ("image", "ttl_s", "ready_timeout_s", "env",
                           "metadata", "resources", "provider_options")}
        try:
            return await asyncio.wait_for(
                self.provider.create(self._spec_type(**fields)),
                ready_timeout_s)
        except asyncio.TimeoutError:
            raise SandboxNotReady(f"create did not return within its "
                                  f"{ready_timeout_s:g} s deadline",
                                  True) from None

    async def upload(self, handle: Any, directory: str,
                     files: Mapping[str, FileContent]) -> None:
        with tempfile.TemporaryDirectory(prefix="sv-client-") as tmp:
            for index, (name, content) in enumerate(files.items()):
                source = Path(tmp) / f"file-{index}"
                data = content.encode() if isinstance(content, str) else content
                source.write_bytes(bytes(data))
                await self.provider.upload_file(
                    handle, source, posixpath.join(directory, name))

    async def run(self, handle: Any, argv: Sequence[str], cwd: str,
                  env: Mapping[str, str], timeout_s: float, log_path: str,
                  grace_s: float) -> Dict[str, Any]:
        command = " ".join(shlex.quote(a) for a in argv)
        if log_path:
            # Relative to cwd where it lies there: the command runs in cwd.
            prefix = cwd.rstrip("/") + "/"
            log_path = log_path[len(prefix):] if cwd and \
                log_path.startswith(prefix) else log_path
            command = f"{command} > {shlex.quote(log_path)} 2>&1"
        res = await asyncio.wait_for(self.provider.exec(
            handle, command, cwd=cwd, env=dict(env), timeout_s=timeout_s),
            timeout_s + grace_s)
        kind = {None: "none", "timeout": "timeout"}.get(res.error_type,
                                                         "sandbox")
        out = {"return_code": res.return_code, "error_type": kind,
               "message": "" if kind == "none" else
               f"{res.error_type}: {res.stderr or ''}".strip(),
               "stdout": res.stdout or "", "stderr": res.stderr or "",
               "log_tail": ""}
        if log_path and kind != "sandbox":
            out["log_tail"] = await self._tail(handle, cwd, log_path)
        return out

    async def _tail(self, handle, cwd, log_path) -> str:
        try:
            res = await asyncio.wait_for(self.provider.exec(
                handle, f"tail -c {LOG_TAIL_BYTES} {shlex.quote(log_path)}",
                cwd=cwd, timeout_s=30), 40)
            return (res.stdout or "") if res.return_code == 0 else ""
        except Exception:  # the tail is a courtesy
            return ""

    async def read(self, handle: Any, path: str) -> bytes:
        with tempfile.TemporaryDirectory(prefix="sv-client-") as tmp:
            target = Path(tmp) / "download"
            try:
                await self.provider.download_file(handle, path, target)
            except FileNotFoundError as e:
                raise SvServeError(404, "not_found", f"{path}: {e}") from e
            if not target.is_file():
                raise SvServeError(404, "not_found", f"{path}: not written")
            return target.read_bytes()

    async def stop(self, handle: Any) -> None:
        await self.provider.close(handle)

    async def release(self) -> None:
        if self.owned:
            await self.provider.aclose()
