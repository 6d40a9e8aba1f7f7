"""The life of one verification, top to bottom, as the C++ verification
actor lives it (actors/verification.cpp):

    create -> ready -> upload -> exec -> download -> stop     (parse after)

Each state has its deadline and its failure mapping; stop runs exactly
once when create returned a sandbox, and its own failure never replaces
the outcome (it is logged; sv-serve's TTL reaps the sandbox).
"""

from __future__ import annotations

import asyncio
import logging
import posixpath
from typing import Any, Dict, Mapping, Optional

from .drivers import SandboxNotReady
from .errors import ConfigurationError, SvServeError

LOGGER = logging.getLogger("sv_client")

# The seed's constants: a sandbox lives at most ready + exec + this margin
# (a leaked one dies on its own); a failure carries the log's last bytes.
SANDBOX_TTL_MARGIN_S = 300.0
LOG_TAIL_BYTES = 2000


class SandboxVerificationError(Exception):
    """A verification that produced no result: mask the sample.

    ``failure_kind`` and ``message`` as in the seed: ``provider_unavailable``
    (the sandbox could not be made or run, sv-serve failed or was
    unreachable), ``verifier_error`` (the runner failed, overran its
    deadline, wrote no usable result.json, or ``parse_result`` raised) or
    ``invalid_request`` (the submission cannot be graded). Also ``state``
    (validate, create, ready, upload, exec, download, parse), ``cause``
    (error, timeout, oom, killed, overloaded, invalid_result,
    invalid_request), ``log_tail`` (the runner log's last 2,000 bytes,
    where it ran) and ``http_status`` (when sv-serve answered)."""

    def __init__(self, failure_kind: str, message: str, *, state: str = "",
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


def fail(kind: str, state: str, cause: str, message: str,
         log_tail: str = "", status: Optional[int] = None):
    return SandboxVerificationError(kind, message, state=state, cause=cause,
                                    log_tail=log_tail, http_status=status)


def provider_failed(state: str, err: BaseException):
    """A failure of the driver's call in ``state``: sv-serve's 400 (a field
    of the request it refused) is ``invalid_request`` at create and upload;
    every other failure is the provider's (``provider_unavailable``)."""
    if isinstance(err, SvServeError):
        if err.status == 400 and state in ("create", "upload"):
            return fail("invalid_request", state, "invalid_request",
                        f"{state} refused: {err.message}", status=400)
        cause = "timeout" if err.code == "timeout" or err.status == 504 else \
            "overloaded" if err.status == 429 else "error"
        return fail("provider_unavailable", state, cause,
                    f"{state} failed: {err}", status=err.status or None)
    if isinstance(err, asyncio.TimeoutError):
        return fail("provider_unavailable", state, "timeout",
                    f"{state} did not finish within its deadline")
    if isinstance(err, ValueError) and state in ("create", "upload"):
        return fail("invalid_request", state, "invalid_request",
                    f"{state} refused: {err}")
    return fail("provider_unavailable", state, "error",
                f"{state} failed: {type(err).__name__}: {err}")


class Call:
    """One verification on one driver (see the module)."""

    def __init__(self, driver: Any, config: Any, exec_timeout_s: float,
                 call_dir: str):
        self.driver = driver
        self.cfg = config
        self.exec_timeout_s = exec_timeout_s
        self.call_dir = call_dir

    def spec(self, metadata: Mapping[str, Any]) -> Dict[str, Any]:
        cfg = self.cfg
        spec: Dict[str, Any] = {
            "ttl_s": cfg.ready_timeout_s + self.exec_timeout_s +
            SANDBOX_TTL_MARGIN_S,
            "ready_timeout_s": cfg.ready_timeout_s,
            "env": dict(cfg.env), "metadata": dict(metadata)}
        if cfg.image:
            spec["image"] = cfg.image
        for key in ("resources", "provider_options"):
            if getattr(cfg, key):
                spec[key] = dict(getattr(cfg, key))
        return spec

    def _in(self, name: str) -> str:
        return posixpath.join(self.call_dir, name)

    async def run(self, spec, files, request_text) -> str:
        """The text of result.json; raises ``SandboxVerificationError``."""
        handle = await self._create(spec)
        try:
            files["request.json"] = request_text
            await self._step("upload", self.cfg.upload_timeout_s,
                             self.driver.upload(handle, self.call_dir, files))
            await self._exec(handle)
            data = await self._download(handle)
        finally:
            await self._stop(handle)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise fail("verifier_error", "download", "invalid_result",
                       f"result.json is not UTF-8 text: {e}") from e

    async def _step(self, state, timeout_s, work):
        try:
            return await asyncio.wait_for(work, timeout_s)
        except ConfigurationError:
            raise
        except Exception as e:  # a provider object may raise anything
            raise provider_failed(state, e) from e

    async def _create(self, spec):
        try:
            return await self.driver.create(spec, self.cfg.ready_timeout_s)
        except SandboxNotReady as e:
            raise fail("provider_unavailable", "ready",
                       "timeout" if e.timeout else "error", str(e)) from e
        except ConfigurationError:
            raise
        except Exception as e:  # a provider object may raise anything
            raise provider_failed("create", e) from e

    async def _exec(self, handle) -> None:
        argv = [self.cfg.python, "sandbox_runner.py", "request.json",
                "result.json"]
        work = self.driver.run(handle, argv, self.call_dir, dict(self.cfg.env),
                               self.exec_timeout_s, self._in("runner.log"),
                               self.cfg.exec_grace_s)
        res = await self._step("exec", self.exec_timeout_s +
                               self.cfg.exec_grace_s + 1.0, work)
        self._judge(res)

    def _judge(self, res: Dict[str, Any]) -> None:
        """What an exec result means for the verification."""
        tail = str(res.get("log_tail") or "")[-LOG_TAIL_BYTES:]
        kind = res.get("error_type", "none")
        note = f": {res['message']}" if res.get("message") else ""
        code = res.get("return_code")
        if kind == "none" and code == 0:
            return
        verdicts = {
            "none": ("verifier_error", "error",
                     f"runner exited with status {code}{note}"),
            "timeout": ("verifier_error", "timeout", f"runner overran its "
                        f"{self.exec_timeout_s:g} s deadline{note}"),
            "oom": ("verifier_error", "oom", f"runner killed for memory{note}"),
            "killed": ("verifier_error", "killed",
                       f"runner killed by a signal{note}"),
            "runtime": ("verifier_error", "error", f"runner failed{note}"),
        }
        failure_kind, cause, message = verdicts.get(kind, (
            "provider_unavailable", "error",
            f"sandbox failed while running the runner{note}"))
        raise fail(failure_kind, "exec", cause, message, tail)

    async def _download(self, handle) -> bytes:
        try:
            return await asyncio.wait_for(
                self.driver.read(handle, self._in("result.json")),
                self.cfg.download_timeout_s)
        except SvServeError as e:
            if e.code == "not_found":
                raise fail("verifier_error", "download", "invalid_result",
                           "runner wrote no result.json") from e
            if e.code in ("not_regular_file", "too_large", "invalid_path"):
                raise fail("verifier_error", "download", "invalid_result",
                           f"result.json: {e.message}") from e
            raise provider_failed("download", e) from e
        except ConfigurationError:
            raise
        except Exception as e:  # a provider object may raise anything
            raise provider_failed("download", e) from e

    async def _stop(self, handle) -> None:
        """Exactly once; bounded; survives the caller's cancellation (the
        stop goes on behind it)."""
        stopping = asyncio.ensure_future(asyncio.wait_for(
            self.driver.stop(handle), self.cfg.stop_timeout_s))
        try:
            await asyncio.shield(stopping)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the grade stands; the TTL reaps it
            LOGGER.warning("sv_client: stopping sandbox %s failed (%s); its "
                           "TTL reaps it", getattr(handle, "sandbox_id",
                                                   handle), e)
