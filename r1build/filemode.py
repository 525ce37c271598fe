"""The files r1build writes for the user (the lock, bundles, reports): their mode, and what they may replace.

They are written to a temporary file and renamed into place, so a reader never sees half of one; the temporary
file comes from :func:`tempfile.mkstemp`, which makes it 0600. :func:`as_user_file` gives it the mode a plain
``open()`` would (0666 less the umask), so a lock or a bundle is as readable as any file the user writes. The
rename replaces whatever the path names, so :func:`replace_problem` refuses a path that is not a regular file:
run as root, ``r1build cache export /dev/null`` would otherwise put a plain file in place of the device.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["as_user_file", "replace_problem", "umask"]


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


def replace_problem(path: Path) -> str | None:
    """Why a file written by renaming a temporary file over ``path`` may not go there: it names a folder, a
    device, a FIFO or a socket (``/dev/null``, ``/dev/stdout``), which the rename would replace. None for a regular
    file, a link to one, or nothing there yet."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None  # nothing there (or nothing to see): the write itself says what is wrong
    if stat.S_ISDIR(mode):
        return f"{path} is a folder; name a file to write"
    if not stat.S_ISREG(mode):
        return f"{path} is not a regular file (a device, a FIFO or a socket), which writing there would replace"
    return None
