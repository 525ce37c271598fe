"""Gate verdicts computed once per test process, for fixtures whose setup locks a known project.

A lock gates each winner: an nvcc compile, a second or more, every time a fixture that locks is used. Where a
test checks what happens after the lock and not the compile itself, its fixture first seeds the empty cache with
the verdicts that the same lock of the same files stored in a scratch cache (once per process); the lock then
finds them as any second lock would, and the cache ends with the entries a cold lock leaves. The gate's own
tests never use this.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from r1build.cache import Cache

_VERDICTS: dict[str, list[tuple[str, bytes]]] = {}
_IGNORE = shutil.ignore_patterns(".r1build", "kernels.lock", "__pycache__", "build", "dist", "cache")


def _files_digest(project: Path) -> str:
    """Digest of the project's files (names and bytes), without what :data:`_IGNORE` leaves out of the copy."""
    h = hashlib.sha256()
    with tempfile.TemporaryDirectory(prefix="r1build-gate-seed-") as scratch:
        copy = Path(shutil.copytree(project, Path(scratch) / "p", ignore=_IGNORE))
        for path in sorted(p for p in copy.rglob("*") if p.is_file()):
            h.update(path.relative_to(copy).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def seed_gate_verdicts(cache_dir: Path, project: Path, lock: Callable[[Path, Path], object]) -> None:
    """Store in ``cache_dir`` the gate verdicts (``gate/...`` entries, byte for byte) that ``lock(copy, cache)``
    stores in the empty ``cache`` when it locks ``copy``, a copy of ``project`` without its lock. ``lock`` runs
    once per process for each content of the project's files."""
    name = _files_digest(project)
    if name not in _VERDICTS:
        with tempfile.TemporaryDirectory(prefix="r1build-gate-seed-") as scratch:
            copy = Path(shutil.copytree(project, Path(scratch) / project.name, ignore=_IGNORE))
            lock(copy, Path(scratch) / "scratch-cache")
            with Cache(Path(scratch) / "scratch-cache") as cache:
                entries = [(e.key, cache.peek(e.key)) for e in cache.entries("gate")]
        _VERDICTS[name] = [(key, payload) for key, payload in entries if payload is not None]
        assert _VERDICTS[name], f"locking {project} stored no gate verdict"
    with Cache(cache_dir) as cache:
        for key, payload in _VERDICTS[name]:
            cache.put_raw(key, payload)
