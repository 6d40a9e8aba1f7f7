"""The seed's function: one submission graded in a fresh, single-use sandbox.

    result = await run_verification_sandbox(
        {"sv_serve": {"url": "http://127.0.0.1:8080", "token_file": "t"}},
        SandboxVerificationConfig(python="python3"),
        files={"sandbox_runner.py": RUNNER}, request={"answer": 42},
        exec_timeout_s=30, parse_result=json.loads)

The flow runs here, on the client, through the sandbox API (create, ready,
upload, exec, download, stop), so ``parse_result`` gets ``result.json``'s
text exactly as the runner wrote it. Failures are
``SandboxVerificationError(failure_kind, message)``; a client set up wrong
raises ``ConfigurationError`` instead (never a sample to mask).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import posixpath
import uuid
from typing import Any, Callable, Dict, Mapping, Optional

from ._sync import run_blocking
from .errors import ConfigurationError
from .steps import Call, SandboxVerificationError, fail
from .targets import open_target

LOGGER = logging.getLogger("sv_client")

DEFAULT_WORK_DIR = "/sandbox"
RUNNER_FILE = "sandbox_runner.py"
RESERVED_FILES = ("request.json", "result.json", "runner.log")
MAX_FILES = 10000


@dataclasses.dataclass
class SandboxVerificationConfig:
    """How the sandbox is made and the runner started: the seed's fields
    (``env`` ... ``resources``), then the per-state deadlines of
    sv-grade's ``config`` (seconds)."""

    env: Dict[str, str] = dataclasses.field(default_factory=dict)
    image: str = ""
    metadata: Dict[str, Any] = dataclasses.field(default_factory=dict)
    provider_options: Dict[str, Any] = dataclasses.field(default_factory=dict)
    python: str = "python3"
    ready_timeout_s: float = 600.0
    resources: Dict[str, Any] = dataclasses.field(default_factory=dict)
    upload_timeout_s: float = 60.0
    download_timeout_s: float = 60.0
    stop_timeout_s: float = 60.0
    exec_grace_s: float = 10.0

    @classmethod
    def of(cls, config: Any) -> "SandboxVerificationConfig":
        """``config`` as given: None (the defaults), an instance, or a
        mapping of its fields (unknown keys refused by name)."""
        if config is None:
            return cls()
        if isinstance(config, cls):
            return config
        if isinstance(config, Mapping):
            known = {f.name for f in dataclasses.fields(cls)}
            unknown = sorted(set(config) - known)
            if unknown:
                raise ConfigurationError(
                    "settings", f"config: unknown keys {unknown}; allowed: "
                    f"{sorted(known)}")
            return cls(**dict(config))
        raise ConfigurationError("settings", "config: expected a "
                                 "SandboxVerificationConfig or a mapping, "
                                 f"not {type(config).__name__}")

    def check(self) -> None:
        for name in ("ready_timeout_s", "upload_timeout_s",
                     "download_timeout_s", "stop_timeout_s", "exec_grace_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) \
                    or not 0 < value <= 604800:
                raise ConfigurationError("settings", f"config.{name}: must be "
                                         "seconds in (0, 604800]")
        if not isinstance(self.python, str) or not self.python:
            raise ConfigurationError("settings",
                                     "config.python: must not be empty")
        for name in ("env", "metadata", "provider_options", "resources"):
            if not isinstance(getattr(self, name), Mapping):
                raise ConfigurationError("settings",
                                         f"config.{name}: expected a mapping")


def _path_problem(path: str) -> str:
    if not isinstance(path, str) or not path:
        return "is empty"
    if "\0" in path:
        return "holds a NUL byte"
    if posixpath.isabs(path):
        return "is absolute"
    if any(part in ("", ".", "..") for part in path.split("/")):
        return "has an empty, '.' or '..' component"
    return ""


def _check_submission(files, exec_timeout_s, work_dir) -> None:
    def invalid(message):
        return SandboxVerificationError("invalid_request", message,
                                        state="validate",
                                        cause="invalid_request")
    if not isinstance(files, Mapping) or RUNNER_FILE not in files:
        raise invalid(f"files: missing {RUNNER_FILE}")
    if len(files) > MAX_FILES:
        raise invalid(f"files: more than {MAX_FILES}")
    for path, content in files.items():
        why = _path_problem(path)
        if why:
            raise invalid(f"files: path {path!r} {why}")
        if path in RESERVED_FILES:
            raise invalid(f"files: {path!r} is reserved for the call itself")
        if not isinstance(content, (str, bytes, bytearray)):
            raise invalid(f"files: {path!r} must be text (str) or bytes")
    if not isinstance(exec_timeout_s, (int, float)) or \
            isinstance(exec_timeout_s, bool) or \
            not 0.001 <= exec_timeout_s <= 604800:
        raise invalid("exec_timeout_s: must be seconds in [0.001, 604800]")
    norm = posixpath.normpath(work_dir) if isinstance(work_dir, str) else ""
    if not norm or ".." in work_dir.split("/") or "\0" in work_dir:
        raise invalid(f"work_dir: {work_dir!r} must be a directory in the "
                      "sandbox (absolute, or relative to its workdir), "
                      "without '..'")


def _metadata(default: Mapping, call: Optional[Mapping], config: Mapping):
    """The provider block's default_metadata, then the call's, then
    config.metadata (later keys win), as in the seed."""
    if call is not None and not isinstance(call, Mapping):
        raise SandboxVerificationError("invalid_request",
                                       "metadata: expected a mapping",
                                       state="validate",
                                       cause="invalid_request")
    merged = dict(default)
    merged.update(call or {})
    merged.update(config)
    return merged


async def run_verification_sandbox(
        provider: Any, config: Any, files: Mapping[str, Any], request: Any,
        exec_timeout_s: float, parse_result: Optional[Callable[[str], Any]],
        metadata: Optional[Mapping[str, Any]] = None,
        work_dir: str = DEFAULT_WORK_DIR) -> Any:
    """Grades ``files`` (with ``sandbox_runner.py``) on ``request`` in a
    fresh sandbox: runs ``<config.python> sandbox_runner.py request.json
    result.json`` in a fresh subdirectory of ``work_dir`` under
    ``exec_timeout_s``, and returns ``parse_result(text of result.json)``
    (``json.loads`` when None). Raises ``SandboxVerificationError``; a
    provider argument or config that is wrong raises ``ConfigurationError``,
    as do a token sv-serve refuses, a URL that is not sv-serve, and a TLS
    mismatch. The sandbox is stopped once, whatever happened."""
    cfg = SandboxVerificationConfig.of(config)
    cfg.check()
    if parse_result is not None and not callable(parse_result):
        raise ConfigurationError("settings", "parse_result must be callable")
    _check_submission(files, exec_timeout_s, work_dir)
    try:
        request_text = json.dumps(request)
    except (TypeError, ValueError) as e:
        raise SandboxVerificationError(
            "invalid_request", f"request is not JSON: {e}", state="validate",
            cause="invalid_request") from e
    driver, default_metadata = open_target(provider)
    try:
        call = Call(driver, cfg, float(exec_timeout_s),
                    posixpath.join(work_dir, "call-" + uuid.uuid4().hex[:16]))
        spec = call.spec(_metadata(default_metadata, metadata, cfg.metadata))
        text = await call.run(spec, dict(files), request_text)
    finally:
        try:
            await driver.release()
        except Exception as e:  # a provider's aclose: the outcome stands
            LOGGER.warning("sv_client: closing the provider failed: %s", e)
    return _parsed(text, parse_result)


def _parsed(text: str, parse_result):
    try:
        return (parse_result or json.loads)(text)
    except Exception as e:  # the caller's parser rejected result.json
        raise fail("verifier_error", "parse", "invalid_result",
                   f"parse_result rejected result.json: "
                   f"{type(e).__name__}: {e}") from e


def run_verification_sandbox_sync(provider, config, files, request,
                                  exec_timeout_s, parse_result,
                                  metadata=None, work_dir=DEFAULT_WORK_DIR):
    """``run_verification_sandbox`` for code without an event loop: blocks
    until done (the call runs on the package's own event loop thread)."""
    return run_blocking(lambda: run_verification_sandbox(
        provider, config, files, request, exec_timeout_s, parse_result,
        metadata, work_dir))


# -- NeMo Gym verify responses ---------------------------------------------------

def failure_response(error: SandboxVerificationError) -> Dict[str, Any]:
    """A NeMo Gym verify response for a verification with no result: reward
    0.0, masked where every trainer reads it (top-level ``mask_sample`` and
    NeMo-RL's ``instance_config.mask_sample``), with the failure's kind,
    reason, state and cause."""
    return {"reward": 0.0, "mask_sample": True,
            "instance_config": {"mask_sample": True},
            "failure_kind": error.failure_kind,
            "failure_reason": error.message,
            "state": error.state, "cause": error.cause}


def _success_response(result: Any) -> Dict[str, Any]:
    if isinstance(result, Mapping):
        out = dict(result)
        reward = result.get("reward")
    else:
        out, reward = {}, result
    if isinstance(reward, bool) or not isinstance(reward, (int, float)):
        raise fail("verifier_error", "parse", "invalid_result",
                   f"the result has no numeric reward: {reward!r}")
    out["reward"] = float(reward)
    out["mask_sample"] = bool(out.get("mask_sample", False))
    instance = out.get("instance_config")
    instance = dict(instance) if isinstance(instance, Mapping) else {}
    instance.setdefault("mask_sample", out["mask_sample"])
    out["instance_config"] = instance
    return out


async def verify(provider, config, files, request, exec_timeout_s,
                 parse_result=None, metadata=None, work_dir=DEFAULT_WORK_DIR):
    """A NeMo Gym verify response: the result (a mapping with a numeric
    ``reward``, or a number) with ``reward`` as a float, ``mask_sample``
    and ``instance_config.mask_sample`` false; on a failed verification
    ``failure_response(error)``. Never masks a ``ConfigurationError``: it
    is raised, as every call would fail the same way."""
    try:
        return _success_response(await run_verification_sandbox(
            provider, config, files, request, exec_timeout_s, parse_result,
            metadata, work_dir))
    except SandboxVerificationError as e:
        return failure_response(e)


def verify_sync(provider, config, files, request, exec_timeout_s,
                parse_result=None, metadata=None, work_dir=DEFAULT_WORK_DIR):
    """``verify`` for code without an event loop."""
    return run_blocking(lambda: verify(
        provider, config, files, request, exec_timeout_s, parse_result,
        metadata, work_dir))


__all__ = ["SandboxVerificationConfig", "SandboxVerificationError",
           "run_verification_sandbox", "run_verification_sandbox_sync",
           "verify", "verify_sync", "failure_response", "DEFAULT_WORK_DIR"]
