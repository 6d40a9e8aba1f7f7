"""What the seed's ``provider`` argument may be, and the driver for each.

- a provider block as NeMo Gym writes it: ``{"sv_serve": {"url": ...}}``,
  with an optional ``default_metadata`` beside the provider key, or any
  other provider name NeMo Gym's registry (or an installed entry point of
  ``nemo_gym.sandbox_providers``) knows;
- that block under a name, as a YAML file binds it:
  ``{"sandbox": {"sv_serve": {...}, "default_metadata": {...}}}``;
- sv-serve's settings alone: ``{"url": ..., "token": ...}`` (any
  ``SvServeProvider`` setting);
- a provider object: an ``SvServeProvider``, a ``SandboxClient``, or any
  object with NeMo Gym's provider protocol.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple

from ._nemo_types import SandboxSpec
from .drivers import ProviderDriver, SvServeDriver
from .errors import ConfigurationError
from .nemo_gym import PROVIDER_NAME, SvServeProvider
from .sandboxes import SandboxClient

ENTRY_POINT_GROUP = "nemo_gym.sandbox_providers"
DEFAULT_METADATA_KEY = "default_metadata"
_PROTOCOL = ("create", "exec", "upload_file", "download_file", "close")


def _settings_error(message: str) -> ConfigurationError:
    return ConfigurationError("settings", f"provider: {message}")


def _entry_point_class(name: str):
    from importlib.metadata import entry_points
    try:
        found = entry_points(group=ENTRY_POINT_GROUP)
    except TypeError:  # Python < 3.10: a dict of groups
        found = entry_points().get(ENTRY_POINT_GROUP, [])
    matches = [ep for ep in found if ep.name == name]
    if len(matches) > 1:
        raise _settings_error(f"two installed packages publish the provider "
                              f"{name!r}; uninstall one")
    return matches[0].load() if matches else None


def provider_class(name: str):
    """The class NeMo Gym would make for ``name`` (its registry first, when
    NeMo Gym is installed; else the entry points), or None."""
    if name == PROVIDER_NAME:
        return SvServeProvider
    try:
        from nemo_gym.sandbox.providers.registry import (  # type: ignore
            get_provider_class)
    except ImportError:
        return _entry_point_class(name)
    try:
        return get_provider_class(name)
    except ValueError:
        return None


def _instance(cls, name: str, settings: Any):
    if settings is None:
        settings = {}
    if not isinstance(settings, Mapping):
        raise _settings_error(f"the settings of {name!r} must be a mapping, "
                              f"not {type(settings).__name__}")
    try:
        return cls(**dict(settings))
    except TypeError as e:
        raise _settings_error(f"{name}: {e}") from e


def driver_of_object(provider: Any, owned: bool):
    if isinstance(provider, SvServeProvider):
        return SvServeDriver(provider.client, owned)
    if isinstance(provider, SandboxClient):
        return SvServeDriver(provider, owned)
    if all(callable(getattr(provider, m, None)) for m in _PROTOCOL):
        return ProviderDriver(provider, owned, SandboxSpec)
    return None


def _metadata_of(block: Mapping[str, Any]) -> Dict[str, Any]:
    metadata = block.get(DEFAULT_METADATA_KEY) or {}
    if not isinstance(metadata, Mapping):
        raise _settings_error(f"{DEFAULT_METADATA_KEY} must be a mapping")
    return dict(metadata)


def _from_block(block: Mapping[str, Any], depth: int):
    if "url" in block:
        return SvServeDriver(_instance(SvServeProvider, PROVIDER_NAME,
                                       block).client, True), {}
    names = [k for k in block if k != DEFAULT_METADATA_KEY]
    if len(names) != 1:
        raise _settings_error(
            "expected {\"url\": ..., \"token\": ...}, a provider block "
            "{\"sv_serve\": {...}} (with an optional default_metadata), or "
            f"one name bound to such a block; got the keys {sorted(names)}")
    name, settings = names[0], block[names[0]]
    metadata = _metadata_of(block)
    cls = provider_class(str(name))
    if cls is None:
        if depth == 0 and isinstance(settings, Mapping) and \
                DEFAULT_METADATA_KEY not in block:
            return _from_block(settings, 1)  # a binding: {"sandbox": block}
        raise _settings_error(f"no sandbox provider named {name!r} (sv_serve, "
                              "NeMo Gym's registry, or an installed entry "
                              f"point of {ENTRY_POINT_GROUP})")
    driver = driver_of_object(_instance(cls, str(name), settings), True)
    if driver is None:
        raise _settings_error(f"{name!r} makes no object with NeMo Gym's "
                              "provider protocol")
    return driver, metadata


def open_target(provider: Any) -> Tuple[Any, Dict[str, Any]]:
    """(driver, default_metadata) for the seed's ``provider`` argument.
    A driver made here from settings is the call's own (``owned``): its
    connections are closed, its provider's ``aclose`` awaited, at the end."""
    if isinstance(provider, Mapping):
        return _from_block(provider, 0)
    driver: Optional[Any] = driver_of_object(provider, False)
    if driver is None:
        raise _settings_error(
            f"expected a provider block, sv-serve's settings or a provider "
            f"object, not {type(provider).__name__}")
    return driver, {}
