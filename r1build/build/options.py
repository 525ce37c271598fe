"""r1build's build options: read from PEP 517 ``config_settings`` (``r1build.*``) and the environment.

scikit-build-core refuses config settings it does not know, so :func:`split_settings` takes the ``r1build.*``
keys out before the rest goes on to it. A key given both ways takes the config setting: it is the more explicit.

================  =====================  =====================================================================
config setting    environment            meaning
================  =====================  =====================================================================
r1build.locked    ``R1BUILD_LOCKED=1``   fail unless ``kernels.lock`` is present and current
r1build.offline   ``R1BUILD_OFFLINE=1``  never call an LLM endpoint (the default when none is configured)
r1build.cache-dir ``R1BUILD_CACHE_DIR``  the cache directory (platformdirs' user cache otherwise)
(none)            ``R1BUILD_VERBOSE=1``  also show each stage's closing line (gate: registers, cache hits)
================  =====================  =====================================================================
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

from ..errors import ConfigError

__all__ = ["PREFIX", "BuildOptions", "ConfigSettings", "split_settings"]

ConfigSettings: TypeAlias = dict[str, str | list[str]]
"""PEP 517 config settings as frontends pass them: a repeated key arrives as a list."""

PREFIX = "r1build."
"""Config settings under this prefix are r1build's; everything else is scikit-build-core's."""

_KEYS = ("locked", "offline", "cache-dir")
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})


@dataclass(frozen=True)
class BuildOptions:
    """How the backend resolves kernels before CMake runs."""

    locked: bool = False
    """Fail unless the lock is present and current (``--locked`` of the CLI)."""
    offline: bool | None = None
    """Never call an LLM; None leaves it to the resolver (offline exactly when no endpoint is configured)."""
    cache_dir: Path | None = None
    """The cache directory; None leaves it to the cache (``R1BUILD_CACHE_DIR`` or the platform default)."""


def _single(key: str, value: str | list[str]) -> str:
    if isinstance(value, list):
        if len(set(value)) != 1:
            raise ConfigError(f"config setting {key!r} was given {len(value)} different values: {value!r}")
        return value[0]
    return value


def _flag(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ConfigError(f"{name} must be one of 1/0, true/false, yes/no, on/off (got {value!r})")


def split_settings(
    config_settings: Mapping[str, str | list[str]] | None,
    environ: Mapping[str, str] | None = None,
) -> tuple[BuildOptions, ConfigSettings]:
    """r1build's options, and the config settings that remain for scikit-build-core.

    Raises :class:`~r1build.errors.ConfigError` for an unknown ``r1build.*`` key or a bad value.
    """
    env = os.environ if environ is None else environ
    ours: dict[str, str] = {}
    rest: ConfigSettings = {}
    for key, value in (config_settings or {}).items():
        if key.startswith(PREFIX):
            name = key[len(PREFIX):]
            if name not in _KEYS:
                from ..manifest.convert import did_you_mean

                known = ", ".join(PREFIX + k for k in _KEYS)
                raise ConfigError(f"unknown config setting {key!r}{did_you_mean(name, _KEYS)}; r1build knows {known}")
            ours[name] = _single(key, value)
        else:
            rest[key] = value

    locked = False
    if "locked" in ours:
        locked = _flag(PREFIX + "locked", ours["locked"])
    elif env.get("R1BUILD_LOCKED"):
        locked = _flag("R1BUILD_LOCKED", env["R1BUILD_LOCKED"])

    offline: bool | None = None
    if "offline" in ours:
        offline = _flag(PREFIX + "offline", ours["offline"])
    elif env.get("R1BUILD_OFFLINE"):
        offline = _flag("R1BUILD_OFFLINE", env["R1BUILD_OFFLINE"])

    cache_dir: Path | None = None
    raw_dir = ours.get("cache-dir") or env.get("R1BUILD_CACHE_DIR")
    if raw_dir:
        cache_dir = Path(raw_dir).expanduser().resolve()

    return BuildOptions(locked=locked, offline=offline, cache_dir=cache_dir), rest
