"""NeMo Gym's ``SandboxProvider`` protocol over sv-serve's sandbox API.

Installed with this package, NeMo Gym finds it through the entry point
``sv_serve`` of the group ``nemo_gym.sandbox_providers``; a YAML block is
all a user writes::

    sandbox:
      sv_serve:
        url: https://grader-host:8443
        token_file: /etc/sv/token
        ca_file: /etc/sv/ca.pem        # https: the CA of sv-serve's certificate

What it does with each call is in docs/python.md. What sv-serve cannot do
(``user`` for exec, ``entrypoint``, ``ports``) is refused with a message
naming it, never dropped.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

from ._nemo_types import (SandboxCreateError, SandboxCreateVerificationError,
                          SandboxExecResult, SandboxHandle, SandboxStatus)
from .drivers import DEFAULT_WORKDIR, SandboxNotReady, SvServeDriver, \
    sandbox_path
from .errors import ConfigurationError, SvServeError
from .sandboxes import SandboxClient

LOGGER = logging.getLogger(__name__)

PROVIDER_NAME = "sv_serve"
# The return code of an exec that the sandbox, not the command, ended
# (NeMo Gym's providers use the same sentinel).
SANDBOX_RUNTIME_RETURN_CODE = 125


class SvServeConfigurationError(ConfigurationError, SandboxCreateError):
    """A create that failed because the provider is set up wrong (401, a
    URL that is not sv-serve, TLS): a ``SandboxCreateError`` as NeMo Gym's
    protocol asks, and a ``ConfigurationError`` to tell it apart."""


class SvServeUnsupportedError(SandboxCreateError, ValueError):
    """A create asked for what sv-serve sandboxes cannot do."""


def _resources_of(resources: Any) -> Dict[str, Any]:
    if resources is None:
        return {}
    if isinstance(resources, Mapping):
        items = resources.items()
    elif dataclasses.is_dataclass(resources):
        items = dataclasses.asdict(resources).items()
    else:
        items = vars(resources).items()
    return {k: v for k, v in items if v is not None}


def spec_body(spec: Any) -> Dict[str, Any]:
    """The JSON body of a create for a NeMo Gym ``SandboxSpec``; refuses
    ``entrypoint`` and ``ports`` (``SvServeUnsupportedError``)."""
    if getattr(spec, "entrypoint", None):
        raise SvServeUnsupportedError(
            "sv_serve: spec.entrypoint is not supported: sv-serve sandboxes "
            "run no entrypoint; run it with exec()")
    if tuple(getattr(spec, "ports", None) or ()):
        raise SvServeUnsupportedError(
            f"sv_serve: spec.ports {list(spec.ports)} is not supported: "
            "sv-serve sandboxes have no network to serve on")
    body: Dict[str, Any] = {}
    for key in ("image", "ttl_s", "ready_timeout_s", "workdir"):
        value = getattr(spec, key, None)
        if value:  # None or 0: sv-serve's default
            body[key] = value
    for key in ("env", "metadata", "provider_options"):
        value = getattr(spec, key, None)
        if value:
            body[key] = dict(value)
    resources = _resources_of(getattr(spec, "resources", None))
    if resources:
        body["resources"] = resources
    return body


class SvServeProvider:
    """NeMo Gym's ``SandboxProvider`` over sv-serve (see the module).

    ``url``, ``token`` / ``token_file``, ``ca_file``, ``connections`` and
    ``timeout_s`` as ``SandboxClient`` takes them; ``ready_timeout_s`` when
    a spec sets none; ``exec_timeout_s`` when an exec sets none;
    ``exec_grace_s`` how long past an exec's timeout to wait for sv-serve's
    answer; ``shell`` runs each command (``shell -c command``)."""

    name = PROVIDER_NAME

    def __init__(self, url: str, token: Optional[str] = None,
                 token_file: Optional[str] = None,
                 ca_file: Optional[str] = None, connections: int = 64,
                 timeout_s: float = 60.0, ready_timeout_s: float = 600.0,
                 exec_timeout_s: float = 180.0, exec_grace_s: float = 10.0,
                 shell: str = "/bin/sh"):
        self.client = SandboxClient(url, token, token_file, ca_file,
                                    connections, timeout_s)
        self.ready_timeout_s = float(ready_timeout_s)
        self.exec_timeout_s = float(exec_timeout_s)
        self.exec_grace_s = float(exec_grace_s)
        if not isinstance(shell, str) or not shell:
            raise ConfigurationError("settings", "shell must be a program "
                                     "name or path", url)
        self.shell = shell

    def __repr__(self):
        return f"SvServeProvider(url={self.client.url!r})"

    def _driver(self, workdir: str = DEFAULT_WORKDIR) -> SvServeDriver:
        return SvServeDriver(self.client, owned=False, workdir=workdir)

    @staticmethod
    def _workdir(handle) -> str:
        raw = handle.raw if isinstance(handle.raw, dict) else {}
        return raw.get("workdir") or DEFAULT_WORKDIR

    # -- create -----------------------------------------------------------------

    async def create(self, spec: Any) -> Any:
        """Creates a sandbox and returns once it runs. A refused spec is
        ``SvServeUnsupportedError`` (here) or ``SandboxCreateError`` with
        sv-serve's message (a field it refused); a sandbox that never runs
        ``SandboxCreateVerificationError``; a wrong setup
        ``SvServeConfigurationError``; anything else ``SandboxCreateError``."""
        body = spec_body(spec)
        ready = float(getattr(spec, "ready_timeout_s", None) or
                      self.ready_timeout_s)
        workdir = body.get("workdir", DEFAULT_WORKDIR)
        try:
            sandbox_id = await self._driver(workdir).create(body, ready)
        except ConfigurationError as e:
            LOGGER.error("sv_serve: %s", e)
            self.client.close_idle()  # every later call fails the same way
            raise SvServeConfigurationError(e.reason, str(e), e.url,
                                            e.http_status) from e
        except SandboxNotReady as e:
            raise SandboxCreateVerificationError(f"sv_serve: {e}") from e
        except SvServeError as e:
            raise SandboxCreateError(f"sv_serve: create failed: {e}") from e
        return SandboxHandle(sandbox_id=sandbox_id, provider_name=self.name,
                             raw={"url": self.client.url, "workdir": workdir})

    # -- exec -------------------------------------------------------------------

    async def exec(self, handle: Any, command: str, *, cwd: Optional[str] = None,
                   env: Optional[Dict[str, str]] = None,
                   timeout_s: Optional[float] = None,
                   user: Optional[Any] = None) -> Any:
        """``shell -c command``. ``error_type`` None when the command ended
        on its own (also killed for memory or by a signal: ``return_code``
        and ``stderr`` say how), ``"timeout"`` past ``timeout_s``,
        ``"sandbox"`` when the sandbox or sv-serve failed (return code 125).
        ``user`` is refused (``ValueError``); so are arguments sv-serve
        refuses (its 400, e.g. a cwd outside the sandbox)."""
        if user is not None:
            raise ValueError(f"sv_serve cannot run commands as user {user!r}: "
                             "a sandbox runs every command as its own user")
        timeout = float(timeout_s) if timeout_s is not None \
            else self.exec_timeout_s
        try:
            res = await self._driver(self._workdir(handle)).run(
                handle.sandbox_id, [self.shell, "-c", command],
                cwd or "", env or {}, timeout, "", self.exec_grace_s)
        except SvServeError as e:
            if e.status == 400:
                raise ValueError(f"sv_serve refused the exec: {e.message}") \
                    from e
            return self._sandbox_failed(str(e))
        return self._exec_result(res)

    @staticmethod
    def _sandbox_failed(message: str) -> Any:
        return SandboxExecResult(stdout=None, stderr=message,
                                 return_code=SANDBOX_RUNTIME_RETURN_CODE,
                                 error_type="sandbox")

    def _exec_result(self, res: Dict[str, Any]) -> Any:
        kind = res.get("error_type", "none")
        stdout, stderr = res.get("stdout", ""), res.get("stderr", "")
        message = res.get("message") or ""
        if kind in ("none", "oom", "killed"):
            if kind != "none" and message and not stderr:
                stderr = message
            return SandboxExecResult(stdout=stdout, stderr=stderr,
                                     return_code=res["return_code"],
                                     error_type=None)
        if kind == "timeout":
            return SandboxExecResult(stdout=stdout, stderr=stderr or message,
                                     return_code=res["return_code"],
                                     error_type="timeout")
        return self._sandbox_failed(stderr or message or
                                    f"exec failed: {kind}")

    # -- files ------------------------------------------------------------------

    async def upload_file(self, handle: Any, source_path: Any,
                          target_path: str) -> None:
        """Copies a local file into the sandbox, its bytes exactly: UTF-8
        text as a JSON upload, other bytes as ``application/octet-stream``.
        ``target_path`` relative to the workdir or absolute (confined to
        the sandbox by sv-serve). A path sv-serve refuses is ``ValueError``."""
        loop = asyncio.get_running_loop()
        data = await loop.run_in_executor(None, Path(source_path).read_bytes)
        workdir = self._workdir(handle)
        path = sandbox_path(str(target_path), workdir)
        directory, _, name = path.rpartition("/")
        if not name:
            raise ValueError(f"target_path {target_path!r} names no file")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        try:
            if text is not None:
                await self.client.upload_files(handle.sandbox_id, directory,
                                               {name: text})
            else:
                await self.client.upload_bytes(handle.sandbox_id, path, data)
        except SvServeError as e:
            if e.status == 400 and e.code != "octet_stream_unsupported":
                raise ValueError(f"sv_serve refused {target_path!r}: "
                                 f"{e.message}") from e
            raise

    async def download_file(self, handle: Any, source_path: str,
                            target_path: Any) -> None:
        """Copies a sandbox file's bytes to ``target_path`` (parents made).
        A missing file is ``FileNotFoundError``; a path sv-serve refuses
        ``ValueError``."""
        path = sandbox_path(str(source_path), self._workdir(handle))
        try:
            data = await self.client.download(handle.sandbox_id, path)
        except SvServeError as e:
            if e.code == "not_found":
                raise FileNotFoundError(f"{source_path}: not in sandbox "
                                        f"{handle.sandbox_id}") from e
            if e.status == 400:
                raise ValueError(f"sv_serve refused {source_path!r}: "
                                 f"{e.message}") from e
            raise
        target = Path(target_path)

        def write():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)

        await asyncio.get_running_loop().run_in_executor(None, write)

    # -- status and the end -----------------------------------------------------

    async def status(self, handle: Any) -> Any:
        """The sandbox's status; ``STOPPED`` once sv-serve no longer knows
        it, ``UNKNOWN`` when sv-serve cannot say (unreachable, failing)."""
        try:
            value = await self.client.status(handle.sandbox_id)
        except SvServeError as e:
            if e.code == "no_such_sandbox":
                return SandboxStatus.STOPPED
            return SandboxStatus.UNKNOWN
        try:
            return SandboxStatus(value)
        except ValueError:
            return SandboxStatus.UNKNOWN

    async def close(self, handle: Any) -> None:
        """Stops the sandbox. Never raises (cleanup paths call it): a failed
        stop is logged and sv-serve's TTL reaps the sandbox."""
        try:
            await self.client.stop(handle.sandbox_id)
        except (SvServeError, ConfigurationError) as e:
            LOGGER.warning("sv_serve: stopping %s failed (%s); its TTL reaps "
                           "it", handle.sandbox_id, e)

    async def aclose(self) -> None:
        """Closes idle connections. The provider stays usable: NeMo Gym's
        AsyncSandbox calls this at every stop, also on a shared provider."""
        self.client.close_idle()


def register(name: str = PROVIDER_NAME) -> bool:
    """Registers the provider in NeMo Gym's registry under ``name`` (only
    needed for a name other than the entry point's, or to win over another
    package's ``sv_serve``); False when NeMo Gym is not importable."""
    try:
        from nemo_gym.sandbox.providers.registry import (  # type: ignore
            register_provider)
    except ImportError:
        return False
    register_provider(name, SvServeProvider, override=True)
    return True

