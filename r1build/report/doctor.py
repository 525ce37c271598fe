"""``r1build doctor``: what this machine offers r1build, in one report.

Each :class:`Finding` is one thing looked at: nvcc and the archs it compiles for, the GPUs and cupy, the
generation extra and the LLM endpoint, the cache (and the remote cache), the manifest and its lock. A finding is
``ok``, ``note`` (works, with something worth knowing), ``warning`` (something r1build falls back from) or
``error`` (a command that needs it will fail). Nothing here changes anything: the cache is opened read-only in
spirit (its integrity check only reads), the endpoint costs one TCP connection, and none with ``offline``.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from .. import __version__
from ..convert import record
from ..errors import R1BuildError
from ..settings import EnvSettings, env_settings, lock_mode
from ..toolchain.extras import CHECK, CUPY, GENERATE

__all__ = ["Finding", "Level", "diagnose"]

Level = Literal["ok", "note", "warning", "error"]


@record(frozen=True)
class Finding:
    """One thing ``doctor`` looked at."""

    name: str
    """What was looked at (``nvcc``, ``gpus``, ``cache`` ...)."""
    level: Level
    """``ok``, ``note``, ``warning`` or ``error``."""
    detail: str
    """What was found, in words."""


def _nvcc() -> tuple[list[Finding], str | None]:
    from ..toolchain.nvcc import gpu_archs, toolchain

    try:
        tc = toolchain()
    except R1BuildError as exc:
        return [Finding("nvcc", "error", str(exc)), Finding("archs", "error", "no nvcc to ask")], None
    found = [Finding("nvcc", "ok", f"{tc.nvcc}: CUDA {tc.release} ({tc.ident})")]
    try:
        archs = gpu_archs(tc)  # the table every command reads: machine code, PTX, arch-specific
    except R1BuildError as exc:
        found.append(Finding("archs", "warning", str(exc)))
        return found, tc.release
    if archs.real:
        ptx = ", ".join(a.replace("compute_", "") for a in archs.virtual)
        found.append(Finding("archs", "ok", f"{archs.describe()}; PTX for {ptx}"))
    else:
        found.append(Finding("archs", "warning", f"{tc.nvcc} lists no archs it compiles for"))
    return found, tc.release


def _gpus(release: str | None) -> list[Finding]:
    driver = Path("/proc/driver/nvidia/version").exists()
    if not CUPY.installed():
        level: Level = "warning" if driver else "note"
        where = "an NVIDIA driver is loaded, but " if driver else "no NVIDIA driver seen; "
        extra = "cuda12" if release and release.startswith("12.") else "cuda13"
        return [
            Finding(
                "cupy",
                level,
                f"{where}cupy is not installed, so nothing is measured on a GPU: pip install 'r1build[{extra}]'",
            )
        ]
    versions = [
        f"{d} {importlib.metadata.version(d)}" for d in ("cupy-cuda13x", "cupy-cuda12x", "cupy") if _dist_version(d)
    ]
    found = [Finding("cupy", "ok", ", ".join(versions) or "installed")]
    from ..evaluate import detect_gpus

    gpus = detect_gpus()
    if gpus:
        found.append(
            Finding(
                "gpus", "ok", "; ".join(f"{g.index}: {g.name} ({g.arch}, {g.memory / 2**30:.0f} GiB)" for g in gpus)
            )
        )
    else:
        found.append(
            Finding(
                "gpus",
                "warning" if driver else "note",
                "no GPU visible to cupy"
                + (" (a driver is loaded: check CUDA_VISIBLE_DEVICES and the driver's version)" if driver else ""),
            )
        )
    return found


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _generation(manifest: object | None, environ: Mapping[str, str], offline: bool) -> list[Finding]:
    from ..generate import endpoint_configured, resolve_endpoint
    from ..manifest import Manifest
    from ..manifest.model import Generation

    found = [
        Finding("openai", "ok", f"openai {_dist_version('openai')}")
        if GENERATE.installed()
        else Finding("openai", "note", f"not installed: generation needs {GENERATE.install_hint()}")
    ]
    found.append(
        Finding("numpy", "ok", f"numpy {_dist_version('numpy')}")
        if CHECK.installed()
        else Finding("numpy", "note", f"not installed: r1build check needs {CHECK.install_hint()}")
    )
    generation = manifest.settings.generation if isinstance(manifest, Manifest) else Generation()
    if not endpoint_configured(generation, environ):
        found.append(
            Finding(
                "endpoint",
                "note",
                f"none configured for provider {generation.provider!r} (no key "
                "variable or base URL set): resolve judges without generating",
            )
        )
        return found
    try:
        endpoint = resolve_endpoint(generation, environ)
    except R1BuildError as exc:
        found.append(Finding("endpoint", "error", str(exc)))
        return found
    if offline:
        found.append(
            Finding(
                "endpoint", "note", f"{endpoint.display_url} ({endpoint.model}): not probed, R1BUILD_OFFLINE is set"
            )
        )
        return found
    from ..resolve.reach import unreachable

    why = unreachable(endpoint.display_url)
    if why is None:
        found.append(Finding("endpoint", "ok", f"{endpoint.display_url} ({endpoint.model}) accepts connections"))
    else:
        found.append(Finding("endpoint", "warning", f"{endpoint.display_url} is unreachable ({why})"))
    return found


def _cache(cache_dir: Path | None) -> list[Finding]:
    from ..cache import Cache, resolve_cache_dir

    directory = resolve_cache_dir(cache_dir)
    if not (directory / "cache.db").exists():
        return [Finding("cache", "note", f"{directory}: no cache yet (the first resolve or build makes it)")]
    try:
        with Cache(directory, create=False) as cache:
            damage = cache.integrity()
            if damage is not None:
                return [
                    Finding(
                        "cache",
                        "error",
                        f"{directory}: the index is damaged ({damage}); `r1build cache repair` rebuilds it",
                    )
                ]
            entries = len(cache.entries())
            volume, limit = cache.volume(), cache.size_limit
            writable = os.access(directory, os.W_OK)
    except R1BuildError as exc:
        return [Finding("cache", "error", f"{directory}: {exc}")]
    detail = f"{directory}: {entries} entries, {volume / 2**20:.1f} MiB of {limit / 2**30:.1f} GiB"
    if not writable:
        return [Finding("cache", "warning", detail + "; read-only for this user (hits count, nothing is stored)")]
    return [Finding("cache", "ok", detail)]


def _project(manifest_path: Path | None, env: EnvSettings) -> tuple[list[Finding], object | None]:
    from ..lock import check_lock, load_lock
    from ..manifest import find_manifest, load_manifest, remote_url_problem

    try:
        path = find_manifest(manifest_path) if manifest_path else find_manifest(Path.cwd(), walk_up=True)
    except R1BuildError as exc:  # none here: a note, unless -m named one
        level: Level = "error" if manifest_path else "note"
        return [Finding("manifest", level, str(exc))], None
    try:
        manifest = load_manifest(path, check_references=False)
    except R1BuildError as exc:  # one was found, and every command that loads it would stop here
        return [Finding("manifest", "error", str(exc))], None
    kernels = len(manifest.kernels)
    found = [Finding("manifest", "ok", f"{manifest.path}: {kernels} kernel{'s' if kernels != 1 else ''}")]
    try:
        staleness = check_lock(manifest, load_lock(manifest, frozen=lock_mode(None, None, env)[1]))
    except R1BuildError as exc:
        found.append(Finding("lock", "error", str(exc)))
    else:
        found.append(_lock_finding(staleness.render() if staleness else None, env))
    remote = env.remote_cache or manifest.settings.cache.url
    problem = remote_url_problem(remote) if remote else None  # the manifest's was checked when it was loaded
    if problem is not None:  # never the URL itself: it may hold a password
        found.append(Finding("remote cache", "error", f"R1BUILD_REMOTE_CACHE: {problem}"))
    elif remote:
        found.append(
            Finding(
                "remote cache",
                "ok" if manifest.settings.cache.trusted_keys else "warning",
                f"{remote}"
                + (
                    ""
                    if manifest.settings.cache.trusted_keys
                    else ": no [cache] trusted-keys, so nothing from it is used"
                ),
            )
        )
    return found, manifest


def _lock_finding(stale: str | None, env: EnvSettings) -> Finding:
    """The lock's finding: current, or what is stale, an error where ``R1BUILD_LOCKED`` makes every command that
    reads the lock fail on it, a note where ``R1BUILD_FROZEN`` uses it as it is."""
    if stale is None:
        return Finding("lock", "ok", "current")
    locked, frozen = lock_mode(None, None, env)
    if frozen:
        return Finding("lock", "note", "not current, used as it is (R1BUILD_FROZEN):\n" + stale)
    if locked:
        return Finding(
            "lock", "error", "not current, and R1BUILD_LOCKED makes the commands that read it fail:\n" + stale
        )
    return Finding("lock", "warning", "not current:\n" + stale)


def diagnose(
    *, manifest_path: Path | None = None, cache_dir: Path | None = None, environ: Mapping[str, str] | None = None
) -> list[Finding]:
    """Every finding, in report order. ``manifest_path``: ``-m`` (None: the nearest manifest from the current
    folder up, and none found is only a note)."""
    env = dict(os.environ if environ is None else environ)
    found = [Finding("r1build", "ok", f"r1build {__version__}")]
    settings = env_settings(env)
    project, manifest = _project(manifest_path, settings)
    nvcc, release = _nvcc()
    found += nvcc
    found += _gpus(release)
    found += _generation(manifest, env, bool(settings.offline))
    found += _cache(cache_dir)
    found += project
    return found
