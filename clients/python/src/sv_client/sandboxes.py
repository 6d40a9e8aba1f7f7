"""sv-serve's sandbox API, one method a route (DESIGN.md "The sandbox API").

``SandboxClient`` is asyncio-only and holds no sandbox state: ids in, JSON
and bytes out. Answers that are not the route's success raise
``SvServeError`` (one call failed) or ``ConfigurationError`` (the client is
set up wrong: 401, a URL that is not sv-serve, TLS).
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import urllib.parse
from typing import Any, Dict, Mapping, Optional, Sequence, Union

from ._http import DEFAULT_MAX_BODY_BYTES, HttpClient
from .errors import ConfigurationError, SvServeError, answer_error

# A create that met a refused or broken connection or a 503 is sent again
# (with the same Idempotency-Key, so a retry never makes a second sandbox)
# up to this many times in all; one that met 429 (the token's sandboxes are
# at sv-serve's cap) until its deadline, waiting Retry-After.
CREATE_ATTEMPTS = 3
FIRST_BACKOFF_S = 0.05
MAX_BACKOFF_S = 1.0

FileContent = Union[str, bytes]


def read_token_file(path: str, url: str = "") -> str:
    """The first line of ``path``, stripped; a missing or empty file is a
    ``ConfigurationError`` naming it."""
    try:
        with open(path, encoding="utf-8") as f:
            token = f.readline().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigurationError("settings", f"token_file {path!r}: {e}",
                                 url) from e
    if not token:
        raise ConfigurationError("settings", f"token_file {path!r} is empty",
                                 url)
    return token


def file_value(content: FileContent) -> Any:
    """A file map's value: text as a string, bytes as ``{"base64": ...}``."""
    if isinstance(content, str):
        return content
    if isinstance(content, (bytes, bytearray, memoryview)):
        return {"base64": base64.b64encode(bytes(content)).decode("ascii")}
    raise TypeError(f"file content must be str or bytes, not "
                    f"{type(content).__name__}")


class SandboxClient:
    """The routes of ``/v1/sandboxes`` on one sv-serve.

    ``url`` ``http(s)://HOST:PORT``; ``token`` or ``token_file`` (its first
    line) when sv-serve has a ``--token-file``; ``ca_file`` the CA of an
    https server's certificate (default: the system's CAs);
    ``connections`` at most this many at once per event loop;
    ``timeout_s`` each call's deadline except exec's and create's."""

    def __init__(self, url: str, token: Optional[str] = None,
                 token_file: Optional[str] = None,
                 ca_file: Optional[str] = None, connections: int = 64,
                 timeout_s: float = 60.0,
                 max_body_bytes: int = DEFAULT_MAX_BODY_BYTES):
        if token is not None and token_file is not None:
            raise ConfigurationError("settings",
                                     "give token or token_file, not both", url)
        if token_file is not None:
            token = read_token_file(token_file, url)
        if token is not None and (not isinstance(token, str) or not token or
                                  any(c in token for c in "\r\n")):
            raise ConfigurationError("settings", "token must be a non-empty "
                                     "string on one line", url)
        self.url = url
        self.timeout_s = float(timeout_s)
        self._http = HttpClient(url, token, ca_file, connections,
                                max_body_bytes)

    def close_idle(self):
        """Closes idle connections (the client stays usable)."""
        self._http.close_idle()

    # -- plumbing ---------------------------------------------------------------

    @staticmethod
    def _path(sandbox_id: str, suffix: str = "") -> str:
        return "/v1/sandboxes/" + urllib.parse.quote(sandbox_id, safe="") + \
            suffix

    async def _json_call(self, method, target, doc=None, expect=(200,),
                         headers=None, timeout_s=None, retry_stale=True):
        body = b"" if doc is None else json.dumps(doc).encode()
        hdrs = {"Content-Type": "application/json"} if doc is not None else {}
        hdrs.update(headers or {})
        r = await self._http.request(
            method, target, body, hdrs,
            self.timeout_s if timeout_s is None else timeout_s, retry_stale)
        if r.status not in expect:
            err = answer_error(self.url, r.status, r.body)
            retry_after = r.headers.get("retry-after", "")
            if retry_after.isdigit():
                err.retry_after = float(retry_after)
            raise err
        return r

    def _json_of(self, r, what):
        try:
            doc = json.loads(r.body)
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            raise ConfigurationError(
                "not_sv_serve", f"{self.url} answered {what} with "
                f"{r.body[:200]!r}, not sv-serve's JSON", self.url, r.status)
        return doc

    # -- the routes -------------------------------------------------------------

    async def create(self, spec: Mapping[str, Any], deadline_s: float,
                     idempotency_key: Optional[str] = None) -> Dict[str, Any]:
        """``POST /v1/sandboxes``: ``{"sandbox_id", "state", "ttl_s", ...}``.
        A refused or broken connection, 429 and 503 are tried again with the
        same Idempotency-Key (waiting ``Retry-After``) within ``deadline_s``."""
        key = idempotency_key or "py-" + secrets.token_hex(16)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + float(deadline_s)
        delay, attempts = FIRST_BACKOFF_S, 0
        while True:
            left = deadline - loop.time()
            try:
                r = await self._json_call(
                    "POST", "/v1/sandboxes", dict(spec), (200, 201),
                    {"Idempotency-Key": key}, max(0.001, left))
                return self._created(r)
            except SvServeError as e:
                attempts += 1
                busy = e.status == 429
                broken = e.code in ("connect", "lost") or e.status == 503
                wait = max(delay, getattr(e, "retry_after", 0.0))
                if not (busy or (broken and attempts < CREATE_ATTEMPTS)) or \
                        loop.time() + wait >= deadline:
                    raise
            await asyncio.sleep(wait)
            delay = min(delay * 2, MAX_BACKOFF_S)

    def _created(self, r) -> Dict[str, Any]:
        doc = self._json_of(r, "create")
        if not isinstance(doc.get("sandbox_id"), str) or not doc["sandbox_id"]:
            raise ConfigurationError(
                "not_sv_serve", f"{self.url} answered create without a "
                f"sandbox_id: {r.body[:200]!r}", self.url, r.status)
        return doc

    async def status(self, sandbox_id: str) -> str:
        """``GET /v1/sandboxes/{id}``: starting, running, stopped, error or
        unknown."""
        r = await self._json_call("GET", self._path(sandbox_id))
        status = self._json_of(r, "status").get("status")
        if not isinstance(status, str):
            raise ConfigurationError("not_sv_serve", f"{self.url} answered "
                                     f"status with {r.body[:200]!r}", self.url)
        return status

    async def upload_files(self, sandbox_id: str, directory: str,
                           files: Mapping[str, FileContent]) -> None:
        """``PUT /v1/sandboxes/{id}/files`` (JSON): ``files`` name -> text
        (str) or bytes (sent as ``{"base64": ...}``) into ``directory``
        (relative to the sandbox's workdir, or absolute inside it)."""
        doc = {"dir": directory,
               "files": {name: file_value(c) for name, c in files.items()}}
        await self._json_call("PUT", self._path(sandbox_id, "/files"), doc,
                              (204,))

    async def upload_bytes(self, sandbox_id: str, path: str,
                           data: bytes) -> None:
        """``PUT /v1/sandboxes/{id}/files?path=P`` (application/octet-stream):
        one file with exactly ``data``."""
        target = self._path(sandbox_id, "/files?path=" +
                            urllib.parse.quote(path, safe=""))
        r = await self._http.request(
            "PUT", target, bytes(data),
            {"Content-Type": "application/octet-stream"}, self.timeout_s)
        if r.status == 204:
            return
        err = answer_error(self.url, r.status, r.body)
        if isinstance(err, SvServeError) and err.code == "invalid_request" \
                and "not JSON" in err.message:
            # An sv-serve older than the octet-stream route read the bytes
            # as a JSON upload.
            err = SvServeError(400, "octet_stream_unsupported", f"{self.url} "
                               "takes no application/octet-stream uploads "
                               "(an older sv-serve): send text, or upgrade it")
        raise err

    async def exec(self, sandbox_id: str, argv: Sequence[str], *,
                   timeout_s: float, cwd: str = "",
                   env: Optional[Mapping[str, str]] = None, log_path: str = "",
                   grace_s: float = 10.0) -> Dict[str, Any]:
        """``POST /v1/sandboxes/{id}/exec``: ``{"stdout", "stderr",
        "return_code", "error_type", "message", "log_tail"}``. Waits at most
        ``timeout_s + grace_s``; never sent twice."""
        doc = {"argv": list(argv), "cwd": cwd, "env": dict(env or {}),
               "timeout_s": float(timeout_s)}
        if log_path:
            doc["log_path"] = log_path
        r = await self._json_call("POST", self._path(sandbox_id, "/exec"),
                                  doc, timeout_s=float(timeout_s) + grace_s,
                                  retry_stale=False)
        res = self._json_of(r, "exec")
        if not isinstance(res.get("return_code"), int):
            raise ConfigurationError("not_sv_serve", f"{self.url} answered "
                                     f"exec with {r.body[:200]!r}", self.url)
        return res

    async def download(self, sandbox_id: str, path: str) -> bytes:
        """``GET /v1/sandboxes/{id}/files?path=P``: the file's bytes."""
        target = self._path(sandbox_id, "/files?path=" +
                            urllib.parse.quote(path, safe=""))
        r = await self._http.request("GET", target, b"", None, self.timeout_s)
        if r.status != 200:
            raise answer_error(self.url, r.status, r.body)
        return r.body

    async def stop(self, sandbox_id: str,
                   timeout_s: Optional[float] = None) -> None:
        """``DELETE /v1/sandboxes/{id}`` (idempotent: a stopped sandbox, or
        one sv-serve no longer knows, is fine)."""
        try:
            await self._json_call("DELETE", self._path(sandbox_id),
                                  expect=(204,), timeout_s=timeout_s)
        except SvServeError as e:
            if e.code != "no_such_sandbox":
                raise
