"""A NeMo Gym sandbox provider backed by sv-serve's sandbox API.

Standard library only. It implements NeMo Gym's provider protocol
(``nemo_gym/sandbox/providers/base.py``: ``create``, ``exec``,
``upload_file``, ``download_file``, ``status``, ``close``, ``aclose``), so
``AsyncSandbox`` / ``Sandbox`` drive sandboxes on an sv-serve host with no
code change. Register it once, then switch with a YAML block::

    import nemo_gym_provider
    nemo_gym_provider.register()          # registers "sv_serve"

    sandbox:
      sv_serve:
        url: https://grader-host:8443    # or http://
        ca_file: /etc/sv/ca.pem          # https: the CA of sv-serve's certificate
        token_file: /etc/sv/token        # or token: ...; none for a loopback sv-serve

What maps to what (sv-serve's contract is DESIGN.md, "The sandbox API"):

- ``create(spec)`` POSTs the spec with a fresh ``Idempotency-Key`` (reused
  when it retries after a refused or broken connection, a 503 or a 429, so
  a retry never leaks a sandbox), then polls the status until ``running``
  within ``spec.ready_timeout_s``; it raises ``SandboxCreateError``
  otherwise (and stops what it made). ``spec.files`` are uploaded by
  ``AsyncSandbox.start`` itself, as for every provider.
- ``exec`` runs ``[shell, "-c", command]``. ``error_type`` is ``None`` when
  the command ended on its own (also when it was killed for memory or by a
  signal: ``return_code`` says how), ``"timeout"`` when it overran
  ``timeout_s``, and ``"sandbox"`` when the sandbox or the server failed
  (the command could not run; the server is gone, refused the token, lost
  the sandbox, or did not answer within ``timeout_s + exec_grace_s``);
  then ``return_code`` is 125 and ``stderr`` says what happened.
- Paths: relative ones are relative to the sandbox's workdir; an absolute
  one must lie under ``spec.workdir`` (``/sandbox`` by default).
- ``close`` never raises (a failed stop is logged; sv-serve's TTL reaps the
  sandbox): a grade stands whatever the stop does.

Outside NeMo Gym (it cannot be installed everywhere), the module defines
stand-ins with the same fields for ``SandboxHandle``, ``SandboxExecResult``,
``SandboxStatus`` and ``SandboxCreateError``.
"""

import asyncio
import concurrent.futures
import http.client
import json
import logging
import posixpath
import secrets
import socket
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

try:  # the real types when NeMo Gym is installed
    from nemo_gym.sandbox.providers.base import (  # type: ignore
        SandboxCreateError,
        SandboxExecResult,
        SandboxHandle,
        SandboxStatus,
    )
except ImportError:  # pragma: no cover - exercised where NeMo Gym is absent

    class SandboxStatus(str, Enum):
        STARTING = "starting"
        RUNNING = "running"
        STOPPED = "stopped"
        ERROR = "error"
        UNKNOWN = "unknown"

    @dataclass
    class SandboxHandle:
        sandbox_id: str
        provider_name: str
        raw: object

    @dataclass(frozen=True)
    class SandboxExecResult:
        stdout: "str | None"
        stderr: "str | None"
        return_code: int
        error_type: "str | None" = None

    class SandboxCreateError(RuntimeError):
        """Raised when a provider cannot create a sandbox."""


LOGGER = logging.getLogger(__name__)

PROVIDER_NAME = "sv_serve"
# The return code of an exec that the sandbox, not the command, ended.
SANDBOX_RUNTIME_RETURN_CODE = 125
DEFAULT_WORKDIR = "/sandbox"
MAX_RESPONSE_BYTES = 64 << 20
CREATE_ATTEMPTS = 3


class SvServeError(RuntimeError):
    """An sv-serve call failed: ``status`` (0: no HTTP answer), ``code``
    (sv-serve's error code, e.g. ``no_such_sandbox``, or ``connect``,
    ``lost``, ``timeout`` for transport failures) and ``message``."""

    def __init__(self, status, code, message):
        super().__init__(f"sv-serve: {status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message

    @property
    def transport(self):
        """No answer came, or the server could not serve the call now."""
        return self.status == 0 or self.status in (401, 429) or self.status >= 500


class _Http:
    """A bounded pool of keep-alive connections to one sv-serve (blocking:
    used from worker threads through ``asyncio.to_thread``)."""

    def __init__(self, url, token, connections, timeout_s, ca_file=None):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname or not parts.port:
            raise ValueError(f"sv_serve url must be http(s)://HOST:PORT, got {url!r}")
        if ca_file is not None and parts.scheme != "https":
            raise ValueError("sv_serve: ca_file is only for an https url")
        # https: the server's certificate checked against ca_file (or the
        # system's CAs) and the host name, TLS 1.2+.
        self._tls = None
        if parts.scheme == "https":
            self._tls = ssl.create_default_context(cafile=ca_file)
            self._tls.minimum_version = ssl.TLSVersion.TLSv1_2
        if parts.path not in ("", "/") or parts.query:
            raise ValueError(f"sv_serve url must not have a path, got {url!r}")
        self.host = parts.hostname
        self.port = parts.port
        self.url = url
        self.token = token
        self.timeout_s = timeout_s
        self._idle = []
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(connections)

    def _take(self):
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        if self._tls is not None:
            return http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout_s,
                                               context=self._tls), False
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s), False

    def _give_back(self, conn):
        with self._lock:
            self._idle.append(conn)

    def drop_idle(self):
        """Closes the idle connections; later calls open new ones."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def request(self, method, target, body=None, headers=None, timeout_s=None, idempotent=True):
        """(status, headers, body bytes). Raises SvServeError(0, ...) when no
        answer came. A request safe to repeat goes once more on a fresh
        connection when a reused one turns out closed."""
        hdrs = {"Connection": "keep-alive"}
        if self.token:
            hdrs["Authorization"] = f"Bearer {self.token}"
        if body is not None:
            body = json.dumps(body).encode()
            hdrs["Content-Type"] = "application/json"
        hdrs.update(headers or {})
        timeout = timeout_s if timeout_s is not None else self.timeout_s
        if not self._slots.acquire(timeout=timeout):
            raise SvServeError(0, "timeout", f"no free connection to {self.url} within {timeout:g} s")
        try:
            for attempt in (1, 2):
                conn, reused = self._take()
                conn.timeout = timeout
                if conn.sock is not None:
                    conn.sock.settimeout(timeout)
                try:
                    conn.request(method, target, body=body, headers=hdrs)
                    resp = conn.getresponse()
                    data = resp.read(MAX_RESPONSE_BYTES + 1)
                    if len(data) > MAX_RESPONSE_BYTES:
                        conn.close()
                        raise SvServeError(0, "too_large", f"the answer of {self.url} exceeds {MAX_RESPONSE_BYTES} bytes")
                    if resp.will_close:
                        conn.close()
                    else:
                        self._give_back(conn)
                    return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
                except (socket.timeout, TimeoutError) as e:
                    conn.close()
                    raise SvServeError(0, "timeout", f"no answer from {self.url} within {timeout:g} s") from e
                except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                    conn.close()
                    if reused and idempotent and attempt == 1:
                        continue  # the server closed an idle connection
                    raise SvServeError(0, "lost", f"the connection to {self.url} broke: {e}") from e
                except ssl.SSLError as e:
                    conn.close()
                    raise SvServeError(0, "connect", f"TLS with {self.url} failed: {e}") from e
                except ConnectionRefusedError as e:
                    conn.close()
                    raise SvServeError(0, "connect", f"cannot connect to {self.url}: {e}") from e
                except (OSError, http.client.HTTPException) as e:
                    conn.close()
                    raise SvServeError(0, "lost", f"request to {self.url} failed: {e}") from e
        finally:
            self._slots.release()


def _error_of(status, data):
    code, message = "http_" + str(status), data[:200].decode(errors="replace")
    try:
        err = json.loads(data)["error"]
        code, message = str(err["code"]), str(err["message"])
    except (ValueError, KeyError, TypeError):
        pass
    return SvServeError(status, code, message)


class SvServeProvider:
    """NeMo Gym's ``SandboxProvider`` protocol over sv-serve's sandbox API."""

    name = PROVIDER_NAME

    def __init__(
        self,
        url,
        token=None,
        token_file=None,
        ca_file=None,
        connections=8,
        timeout_s=60.0,
        exec_grace_s=10.0,
        ready_timeout_s=60.0,
        shell="/bin/sh",
    ):
        if token is not None and token_file is not None:
            raise ValueError("sv_serve: give token or token_file, not both")
        if token_file is not None:
            with open(token_file, encoding="utf-8") as f:
                token = f.readline().strip()
            if not token:
                raise ValueError(f"sv_serve: the token file {token_file} is empty")
        if int(connections) < 1:
            raise ValueError("sv_serve: connections must be at least 1")
        self._http = _Http(url, token, int(connections), float(timeout_s), ca_file)
        self._executor = concurrent.futures.ThreadPoolExecutor(int(connections), thread_name_prefix="sv-serve")
        self._exec_grace_s = float(exec_grace_s)
        self._ready_timeout_s = float(ready_timeout_s)
        self._shell = shell

    # -- helpers --------------------------------------------------------------

    async def _call(self, method, target, body=None, headers=None, timeout_s=None, idempotent=True):
        # Its own threads, one per connection (asyncio's default executor
        # has only a few on a small machine).
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._executor, self._http.request, method, target, body, headers, timeout_s, idempotent)

    @staticmethod
    def _target(handle, suffix=""):
        return "/v1/sandboxes/" + urllib.parse.quote(handle.sandbox_id, safe="") + suffix

    @staticmethod
    def _relative(handle, path, what):
        """A sandbox path relative to its workdir ('' for the workdir)."""
        workdir = handle.raw.get("workdir", DEFAULT_WORKDIR) if isinstance(handle.raw, dict) else DEFAULT_WORKDIR
        path = str(path)
        if posixpath.isabs(path):
            norm = posixpath.normpath(path)
            base = posixpath.normpath(workdir)
            if norm == base:
                return ""
            if not norm.startswith(base.rstrip("/") + "/"):
                raise ValueError(f"{what} {path!r} lies outside the sandbox's workdir {workdir!r}")
            return norm[len(base.rstrip("/")) + 1:]
        return path

    @staticmethod
    def _spec_body(spec):
        body = {}
        # 0 or None: the server's default (its strict reader refuses 0).
        for key in ("image", "ttl_s", "ready_timeout_s", "workdir"):
            value = getattr(spec, key, None)
            if value:
                body[key] = value
        for key in ("env", "metadata", "provider_options"):
            value = getattr(spec, key, None)
            if value:
                body[key] = dict(value)
        resources = getattr(spec, "resources", None)
        if resources is not None:
            items = resources.items() if isinstance(resources, dict) else vars(resources).items()
            res = {k: v for k, v in items if v is not None}
            if res:
                body["resources"] = res
        if getattr(spec, "entrypoint", None):
            raise SandboxCreateError("sv_serve sandboxes have no entrypoint; run it with exec()")
        return body

    # -- the protocol ---------------------------------------------------------

    async def create(self, spec):
        """Creates a sandbox and returns once it is running."""
        body = self._spec_body(spec)
        key = secrets.token_hex(16)
        ready_timeout = spec.ready_timeout_s if getattr(spec, "ready_timeout_s", None) else self._ready_timeout_s
        deadline = time.monotonic() + float(ready_timeout)
        status, data = 0, b""
        for attempt in range(1, CREATE_ATTEMPTS + 1):
            try:
                status, headers, data = await self._call(
                    "POST", "/v1/sandboxes", body, {"Idempotency-Key": key},
                    timeout_s=max(0.1, deadline - time.monotonic()))
            except SvServeError as e:
                if e.code in ("connect", "lost") and attempt < CREATE_ATTEMPTS:
                    await asyncio.sleep(0.1 * 2 ** (attempt - 1))
                    continue
                raise SandboxCreateError(str(e)) from e
            if status in (429, 503) and attempt < CREATE_ATTEMPTS:
                wait = 0.1 * 2 ** (attempt - 1)
                retry_after = headers.get("retry-after", "")
                if retry_after.isdigit():
                    wait = max(wait, float(retry_after))
                if time.monotonic() + wait < deadline:
                    await asyncio.sleep(wait)
                    continue
            break
        if status not in (200, 201):
            raise SandboxCreateError(str(_error_of(status, data)))
        try:
            sandbox_id = json.loads(data)["sandbox_id"]
        except (ValueError, KeyError, TypeError) as e:
            raise SandboxCreateError(f"sv-serve answered create without a sandbox_id: {data[:200]!r}") from e
        handle = SandboxHandle(
            sandbox_id=sandbox_id,
            provider_name=self.name,
            raw={"url": self._http.url, "workdir": getattr(spec, "workdir", None) or DEFAULT_WORKDIR},
        )
        # Ready: poll with backoff until running, within the ready timeout.
        delay = 0.01
        while True:
            try:
                state = await self._status(handle)
            except SvServeError as e:
                await self.close(handle)
                raise SandboxCreateError(f"sandbox {sandbox_id}: {e}") from e
            if state == SandboxStatus.RUNNING:
                return handle
            if state in (SandboxStatus.ERROR, SandboxStatus.STOPPED) or time.monotonic() + delay > deadline:
                await self.close(handle)
                raise SandboxCreateError(
                    f"sandbox {sandbox_id} is {state.value}, not running, within {float(ready_timeout):g} s")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    async def exec(self, handle, command, *, cwd=None, env=None, timeout_s=None, user=None):
        if user is not None:
            raise ValueError("the sv_serve provider cannot run commands as another user")
        timeout = float(timeout_s) if timeout_s is not None else 180.0
        request = {
            "argv": [self._shell, "-c", command],
            "cwd": self._relative(handle, cwd, "cwd") if cwd is not None else "",
            "env": dict(env or {}),
            "timeout_s": timeout,
        }
        try:
            status, _, data = await self._call(
                "POST", self._target(handle, "/exec"), request,
                timeout_s=timeout + self._exec_grace_s, idempotent=False)
        except SvServeError as e:
            return SandboxExecResult(stdout=None, stderr=str(e), return_code=SANDBOX_RUNTIME_RETURN_CODE,
                                     error_type="sandbox")
        if status == 400:
            raise ValueError(str(_error_of(status, data)))
        if status != 200:
            return SandboxExecResult(stdout=None, stderr=str(_error_of(status, data)),
                                     return_code=SANDBOX_RUNTIME_RETURN_CODE, error_type="sandbox")
        try:
            res = json.loads(data)
            kind = res.get("error_type", "none")
            stdout, stderr = res.get("stdout", ""), res.get("stderr", "")
            return_code = int(res["return_code"])
        except (ValueError, KeyError, TypeError, AttributeError):
            return SandboxExecResult(stdout=None, stderr=f"sv-serve answered exec with {data[:200]!r}",
                                     return_code=SANDBOX_RUNTIME_RETURN_CODE, error_type="sandbox")
        message = res.get("message") or ""
        if kind in ("none", "oom", "killed"):
            if kind != "none" and message and not stderr:
                stderr = message
            return SandboxExecResult(stdout=stdout, stderr=stderr, return_code=return_code, error_type=None)
        if kind == "timeout":
            return SandboxExecResult(stdout=stdout, stderr=stderr or message, return_code=return_code,
                                     error_type="timeout")
        return SandboxExecResult(stdout=stdout or None, stderr=stderr or message or f"exec failed: {kind}",
                                 return_code=SANDBOX_RUNTIME_RETURN_CODE, error_type="sandbox")

    async def upload_file(self, handle, source_path, target_path):
        data = await asyncio.to_thread(Path(source_path).read_bytes)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"sv_serve uploads text (UTF-8) files only: {source_path}") from e
        rel = self._relative(handle, target_path, "target_path")
        directory, name = posixpath.split(rel)
        if not name:
            raise ValueError(f"target_path {target_path!r} names no file")
        status, _, body = await self._call("PUT", self._target(handle, "/files"),
                                           {"dir": directory, "files": {name: text}})
        if status != 204:
            raise _error_of(status, body)

    async def download_file(self, handle, source_path, target_path):
        rel = self._relative(handle, source_path, "source_path")
        target = self._target(handle, "/files?path=" + urllib.parse.quote(rel, safe=""))
        status, _, data = await self._call("GET", target)
        if status != 200:
            err = _error_of(status, data)
            if err.code == "not_found":
                raise FileNotFoundError(f"{source_path}: not in sandbox {handle.sandbox_id}")
            raise err
        target_path = Path(target_path)

        def write():
            target_path.parent.mkdir(parents=True, exist_ok=True)
            target_path.write_bytes(data)

        await asyncio.to_thread(write)

    async def _status(self, handle):
        """The status; raises SvServeError when the server cannot say."""
        status, _, data = await self._call("GET", self._target(handle))
        if status == 404:
            err = _error_of(status, data)
            if err.code == "no_such_sandbox":
                return SandboxStatus.STOPPED
            raise err
        if status != 200:
            raise _error_of(status, data)
        try:
            return SandboxStatus(json.loads(data)["status"])
        except (ValueError, KeyError, TypeError):
            return SandboxStatus.UNKNOWN

    async def status(self, handle):
        try:
            return await self._status(handle)
        except SvServeError:
            return SandboxStatus.UNKNOWN

    async def close(self, handle):
        try:
            status, _, data = await self._call("DELETE", self._target(handle))
        except SvServeError as e:
            LOGGER.warning("sv_serve: stopping %s failed (%s); its TTL reaps it", handle.sandbox_id, e)
            return
        if status not in (204, 404):
            LOGGER.warning("sv_serve: stopping %s failed (%s); its TTL reaps it", handle.sandbox_id,
                           _error_of(status, data))

    async def aclose(self):
        """Closes idle connections. The provider stays usable: AsyncSandbox
        calls this at every stop, also on a provider that others share."""
        self._http.drop_idle()


def register(name=PROVIDER_NAME):
    """Registers the provider with NeMo Gym (when it is installed) under
    `name`; returns False when NeMo Gym is not importable."""
    try:
        from nemo_gym.sandbox.providers.registry import get_provider_class, register_provider  # type: ignore
    except ImportError:
        return False
    try:
        if get_provider_class(name) is SvServeProvider:
            return True
    except ValueError:
        pass
    register_provider(name, SvServeProvider)
    return True
