"""The cache's rows as stored bytes, readable without diskcache: what the store reads for every entry, and what
the CLI's warm path (:mod:`r1build.cli.fastpath`) reads to prove that entries are still the bytes a command
read before.

diskcache keeps a value under 32 KiB in its row (``mode`` raw) and a larger one in a value file that the row
names (``mode`` binary). This module knows those two shapes and nothing else of diskcache, so it imports
neither diskcache nor the store.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path

__all__ = ["DBNAME", "MODE_BINARY", "MODE_RAW", "UNREADABLE", "row_bytes", "stored_values"]

DBNAME = "cache.db"
"""diskcache's database file in the cache directory."""
MODE_RAW = 1
"""diskcache's mode of a value kept in its row (``diskcache.core.MODE_RAW``)."""
MODE_BINARY = 2
"""diskcache's mode of a value kept in a value file (``diskcache.core.MODE_BINARY``)."""
UNREADABLE = "stored as a value of another type"
"""Why a row whose value is neither shape cannot be read."""


def row_bytes(directory: Path, mode: object, filename: object, value: object) -> bytes | str | None:
    """The stored bytes of one row: its value, or its value file's bytes; a reason (str) when the row holds
    another kind of value; None when its value file is gone (replaced or evicted meanwhile: look again)."""
    if mode == MODE_RAW and isinstance(value, bytes):
        return bytes(value)
    if mode != MODE_BINARY or not filename:
        return UNREADABLE
    try:
        return (directory / str(filename)).read_bytes()
    except OSError:
        return None


def stored_values(directory: Path, keys: Iterable[str]) -> dict[str, bytes | str] | None:
    """The stored bytes (or why they cannot be read, a str) of each of ``keys`` that has a row, read from the
    cache in ``directory`` opened read-only; None when there is no readable cache there. A key without a row is
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
