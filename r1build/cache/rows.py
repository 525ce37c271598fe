"""The cache's rows as stored bytes, readable without diskcache: what the store reads for every entry, and what
the CLI's warm path (:mod:`r1build.cli.fastpath`) reads to prove that entries are still the bytes a command
read before.

diskcache keeps a value under 32 KiB in its row (``mode`` raw) and a larger one in a value file that the row
names (``mode`` binary). This module knows those two shapes and nothing else of diskcache, so it imports
neither diskcache nor the store.
"""

from __future__ import annotations

import math
import os
import re
import sqlite3
import stat
from collections.abc import Iterable
from pathlib import Path

__all__ = [
    "DBNAME",
    "MODE_BINARY",
    "MODE_RAW",
    "UNREADABLE",
    "number",
    "read_value_file",
    "row_bytes",
    "stored_values",
    "value_file_problem",
]

DBNAME = "cache.db"
"""diskcache's database file in the cache directory."""
FORMAT = 1
"""Layout version of the cache directory, recorded in ``cache.db`` (``R1Meta``'s ``format`` row)."""
MODE_RAW = 1
"""diskcache's mode of a value kept in its row (``diskcache.core.MODE_RAW``)."""
MODE_BINARY = 2
"""diskcache's mode of a value kept in a value file (``diskcache.core.MODE_BINARY``)."""
UNREADABLE = "stored as a value of another type"
"""Why a row whose value is neither shape cannot be read."""
_VALUE_FILE = re.compile(r"[0-9a-f]{2}/[0-9a-f]{2}/[0-9a-f]{1,64}(?:\.p[0-9]{1,10})?\.val")
"""The name of a value file diskcache writes (with the writing process's id, :class:`~.index.PidDisk`)."""


def value_file_problem(directory: Path | str, filename: object) -> str | None:
    """Why the value file a row names must not be read, replaced or deleted (None when it may): a name other
    than diskcache's ``xx/yy/<hex>.val`` (an absolute path, ``..``: a planted row pointing outside the cache),
    or a symbolic link on the way (a planted link), or something that is not a plain file. A row of a hostile
    or damaged ``cache.db`` can name any path; without this, deleting its entry deleted that file."""
    name = str(filename)
    if not _VALUE_FILE.fullmatch(name):
        return f"its value file {name[:80]!r} is not a file of the cache (outside it, or not a name diskcache writes)"
    first, second, _ = name.split("/")
    base = Path(directory)
    for part in (first, f"{first}/{second}", name):
        try:
            mode = os.lstat(base / part).st_mode
        except FileNotFoundError:
            return None  # gone (replaced or evicted meanwhile): the caller looks again
        except OSError as exc:
            return f"its value file {name} cannot be read ({exc.strerror})"
        if stat.S_ISLNK(mode):
            return f"its value file {name} leads outside the cache through a symbolic link ({part})"
        if part == name and not stat.S_ISREG(mode):
            return f"its value file {name} is not a plain file"
    return None


def read_value_file(directory: Path | str, filename: object) -> bytes | str | None:
    """The bytes of the value file a row names; a reason (str) when it must not be read
    (:func:`value_file_problem`); None when it is gone."""
    problem = value_file_problem(directory, filename)
    if problem is not None:
        return problem
    try:
        # O_NONBLOCK: a FIFO planted in its place must not hold the read until someone writes to it
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        fd = os.open(Path(directory) / str(filename), flags)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"its value file {filename} cannot be read ({exc.strerror})"
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            return f"its value file {filename} is not a plain file"
        return fh.read()


def row_bytes(directory: Path, mode: object, filename: object, value: object) -> bytes | str | None:
    """The stored bytes of one row: its value, or its value file's bytes; a reason (str) when the row holds
    another kind of value; None when its value file is gone (replaced or evicted meanwhile: look again)."""
    if mode == MODE_RAW and isinstance(value, bytes):
        return bytes(value)
    if mode != MODE_BINARY or not filename:
        return UNREADABLE
    try:
        return read_value_file(directory, filename)
    except OSError:
        return None


def stored_values(directory: Path, keys: Iterable[str]) -> dict[str, bytes | str] | None:
    """The stored bytes (or why they cannot be read, a str) of each of ``keys`` that has a row, read from the
    cache in ``directory`` opened read-only; None when there is no readable cache there (none, or not of this
    layout: a warm replay then never answers for a cache every other command refuses). A key without a row is
    left out."""
    db = directory / DBNAME
    if not db.is_file():
        return None
    wanted = list(dict.fromkeys(keys))
    out: dict[str, bytes | str] = {}
    try:
        con = sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True, isolation_level=None)
    except sqlite3.Error:
        return None
    try:
        layout = con.execute("SELECT value FROM R1Meta WHERE name = 'format'").fetchall()
        if layout != [(FORMAT,)]:  # another layout, or a damaged row: no cache this r1build reads
            return None
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            marks = ",".join("?" * len(chunk))
            rows = con.execute(
                f"SELECT key, mode, filename, value FROM Cache WHERE raw = 1 AND key IN ({marks})", chunk
            ).fetchall()
            for key, mode, filename, value in rows:
                got = row_bytes(directory, mode, filename, value)
                out[str(key)] = got if got is not None else "its value file is missing"
    except sqlite3.Error:
        return None
    finally:
        con.close()
    return out


def number(value: object) -> float:
    """A number column of a ``Cache`` row (a time, a size, a mode) as SQLite returns it; 0 where a damaged row holds
    text, bytes, nothing or no finite number (SQLite keeps ``'x'`` in an INTEGER column): times and sizes are hints
    (eviction order, sizes shown), never a reason for a read or a cache command to fail."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0.0
    return float(value) if math.isfinite(value) else 0.0
