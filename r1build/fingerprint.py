"""Digests of what a stamp watches: files and folders by their bytes, and r1build's own code by its files' sizes
and times. Light on purpose (the standard library only): the build backend's warm-build stamp and the CLI's warm
path check them before anything heavy is imported."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["code_fingerprint", "path_digest"]

_PACKAGE = Path(__file__).resolve().parent


def path_digest(path: Path) -> str | None:
    """sha256 of a file's bytes, of a folder's names and contents (recursively), or None when absent; a symbolic
    link inside a folder also counts by where it points, so a file swapped for a link to the same bytes differs."""
    if path.is_file():
        return hashlib.sha256(path.read_bytes()).hexdigest()
    if path.is_dir():
        h = hashlib.sha256()
        for child in sorted(path.iterdir(), key=lambda p: p.name):
            link = f"->{child.readlink()}" if child.is_symlink() else ""
            h.update(child.name.encode() + link.encode() + b"\0" + (path_digest(child) or "-").encode() + b"\n")
        return "dir:" + h.hexdigest()
    return None


def code_fingerprint() -> Iterator[str]:
    """One line per source file of the installed r1build (its path in the package, size and modification time).
    Plain ``os`` calls on strings: every warm build and warm command pays this walk."""
    base = str(_PACKAGE)
    skip = len(base) + 1
    for root, dirs, files in os.walk(base):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith((".py", ".json")):
                path = os.path.join(root, name)  # noqa: PTH118 - pathlib costs more than the stat itself here
                st = os.stat(path)  # noqa: PTH116
                yield f"{path[skip:].replace(os.sep, '/')}:{st.st_size}:{st.st_mtime_ns}"
