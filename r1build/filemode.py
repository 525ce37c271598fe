"""The mode of the files r1build writes for the user (the lock, bundles): what ``open()`` would give them.

They are written to a temporary file and renamed into place, so a reader never sees half of one; the temporary
file comes from :func:`tempfile.mkstemp`, which makes it 0600. :func:`as_user_file` gives it the mode a plain
``open()`` would (0666 less the umask), so a lock or a bundle is as readable as any file the user writes.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["as_user_file", "umask"]


def umask() -> int:
    """The process's umask, read without changing it where the system says (Linux's /proc), else set and
    restored at once."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def as_user_file(fd: int) -> None:
    """Give the open file ``fd`` the mode of a file the user creates: 0666 less the umask."""
    os.fchmod(fd, 0o666 & ~umask())
