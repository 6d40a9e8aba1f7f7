"""NeMo Gym's provider types: the real ones when NeMo Gym is installed
(``nemo_gym.sandbox.providers.base``), else stand-ins with the same names,
fields and exception hierarchy, so code written against either runs
unchanged and ``except SandboxCreateError`` catches ours."""

from __future__ import annotations

import dataclasses
from enum import Enum
from typing import Any, Dict, List, Optional

try:
    from nemo_gym.sandbox.providers import base as _base  # type: ignore
except ImportError:  # NeMo Gym is not installed
    _base = None

NEMO_GYM_INSTALLED = _base is not None


class _StandIns:
    """The stand-ins (see the module's docstring)."""

    class SandboxStatus(str, Enum):
        STARTING = "starting"
        RUNNING = "running"
        PAUSED = "paused"
        STOPPED = "stopped"
        ERROR = "error"
        UNKNOWN = "unknown"

    @dataclasses.dataclass
    class SandboxHandle:
        sandbox_id: str
        provider_name: str
        raw: Any

    @dataclasses.dataclass(frozen=True)
    class SandboxExecResult:
        stdout: Optional[str]
        stderr: Optional[str]
        return_code: int
        error_type: Optional[str] = None

    @dataclasses.dataclass(frozen=True)
    class SandboxResources:
        cpu: Optional[float] = None
        memory_mib: Optional[int] = None
        disk_gib: Optional[int] = None
        gpu: Optional[int] = None
        gpu_type: Optional[str] = None

    @dataclasses.dataclass(frozen=True)
    class SandboxSpec:
        image: Optional[str] = None
        ttl_s: Optional[float] = None
        ready_timeout_s: Optional[float] = None
        workdir: Optional[str] = None
        env: Dict[str, str] = dataclasses.field(default_factory=dict)
        files: Dict[str, str] = dataclasses.field(default_factory=dict)
        metadata: Dict[str, str] = dataclasses.field(default_factory=dict)
        resources: Any = dataclasses.field(default_factory=dict)
        entrypoint: Optional[List[str]] = None
        provider_options: Dict[str, Any] = dataclasses.field(
            default_factory=dict)
        ports: tuple = ()

    class SandboxCreateError(RuntimeError):
        """Raised when a provider cannot create a sandbox."""

    class SandboxCreateVerificationError(SandboxCreateError):
        """Raised when a newly-created sandbox fails readiness checks."""


def _pick(name: str):
    real = getattr(_base, name, None) if _base is not None else None
    return real if real is not None else getattr(_StandIns, name)


SandboxStatus = _pick("SandboxStatus")
SandboxHandle = _pick("SandboxHandle")
SandboxExecResult = _pick("SandboxExecResult")
SandboxResources = _pick("SandboxResources")
SandboxSpec = _pick("SandboxSpec")
SandboxCreateError = _pick("SandboxCreateError")
SandboxCreateVerificationError = _pick("SandboxCreateVerificationError")
if not issubclass(SandboxCreateVerificationError, SandboxCreateError):
    # An older NeMo Gym without it: ours, under the real base.
    class SandboxCreateVerificationError(SandboxCreateError):  # noqa: F811
        """Raised when a newly-created sandbox fails readiness checks."""
