"""One process at a time decides a decision key: a file lock per key in the cache directory.

Several resolves of one manifest that miss at once (CI jobs, a build and an editor's resolve) would each ask the
model the same questions and pay for them. :func:`claim` holds an exclusive ``flock`` on
``<cache>/claims/<key>.lock`` while the holder decides; the others wait, then find the decision it stored and use
it. The lock dies with its process (the kernel drops it), so a killed resolve never blocks the next. Where no
lock can be taken (a cache folder this process may not write, a system without ``fcntl``) it does nothing: the
cost is duplicated work, never a wrong answer.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from ..events import Note, emit
from ..filemode import folder_modes, private_file, private_folder
from ..keys import digest_bytes

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory locks here
    fcntl = None  # type: ignore[assignment]

__all__ = ["claim"]


@contextmanager
def claim(directory: Path, name: str, *, what: str) -> Iterator[None]:
    """Hold the claim ``name`` (a decision key) in the cache ``directory``; ``what`` names it in the note shown
    while another process holds it."""
    fd = _open(directory, name)
    if fd is None:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            emit(Note("info", f"another r1build process is deciding {what}: waiting for it, then using its decision"))
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the lock


def _open(directory: Path, name: str) -> int | None:
    if fcntl is None:
        return None
    folder = directory / "claims"
    folder_mode, file_mode = folder_modes(directory)  # private unless the cache folder was made to share
    with suppress(OSError):
        private_folder(folder, folder_mode)
        return private_file(folder / f"{digest_bytes(name.encode())[:32]}.lock", file_mode, os.O_RDWR)
    return None
