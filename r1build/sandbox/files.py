"""What this process reads of a folder a confined process writes: never through a link planted there, never a FIFO
or a device, never more than it asked for.

A confined worker's folder is bound read-write into its sandbox, and the worker goes on running (a candidate's
threads with it) while the parent reads what it left: a path the parent builds under that folder can meet a link to
any file of the parent's user (the parent would read a key into a verdict), a FIFO (the parent blocks for good) or
a sparse file of a terabyte. So such a file is opened from a folder the confined process cannot replace down one
name at a time, none of them followed where it is a link (``O_NOFOLLOW``), the last without blocking, and only a
regular file is taken. A check of the path before an open would not do: the worker can swap a folder for a link
between the two.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
from pathlib import Path

__all__ = ["make_beneath", "open_beneath", "read_beneath", "read_tail", "remove_beneath"]

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def open_beneath(folder: Path, path: Path | str, flags: int = os.O_RDONLY) -> int:
    """A descriptor of the regular file ``path`` (absolute, or relative to ``folder``), opened with ``flags`` from
    ``folder`` down without following a link below ``folder`` and without blocking (the caller closes it).
    :class:`OSError` where ``path`` is not beneath ``folder`` (``EXDEV``), where a name on the way is a link
    (``ELOOP``, ``ENOTDIR``) or where it is no regular file (``EINVAL``: a FIFO, a device, a socket, a folder).
    ``folder`` itself is trusted: a folder the confined process cannot replace (the one bound into its sandbox)."""
    parts = _parts(folder, path)
    fd = _descend(folder, parts[:-1])
    try:
        found = os.open(parts[-1], flags | _FILE, 0o600, dir_fd=fd)
    finally:
        os.close(fd)
    if not stat.S_ISREG(os.fstat(found).st_mode):
        os.close(found)
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    os.set_blocking(found, True)
    return found


def _descend(folder: Path, names: list[str], *, make: bool = False) -> int:
    """A descriptor of the folder ``folder/names[0]/names[1]/...`` (the caller closes it), each name opened from the
    one above it, none followed where it is a link (:class:`OSError`, ``ELOOP`` or ``ENOTDIR``); with ``make``, a
    missing one is made first (0700)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in names:
            if make:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o700, dir_fd=fd)
            inner = os.open(name, _DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def _parts(folder: Path, path: Path | str) -> list[str]:
    """The names from ``folder`` down to ``path`` (no ``..``, no empty name)."""
    target = Path(os.path.abspath(Path(folder) / path))  # noqa: PTH100 - no link followed, "a/../b" taken apart
    base = Path(os.path.abspath(folder))  # noqa: PTH100
    if target == base or not target.is_relative_to(base):
        raise OSError(errno.EXDEV, f"not in {base}", str(path))
    return list(target.relative_to(base).parts)


def read_beneath(folder: Path, path: Path | str, limit: int) -> bytes:
    """At most ``limit`` bytes from the start of the regular file ``path`` beneath ``folder``
    (:func:`open_beneath`; raises what it raises)."""
    with os.fdopen(open_beneath(folder, path), "rb") as f:
        return f.read(limit)


def read_tail(path: Path, limit: int) -> tuple[bytes, int]:
    """The last ``limit`` bytes of the regular file ``path`` (not through a link, not a FIFO) and its whole size;
    ``(b"", 0)`` where there is no such file."""
    with contextlib.suppress(OSError), os.fdopen(open_beneath(path.parent, path.name), "rb") as f:
        size = os.fstat(f.fileno()).st_size
        f.seek(max(0, size - limit))
        return f.read(limit), size
    return b"", 0


def make_beneath(folder: Path, path: Path | str) -> Path:
    """The folder ``path`` (absolute, or relative to ``folder``), each missing name on the way made from ``folder``
    down without following a link below ``folder``: a link planted in place of a folder on the way is never the place
    a folder is made in (:class:`OSError`, ``ELOOP`` or ``ENOTDIR``, where one is met)."""
    os.close(_descend(folder, _parts(folder, path), make=True))
    return Path(folder) / path


def remove_beneath(folder: Path, path: Path | str, trash: Path) -> None:
    """Remove ``path`` beneath ``folder`` (a file or a folder with what it holds) where it is reached through no link:
    it is first moved, by name from the folder that holds it, into ``trash`` (a folder on the same file system that no
    confined process writes), then removed there, so no link planted on the way leads the removal elsewhere. What
    cannot be moved (gone, reached through a link, another file system) is left as it is."""
    parts = _parts(folder, path)
    gone = Path(trash) / f"removed-{secrets.token_hex(8)}"
    try:
        fd = _descend(folder, parts[:-1])
    except OSError:
        return
    try:
        Path(trash).mkdir(parents=True, exist_ok=True)
        os.rename(parts[-1], gone, src_dir_fd=fd)
    except OSError:
        return
    finally:
        os.close(fd)
    if gone.is_dir() and not gone.is_symlink():
        shutil.rmtree(gone, ignore_errors=True)
    else:
        gone.unlink(missing_ok=True)
