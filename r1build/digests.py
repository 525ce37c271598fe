"""Digests, the standard library only: sha256 of bytes and of canonical JSON (what keys, records and signatures are
made of), and what a stamp watches: files and folders by their bytes (a plain file read so that a FIFO in its
place never blocks: :func:`read_plain`), and r1build's own code by its files' sizes
and times. Light on purpose: the build backend's warm-build stamp and the CLI's warm path check them before
anything heavy is imported, so both work on plain ``os`` calls on strings (every warm build pays them; pathlib's
objects cost more than the system calls here); and :mod:`r1build.keys` and :mod:`r1build.trust.signing` share them
without importing each other."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["code_fingerprint", "path_digest", "read_plain", "toml_digest"]


def canonical_json(obj: Any) -> bytes:
    """Deterministic JSON: sorted keys, no whitespace, UTF-8."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def digest_bytes(data: bytes) -> str:
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def digest_json(obj: Any) -> str:
    """Hex sha256 of the canonical JSON of ``obj``."""
    return digest_bytes(canonical_json(obj))


def toml_digest(data: Any) -> str:
    """Hex sha256 of parsed TOML: the same for two texts that differ only in comments, blank lines, quoting or the
    order of keys; a date or time differs from a string of the same text."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_tagged)
    return digest_bytes(text.encode())


def _tagged(value: Any) -> dict[str, str]:
    """A TOML date, time or date-time as JSON: its type's name and its ISO text."""
    return {"toml": type(value).__name__, "iso": value.isoformat()}


_PACKAGE = Path(__file__).resolve().parent
_ABSENT = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP})
"""The errors that mean "no such file" to :meth:`pathlib.Path.is_file` (others are raised)."""


def read_plain(path: Path) -> bytes:
    """The bytes of the plain file ``path``; :class:`OSError` for anything else there (a folder, a device, a FIFO:
    opened with ``O_NONBLOCK``, so a FIFO left in a file's place cannot hold a build waiting for a writer for
    ever). Links are followed."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a plain file")
        with open(fd, "rb", closefd=False) as fh:
            return fh.read()
    finally:
        os.close(fd)


def path_digest(path: Path) -> str | None:
    """sha256 of a file's bytes, of a folder's names and contents (recursively), or None when absent; a symbolic
    link inside a folder also counts by where it points, so a file swapped for a link to the same bytes differs.
    A link to a folder the walk is already in (``inc/self -> .``) counts by where it points only: followed, two
    such links made the walk take 2^40 steps, then fail with ELOOP."""
    return _digest(os.fspath(path), frozenset())


def _digest(path: str, above: frozenset[tuple[int, int]]) -> str | None:
    """:func:`path_digest` of a path given as a string (one ``stat``, then the bytes or the folder's entries);
    ``above``: the device and inode of every folder the walk is in."""
    try:
        st = os.stat(path)  # noqa: PTH116
    except OSError as exc:
        if exc.errno in _ABSENT:
            return None
        raise
    except ValueError:  # e.g. an embedded NUL: no such file
        return None
    if stat.S_ISREG(st.st_mode):
        with open(path, "rb", buffering=0) as f:  # noqa: PTH123 - unbuffered: one read of the whole file
            return hashlib.sha256(f.readall()).hexdigest()
    if stat.S_ISDIR(st.st_mode):
        here = (st.st_dev, st.st_ino)
        if here in above:
            return "cycle"
        inner = above | {here}
        h = hashlib.sha256()
        with os.scandir(path) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            link = f"->{Path(entry.path).readlink()}" if entry.is_symlink() else ""
            digest = _digest(entry.path, inner) or "-"
            h.update(entry.name.encode() + link.encode() + b"\0" + digest.encode() + b"\n")
        return "dir:" + h.hexdigest()
    return None


def code_fingerprint() -> Iterator[str]:
    """One line per source file of the installed r1build (its path in the package, size and modification time),
    in the order of a sorted top-down walk that skips ``__pycache__``, does not follow linked folders and passes
    over folders it cannot list, as :func:`os.walk` does. Every warm build and warm command pays this walk."""
    yield from _code_lines(str(_PACKAGE), "")


def _code_lines(folder: str, prefix: str) -> Iterator[str]:
    try:
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError:
        return
    folders = []
    for entry in entries:
        try:
            is_dir = entry.is_dir()
        except OSError:
            is_dir = False
        if is_dir:
            if entry.name != "__pycache__":
                folders.append(entry)
        elif entry.name.endswith((".py", ".json")):
            st = entry.stat()
            yield f"{prefix}{entry.name}:{st.st_size}:{st.st_mtime_ns}"
    for entry in folders:
        if not entry.is_symlink():
            yield from _code_lines(entry.path, f"{prefix}{entry.name}/")
