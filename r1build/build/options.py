"""r1build's build options: read from PEP 517 ``config_settings`` (``r1build.*``) and the environment.

scikit-build-core refuses config settings it does not know, so :func:`split_settings` takes the ``r1build.*``
keys out before the rest goes on to it. A key given both ways takes the config setting: it is the more explicit.

================  ======================  ====================================================================
config setting    environment             meaning
================  ======================  ====================================================================
r1build.locked    ``R1BUILD_LOCKED=1``    fail unless ``kernels.lock`` is present and current
r1build.frozen    ``R1BUILD_FROZEN=1``    build what ``kernels.lock`` names as it is, without requiring it to
                                          be current (stale entries included, each still verified against
                                          the manifest); a kernel × arch without an entry fails (contradicts
                                          locked)
r1build.generate  ``R1BUILD_GENERATE=1``  the person building opts in to calling the configured LLM endpoint on
                                          a miss (spending their key); without it a build never does
r1build.offline   ``R1BUILD_OFFLINE=1``   never call an LLM endpoint (a build's default; contradicts generate)
r1build.evaluate  ``R1BUILD_EVALUATE=1``  measure on a local GPU on a miss (builds do not by default)
r1build.cache-dir ``R1BUILD_CACHE_DIR``   the cache directory (platformdirs' user cache otherwise)
r1build.remote-   ``R1BUILD_REMOTE_       the remote cache behind it (the manifest's ``[cache] url`` otherwise);
cache             CACHE``                 read-only unless ``R1BUILD_REMOTE_WRITE=1``
(none)            ``R1BUILD_VERBOSE=1``   also show each stage's closing line (gate: registers, cache hits)
================  ======================  ====================================================================

Builds are locked-or-offline by default: ``pip install`` of a package never sends a model request, whatever API
keys the environment holds. On a miss (no lock entry, a stale one, nothing cached) a build takes, in order, the
locked winner (from the cache, the vendored folder or the manifest's files), a cached decision, then the
kernel's baseline with a warning; a kernel with none of these fails with a message naming the fixes.
The environment is read through :mod:`r1build.settings`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TypeAlias

from ..convert import replace
from ..errors import ConfigError
from ..records import ResolveOptions
from ..settings import cache_dir_path, env_settings, lock_mode, parse_flag
from .warm import PREFIX

__all__ = ["PREFIX", "ConfigSettings", "ResolveOptions", "split_settings"]

ConfigSettings: TypeAlias = dict[str, str | list[str]]
"""PEP 517 config settings as frontends pass them: a repeated key arrives as a list."""


_KEYS = ("locked", "frozen", "generate", "offline", "evaluate", "cache-dir", "remote-cache")


def _single(key: str, value: str | list[str]) -> str:
    if isinstance(value, list):
        if len(set(value)) != 1:
            raise ConfigError(f"config setting {key!r} was given {len(value)} different values: {value!r}")
        return value[0]
    return value


def split_settings(
    config_settings: Mapping[str, str | list[str]] | None,
    environ: Mapping[str, str] | None = None,
) -> tuple[ResolveOptions, ConfigSettings]:
    """r1build's options (the resolver's record, :class:`~r1build.records.ResolveOptions`), and the config
    settings that remain for scikit-build-core.

    Raises :class:`~r1build.errors.ConfigError` for an unknown ``r1build.*`` key or a bad value.
    """
    ours: dict[str, str] = {}
    rest: ConfigSettings = {}
    for key, value in (config_settings or {}).items():
        if key.startswith(PREFIX):
            name = key[len(PREFIX) :]
            if name not in _KEYS:
                from ..convert import did_you_mean

                known = ", ".join(PREFIX + k for k in _KEYS)
                raise ConfigError(f"unknown config setting {key!r}{did_you_mean(name, _KEYS)}; r1build knows {known}")
            ours[name] = _single(key, value)
        else:
            rest[key] = value

    env = env_settings(environ)

    def flag(name: str, from_env: bool | None) -> bool | None:
        return parse_flag(PREFIX + name, ours[name]) if name in ours else from_env

    # told by a config setting (None: not), else the environment; told both is an error (exit 2)
    locked, frozen = lock_mode(
        flag("locked", None), flag("frozen", None), env, said=(f"{PREFIX}locked", f"{PREFIX}frozen")
    )
    generate = bool(flag("generate", env.generate))
    offline = bool(flag("offline", env.offline))
    if generate and offline:
        said = [
            f"{PREFIX}generate" if "generate" in ours else "R1BUILD_GENERATE",
            f"{PREFIX}offline" if "offline" in ours else "R1BUILD_OFFLINE",
        ]
        raise ConfigError(f"{said[0]} asks this build to call the LLM endpoint, {said[1]} forbids it: drop one")
    evaluate = bool(flag("evaluate", env.evaluate))

    cache_dir: Path | None = None
    raw_dir = ours.get("cache-dir")
    if raw_dir:
        cache_dir = cache_dir_path(raw_dir, f"{PREFIX}cache-dir").resolve()
    elif env.cache_dir is not None:
        cache_dir = env.cache_dir.resolve()

    remote = ours.get("remote-cache") or None
    if remote is not None:
        from ..manifest.addresses import remote_url_problem

        problem = remote_url_problem(remote)
        if problem is not None:
            raise ConfigError(f"{PREFIX}remote-cache: {problem}")
    options = ResolveOptions(
        locked=locked, frozen=frozen, generate=generate, evaluate=evaluate, cache_dir=cache_dir, remote_cache=remote
    )
    return options if environ is None else replace(options, environ=dict(environ)), rest
