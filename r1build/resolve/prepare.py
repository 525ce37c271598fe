"""What a build uses: the generated files of a resolution, and :func:`prepare_build`, which the PEP 517 backend
calls before CMake (locked-or-offline unless the person building opts in)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ..convert import replace
from ..events import Note, emit
from ..manifest import Manifest, find_manifest, load_manifest
from ..records import BUILD_MODE_WORDS, ResolveOptions
from .model import Resolution
from .run import resolve


def emit_resolution(resolution: Resolution, out_dir: Path, *, replace_foreign: bool = True) -> Path:
    """Write the generated directory for a resolution; returns the CMake file. :class:`NoWinnerError` when some
    kernel × arch has no winner, :class:`ManifestError` when their device code is over ``max-wheel-mib``: nothing
    is written then. ``replace_foreign``: see :func:`~r1build.emit.write_generated`."""
    from ..emit import Winner, write_generated

    resolution.require_complete()
    resolution.require_within_cap()
    winners = [Winner(r.spec, r.arch, r.candidate) for r in resolution.entries]
    emitted = write_generated(out_dir, resolution.manifest, winners, replace_foreign=replace_foreign)
    return emitted.cmake_file


def _note_stale_lock(manifest: Manifest, archs: Sequence[str] | None) -> None:
    """Warn, once, where a lock is there but does not fit the manifest: without ``--locked`` the build decides
    those kernels × archs again (with no GPU and no opt-in: from the hand-written sources, unvalidated), so a
    winner the lock names, GPU-validated perhaps, is not what the wheel gets. No lock at all says nothing here
    (the resolution's own warnings cover it); a lock that cannot be read is the resolution's error."""
    from ..errors import LockError
    from ..lock import check_lock, lock_path, read_lock

    try:
        lock = read_lock(lock_path(manifest))
    except (LockError, OSError):
        return
    if lock is None:
        return
    wanted = {spec.name: [a for a in manifest.archs_of(spec) if not archs or a in archs] for spec in manifest.kernels}
    problems = []
    for kernel, arch, why in check_lock(manifest, lock, wanted).problems:
        entry = lock.entry(kernel, arch) if arch else None
        named = f" ({entry.provenance}, {entry.validation} winner {entry.winner[:12]})" if entry else ""
        problems.append(f"{kernel}/{arch}{named}: {why}")
    if problems:
        emit(
            Note(
                "warning",
                f"{lock_path(manifest).name} is out of date with {manifest.path.name} ({'; '.join(problems)}): "
                "this build decides those again, so the wheel need not hold what the lock names. Run `r1build "
                "lock` (or `r1build resolve` on a GPU) and commit the lock; R1BUILD_LOCKED=1 makes this an error",
            )
        )


def for_build(options: ResolveOptions) -> ResolveOptions:
    """``options`` as a build uses them: generating and measuring only where asked for (True), the lock never
    written, the build's words for ``locked`` and ``frozen``."""
    return replace(
        options,
        generate=options.generate is True,
        evaluate=options.evaluate is True,
        write_lock=False,
        build=True,
        mode_words=BUILD_MODE_WORDS,
    )


def prepare_build(project_dir: Path, options: ResolveOptions | None = None, *, out_dir: Path | None = None) -> Path:
    """What the build backend calls before CMake: resolve and emit; returns the generated CMake file.

    A build is locked-or-offline unless the person building opts in: it never calls an LLM endpoint unless
    ``options.generate`` is True (``R1BUILD_GENERATE=1`` / ``r1build.generate``), never measures on a GPU unless
    ``options.evaluate`` is True (``R1BUILD_EVALUATE=1``), and never writes the lock (:func:`for_build`).
    ``locked``: fail unless the lock is current; ``frozen``: build what the lock names as it is
    (:attr:`ResolveOptions.frozen`). On a miss it takes a cached decision, else the first of the user's own
    sources that passes the gate (unvalidated); where none may win it raises
    :class:`~r1build.errors.NoWinnerError` and writes nothing.
    The cache only speeds a build up: a broken, read-only or missing one costs a warning (see
    :func:`~r1build.cache.open_usable`); so does the remote cache behind it (``remote_cache``, else
    ``R1BUILD_REMOTE_CACHE``, else the manifest's ``[cache] url``), which a build only reads unless
    ``R1BUILD_REMOTE_WRITE=1``.
    """
    from ..cache import open_usable
    from ..cache.remote import attach_remote

    options = for_build(options or ResolveOptions())
    manifest = load_manifest(find_manifest(project_dir), check_references=False)
    if not options.locked and not options.frozen:
        _note_stale_lock(manifest, options.archs)
    with attach_remote(open_usable(options.cache_dir), manifest, url=options.remote_cache) as cache:
        resolution = resolve(manifest, cache, options)
        if not options.generate and (resolution.unresolved or any(r.state == "gated" for r in resolution.entries)):
            from ..generate import endpoint_configured

            if endpoint_configured(manifest.settings.generation, os.environ):
                emit(
                    Note(
                        "info",
                        "an LLM endpoint is configured, but a build never calls it unless the person "
                        "building opts in (R1BUILD_GENERATE=1 or --config-settings r1build.generate=1); "
                        "`r1build resolve` and `r1build vendor` make the lock and sources a build uses",
                    )
                )
        return emit_resolution(resolution, out_dir or project_dir / ".r1build" / "generated")
