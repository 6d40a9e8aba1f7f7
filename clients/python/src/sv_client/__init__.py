"""sv-serve from Python (standard library only).

- The seed's function: ``run_verification_sandbox`` (async) and
  ``run_verification_sandbox_sync``, ``SandboxVerificationConfig``,
  ``SandboxVerificationError``; NeMo Gym verify responses from ``verify`` /
  ``verify_sync`` (failures masked where trainers read them).
- NeMo Gym's sandbox provider: ``SvServeProvider`` (entry point ``sv_serve``
  of ``nemo_gym.sandbox_providers``).
- The sandbox API itself: ``SandboxClient``.
- ``ConfigurationError``: a client set up wrong; raised, never masked.

Reference: docs/python.md.
"""

from .errors import ConfigurationError, SvServeError
from .nemo_gym import (SANDBOX_RUNTIME_RETURN_CODE, SvServeConfigurationError,
                       SvServeProvider, SvServeUnsupportedError, register)
from .sandboxes import SandboxClient
from .verification import (DEFAULT_WORK_DIR, SandboxVerificationConfig,
                           SandboxVerificationError, failure_response,
                           run_verification_sandbox,
                           run_verification_sandbox_sync, verify, verify_sync)

__version__ = "0.1.0"

__all__ = [
    "ConfigurationError", "DEFAULT_WORK_DIR", "SANDBOX_RUNTIME_RETURN_CODE",
    "SandboxClient", "SandboxVerificationConfig", "SandboxVerificationError",
    "SvServeConfigurationError", "SvServeError", "SvServeProvider",
    "SvServeUnsupportedError", "failure_response", "register",
    "run_verification_sandbox", "run_verification_sandbox_sync", "verify",
    "verify_sync",
]
