"""Helpers that damage a cache for real: an index of random bytes or cut in half, a tree this process may not
write (by permissions, or, for root, whom permissions do not stop, the immutable attribute)."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest

Damage = Literal["random", "truncated"]


def wreck_index(cache_dir: Path, how: Damage) -> bytes:
    """Damage ``cache.db``: random bytes of its size, or its first half only; returns the bytes left there."""
    db = cache_dir / "cache.db"
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    size = db.stat().st_size
    # (a cache still open in another thread may keep everything in its WAL and leave cache.db nearly empty)
    data = os.urandom(max(size, 16384)) if how == "random" else db.read_bytes()[: size // 2]
    db.write_bytes(data)
    return data


def _writable_probe(directory: Path) -> bool:
    probe = directory / ".r1build-write-probe"
    try:
        probe.write_bytes(b"x")
    except OSError:
        return False
    probe.unlink()
    return True


def _chattr(flag: str, paths: list[Path]) -> bool:
    chattr = shutil.which("chattr")
    if chattr is None:
        return False
    proc = subprocess.run([chattr, flag, *map(str, paths)], capture_output=True, check=False)
    return proc.returncode == 0


@contextlib.contextmanager
def read_only_tree(root: Path) -> Iterator[str]:
    """Make ``root`` and everything under it read-only for this process (and its children) for the block;
    yields how ("permissions" or "immutable"). Permissions do not stop root, so for root every file and folder
    gets the immutable attribute instead (``chattr +i``); where neither works the test is skipped. The block
    only runs once a write into ``root`` has been seen to fail."""
    paths = [*sorted(root.rglob("*"), key=lambda p: len(p.parts), reverse=True), root]
    modes = {p: p.stat().st_mode for p in paths}
    how = "permissions"
    if os.geteuid() == 0:
        how = "immutable"
        if not _chattr("+i", paths):
            _chattr("-i", paths)
            pytest.skip("running as root and chattr +i is not available: cannot make a read-only cache")
    else:
        for p in paths:
            p.chmod(stat.S_IMODE(modes[p]) & ~0o222)
    try:
        assert not _writable_probe(root), f"{root} is still writable ({how})"
        yield how
    finally:
        if how == "immutable":
            _chattr("-i", paths)
        else:
            for p in reversed(paths):
                p.chmod(stat.S_IMODE(modes[p]))
