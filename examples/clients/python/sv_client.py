"""The seed's `run_verification_sandbox`, in Python, over sv-serve.

Standard library only (Python 3.8+). One call grades one submission in a
fresh, single-use sandbox through sv-serve's `POST /v1/verify`, and returns
the parsed `result.json` or raises `SandboxVerificationError`:

    from sv_client import (SandboxVerificationConfig, SandboxVerificationError,
                           run_verification_sandbox)

    provider = {"url": "http://127.0.0.1:8080", "token": "secret"}
    try:
        result = run_verification_sandbox(
            provider, SandboxVerificationConfig(python="python3"),
            files={"sandbox_runner.py": RUNNER}, request={"answer": 42},
            exec_timeout_s=30)
    except SandboxVerificationError as e:
        ...  # e.failure_kind: provider_unavailable | verifier_error | invalid_request

`run_verification_sandbox_async` is the same as a coroutine (asyncio
streams, no threads), so thousands can be awaited at once.
`verify` / `verify_async` are NeMo Gym-style: they never raise for a failed
verification and return `{"reward": 0.0, "mask_sample": True,
"failure_kind": ..., ...}` instead, so the trainer masks the sample.

Failure kinds (the seed's):
  provider_unavailable  the sandbox could not be created or never got ready;
                        the provider failed; or sv-serve could not be reached
                        or refused the call (connection refused or reset,
                        timeout, 401, 429 overloaded, 5xx, a reply that is
                        not sv-serve's): retry or mask, never score it
  verifier_error        the runner failed (non-zero exit, overran its
                        deadline), result.json was missing or rejected, or
                        `parse_result` raised
  invalid_request       the submission cannot be graded (sv-serve's 400, or
                        arguments that are not JSON)
"""

import asyncio
import dataclasses
import http.client
import json
import socket
import ssl
import urllib.parse
import uuid
from typing import Any, Callable, Dict, Optional

__all__ = [
    "SandboxVerificationConfig",
    "SandboxVerificationError",
    "run_verification_sandbox",
    "run_verification_sandbox_async",
    "verify",
    "verify_async",
    "failure_response",
]

PROVIDER_UNAVAILABLE = "provider_unavailable"
VERIFIER_ERROR = "verifier_error"
INVALID_REQUEST = "invalid_request"

# What sv-serve's verification deadlines add up to besides ready and exec
# (upload, exec grace, download, stop: its defaults) plus a margin; the HTTP
# exchange is bounded by ready_timeout_s + exec_timeout_s + this.
_HTTP_SLACK_S = 60 + 10 + 60 + 60 + 60


@dataclasses.dataclass
class SandboxVerificationConfig:
    """How the sandbox is made and the runner started (the seed's fields)."""

    env: Dict[str, str] = dataclasses.field(default_factory=dict)
    image: str = ""
    metadata: Dict[str, Any] = dataclasses.field(default_factory=dict)
    provider_options: Dict[str, Any] = dataclasses.field(default_factory=dict)
    python: str = "python3"
    ready_timeout_s: float = 600.0
    resources: Dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> Dict[str, Any]:
        out = {"env": dict(self.env), "metadata": dict(self.metadata),
               "provider_options": dict(self.provider_options),
               "python": self.python,
               "ready_timeout_s": float(self.ready_timeout_s),
               "resources": dict(self.resources)}
        if self.image:
            out["image"] = self.image
        return out


class SandboxVerificationError(Exception):
    """A verification that produced no result. Mask the sample.

    `failure_kind` and `message` as in the seed; `state` (validate, queue,
    create, ready, upload, exec, download, parse, stop), `cause` (error,
    timeout, crash, invalid_result, node_down, overloaded, ...) and
    `log_tail` (the runner log's last 2,000 bytes, where it ran) as sv-serve
    reports them; `http_status` when sv-serve answered.
    """

    def __init__(self, failure_kind: str, message: str, state: str = "",
                 cause: str = "", log_tail: str = "",
                 http_status: Optional[int] = None):
        super().__init__(message)
        self.failure_kind = failure_kind
        self.message = message
        self.state = state
        self.cause = cause
        self.log_tail = log_tail
        self.http_status = http_status

    def __repr__(self):
        return (f"SandboxVerificationError({self.failure_kind!r}, "
                f"{self.message!r}, state={self.state!r}, "
                f"cause={self.cause!r})")


def failure_response(error: SandboxVerificationError) -> Dict[str, Any]:
    """A NeMo Gym verify response for a failed verification: reward 0,
    masked, with the failure's kind and reason."""
    return {"reward": 0.0, "mask_sample": True,
            "failure_kind": error.failure_kind, "reason": error.message,
            "state": error.state, "cause": error.cause}


# -- one exchange, in pieces shared by both forms ------------------------------

class _Target:
    def __init__(self, provider: Dict[str, Any]):
        if not isinstance(provider, dict) or not provider.get("url"):
            raise SandboxVerificationError(
                INVALID_REQUEST, "provider: expected {\"url\": ..., "
                "\"token\": ...}", state="validate", cause="invalid_request")
        url = urllib.parse.urlsplit(provider["url"])
        if url.scheme not in ("http", "https") or not url.hostname:
            raise SandboxVerificationError(
                INVALID_REQUEST, f"provider url {provider['url']!r}: expected "
                "http://HOST:PORT or https://HOST:PORT", state="validate",
                cause="invalid_request")
        self.tls = url.scheme == "https"
        self.host = url.hostname
        self.port = url.port or (443 if self.tls else 80)
        self.path = url.path.rstrip("/") + "/v1/verify"
        self.token = provider.get("token")

    def headers(self, body: bytes) -> Dict[str, str]:
        h = {"Content-Type": "application/json",
             "Content-Length": str(len(body)), "Host": self.host}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        return h


def _body(config, files, request, exec_timeout_s, metadata, work_dir):
    cfg = config if config is not None else SandboxVerificationConfig()
    if isinstance(cfg, SandboxVerificationConfig):
        cfg = cfg.to_json()
    line = {"id": "py-" + uuid.uuid4().hex, "files": files,
            "request": request, "exec_timeout_s": float(exec_timeout_s),
            "metadata": metadata or {}, "config": cfg}
    if work_dir is not None:
        line["work_dir"] = work_dir
    try:
        return json.dumps(line).encode()
    except (TypeError, ValueError) as e:
        raise SandboxVerificationError(
            INVALID_REQUEST, f"submission is not JSON: {e}", state="validate",
            cause="invalid_request")


def _deadline_s(config, exec_timeout_s):
    ready = (config.ready_timeout_s
             if isinstance(config, SandboxVerificationConfig)
             else (config or {}).get("ready_timeout_s", 600.0))
    return float(ready) + float(exec_timeout_s) + _HTTP_SLACK_S


def _unavailable(message, cause="error", status=None):
    return SandboxVerificationError(PROVIDER_UNAVAILABLE, message,
                                    state="queue", cause=cause,
                                    http_status=status)


def _outcome(status: int, body: bytes):
    """The parsed result, or the error to raise, from sv-serve's answer."""
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    if status == 401:
        return _unavailable("sv-serve refused the bearer token (401)",
                            status=status)
    failure = doc.get("failure") if isinstance(doc, dict) else None
    if status in (200, 400, 429) and isinstance(doc, dict) and "ok" in doc:
        if doc["ok"] is True and status == 200:
            return doc.get("result")
        if isinstance(failure, dict):
            return SandboxVerificationError(
                failure.get("failure_kind", PROVIDER_UNAVAILABLE),
                failure.get("message", ""), failure.get("state", ""),
                failure.get("cause", ""), failure.get("log_tail", ""),
                status)
    if status == 400:
        reason = doc.get("error") if isinstance(doc, dict) else None
        return SandboxVerificationError(
            INVALID_REQUEST, f"sv-serve rejected the request: "
            f"{reason or body[:200]!r}", state="validate",
            cause="invalid_request", http_status=status)
    if status == 429:
        return _unavailable("sv-serve is overloaded (429)", "overloaded",
                            status)
    if status >= 500:
        return _unavailable(f"sv-serve answered {status}: "
                            f"{body[:200].decode(errors='replace')}",
                            status=status)
    return _unavailable(f"unexpected answer from sv-serve: {status} "
                        f"{body[:200]!r}", status=status)


def _parsed(result, parse_result):
    text = json.dumps(result)
    if parse_result is None:
        return json.loads(text)
    try:
        return parse_result(text)
    except Exception as e:  # the caller's parser rejected result.json
        raise SandboxVerificationError(
            VERIFIER_ERROR, f"parse_result rejected result.json: "
            f"{type(e).__name__}: {e}", state="parse",
            cause="invalid_result") from e


def _finish(status, body, parse_result):
    out = _outcome(status, body)
    if isinstance(out, SandboxVerificationError):
        raise out
    return _parsed(out, parse_result)


# -- the seed's function -------------------------------------------------------

def run_verification_sandbox(provider: Dict[str, Any],
                             config: Optional[SandboxVerificationConfig],
                             files: Dict[str, str], request: Any,
                             exec_timeout_s: float = 30.0,
                             parse_result: Optional[Callable[[str], Any]] = None,
                             metadata: Optional[Dict[str, Any]] = None,
                             work_dir: Optional[str] = "calls") -> Any:
    """Grades `files` (which must hold `sandbox_runner.py`) with `request` in
    a fresh sandbox; runs `<python> sandbox_runner.py request.json
    result.json` in a per-call subdirectory of `work_dir` under
    `exec_timeout_s`; returns `parse_result(text of result.json)` (default:
    `json.loads`). Raises `SandboxVerificationError`; blocks until done."""
    target = _Target(provider)
    body = _body(config, files, request, exec_timeout_s, metadata, work_dir)
    timeout = _deadline_s(config, exec_timeout_s)
    if target.tls:
        conn = http.client.HTTPSConnection(
            target.host, target.port, timeout=timeout,
            context=ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(target.host, target.port,
                                          timeout=timeout)
    try:
        conn.request("POST", target.path, body=body,
                     headers=target.headers(body))
        r = conn.getresponse()
        status, data = r.status, r.read()
    except socket.timeout:
        raise _unavailable(f"sv-serve did not answer within {timeout:.0f} s",
                           "timeout") from None
    except (OSError, http.client.HTTPException) as e:
        raise _unavailable(f"cannot reach sv-serve at {target.host}:"
                           f"{target.port}: {type(e).__name__}: {e}") from e
    finally:
        conn.close()
    return _finish(status, data, parse_result)


async def _exchange(target, body):
    ctx = ssl.create_default_context() if target.tls else None
    reader, writer = await asyncio.open_connection(target.host, target.port,
                                                   ssl=ctx)
    try:
        head = f"POST {target.path} HTTP/1.1\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in target.headers(body).items())
        writer.write((head + "Connection: close\r\n\r\n").encode() + body)
        await writer.drain()
        status_line = await reader.readline()
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
            raise http.client.BadStatusLine(repr(status_line[:100]))
        status = int(parts[1])
        length, chunked = None, False
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            name, value = name.strip().lower(), value.strip()
            if name == "content-length":
                length = int(value)
            elif name == "transfer-encoding" and "chunked" in value.lower():
                chunked = True
        if chunked:
            data = b""
            while True:
                size = int((await reader.readline()).split(b";")[0], 16)
                if size == 0:
                    break
                data += await reader.readexactly(size)
                await reader.readexactly(2)
        elif length is not None:
            data = await reader.readexactly(length)
        else:
            data = await reader.read()
        return status, data
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except OSError:
            pass


async def run_verification_sandbox_async(
        provider: Dict[str, Any], config: Optional[SandboxVerificationConfig],
        files: Dict[str, str], request: Any, exec_timeout_s: float = 30.0,
        parse_result: Optional[Callable[[str], Any]] = None,
        metadata: Optional[Dict[str, Any]] = None,
        work_dir: Optional[str] = "calls") -> Any:
    """`run_verification_sandbox` as a coroutine (asyncio streams)."""
    target = _Target(provider)
    body = _body(config, files, request, exec_timeout_s, metadata, work_dir)
    timeout = _deadline_s(config, exec_timeout_s)
    try:
        status, data = await asyncio.wait_for(
            _exchange(target, body), timeout)
    except asyncio.TimeoutError:
        raise _unavailable(f"sv-serve did not answer within {timeout:.0f} s",
                           "timeout") from None
    except (OSError, ValueError, asyncio.IncompleteReadError,
            http.client.HTTPException) as e:
        raise _unavailable(f"cannot reach sv-serve at {target.host}:"
                           f"{target.port}: {type(e).__name__}: {e}") from e
    return _finish(status, data, parse_result)


# -- NeMo Gym-style verify -----------------------------------------------------

def _verify_response(result):
    if isinstance(result, dict):
        out = dict(result)
        out["reward"] = float(result.get("reward", 0.0))
    else:
        out = {"reward": float(result)}
    out["mask_sample"] = False
    return out


def _no_reward(e):
    return SandboxVerificationError(
        VERIFIER_ERROR, f"result has no numeric reward: {e}", state="parse",
        cause="invalid_result")


def verify(provider, config, files, request, exec_timeout_s=30.0,
           parse_result=None, metadata=None, work_dir="calls"):
    """A verify response: the result with `reward` (a float, or the result
    itself when `parse_result` returns a number) and `mask_sample: False`,
    or `failure_response(error)` when the verification failed."""
    try:
        return _verify_response(run_verification_sandbox(
            provider, config, files, request, exec_timeout_s, parse_result,
            metadata, work_dir))
    except SandboxVerificationError as e:
        return failure_response(e)
    except (TypeError, ValueError) as e:
        return failure_response(_no_reward(e))


async def verify_async(provider, config, files, request, exec_timeout_s=30.0,
                       parse_result=None, metadata=None, work_dir="calls"):
    """`verify` as a coroutine."""
    try:
        return _verify_response(await run_verification_sandbox_async(
            provider, config, files, request, exec_timeout_s, parse_result,
            metadata, work_dir))
    except SandboxVerificationError as e:
        return failure_response(e)
    except (TypeError, ValueError) as e:
        return failure_response(_no_reward(e))
