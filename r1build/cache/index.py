"""How the cache's index (``cache.db``, diskcache's SQLite database) is opened when it is not simply there and
writable: telling damage from a read-only location, reading a read-only index, naming value files after the
process that writes them, and removing the files of an import that was killed.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import diskcache
from diskcache.core import ENOVAL, UNKNOWN

from ..errors import CacheDamagedError, CacheError
from ..events import Note, emit
from .rows import DBNAME

__all__ = [
    "DBNAME",
    "IMPORT_MARK",
    "PidDisk",
    "ReadOnlyIndex",
    "damage_error",
    "damaged",
    "looks_read_only",
    "process_gone",
    "sql",
    "sweep_interrupted_imports",
]

IMPORT_MARK = "import/"
"""Prefix of the ``R1Meta`` rows of imports in progress: ``import/<pid>`` -> start time."""
DAMAGED_WORDS = ("not a database", "malformed", "disk image", "file is encrypted")
READ_ONLY_WORDS = ("readonly", "read-only", "unable to open database file", "permission denied")


def damaged(exc: BaseException) -> bool:
    """Whether SQLite's error says the index itself is damaged (not a database, malformed)."""
    return any(word in str(exc).lower() for word in DAMAGED_WORDS)


def damage_error(directory: Path, exc: BaseException) -> CacheDamagedError:
    """The error for a damaged index, naming the fix."""
    error = CacheDamagedError(
        f"the cache index {directory / DBNAME} is damaged ({exc}); "
        f"`r1build cache repair --cache-dir {directory}` rebuilds it"
    )
    error.reason = str(exc)
    return error


def looks_read_only(exc: BaseException, directory: Path) -> bool:
    """Whether opening failed because this process may not write the cache (it may still read it)."""
    if any(word in str(exc).lower() for word in READ_ONLY_WORDS):
        return True
    return not os.access(directory, os.W_OK) or not os.access(directory / DBNAME, os.W_OK)


def sql(index: Any) -> Callable[..., sqlite3.Cursor]:
    """``execute`` of the index's SQLite connection for this thread, for r1build's own tables and queries.

    diskcache keeps that connection behind its private ``_sql``; this is the one place that reads it (a
    :class:`ReadOnlyIndex` answers it too), so a diskcache that renames it breaks here alone."""
    return index._sql  # type: ignore[no-any-return]


def _value_name(filename: str, pid: int) -> str:
    return f"{filename.removesuffix('.val')}.p{pid}.val"


class PidDisk(diskcache.Disk):  # type: ignore[misc]
    """diskcache's file storage with the writing process's id in each value file's name."""

    def filename(self, key: Any = UNKNOWN, value: Any = UNKNOWN) -> tuple[str, str]:
        filename, full_path = super().filename(key, value)
        pid = os.getpid()
        return _value_name(filename, pid), _value_name(full_path, pid)


def process_gone(pid: int) -> bool:
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # someone else's process: alive
        return False
    return False


class ReadOnlyIndex:
    """``cache.db`` opened read-only, answering the few diskcache calls the store makes for reading.

    ``mode=ro`` reads a cache another process has open (its WAL files exist); where they do not and cannot be
    created (a folder this process may not write), ``immutable=1`` reads the database file as it is.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = str(directory)
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        base = (directory / DBNAME).resolve().as_uri()
        self._uri = ""
        last: sqlite3.Error | None = None
        for query in ("?mode=ro", "?immutable=1"):
            try:
                con = sqlite3.connect(base + query, uri=True)
                try:
                    con.execute("SELECT count(*) FROM Cache").fetchall()
                finally:
                    con.close()
            except sqlite3.Error as exc:
                last = exc
                continue
            self._uri = base + query
            return
        if last is not None and damaged(last):
            raise damage_error(directory, last)
        raise CacheError(f"cannot read the cache at {directory}: {last}")

    @property
    def _sql(self) -> Callable[..., sqlite3.Cursor]:
        con = getattr(self._local, "con", None)
        if con is None:
            con = sqlite3.connect(self._uri, uri=True, isolation_level=None, check_same_thread=False)
            self._local.con = con
            with self._all_lock:
                self._all.append(con)
        return con.execute

    def reset(self, key: str, value: Any = ENOVAL) -> Any:
        if value is not ENOVAL:
            raise sqlite3.OperationalError("attempt to write a readonly database")
        rows = self._sql("SELECT value FROM Settings WHERE key = ?", (key,)).fetchall()
        return rows[0][0] if rows else 0

    def volume(self) -> int:
        ((pages,),) = self._sql("PRAGMA page_count").fetchall()
        ((page_size,),) = self._sql("PRAGMA page_size").fetchall()
        return int(pages) * int(page_size) + int(self.reset("size") or 0)

    def close(self) -> None:
        """Close every thread's connection (a thread that reads again opens a new one)."""
        with self._all_lock:
            connections, self._all = self._all, []
        for con in connections:
            con.close()
        self._local = threading.local()


def sweep_interrupted_imports(dc: diskcache.Cache, directory: Path) -> None:
    """Remove the value files of imports whose process is gone (killed before its transaction committed)."""
    rows = sql(dc)("SELECT name FROM R1Meta WHERE substr(name, 1, ?) = ?", (len(IMPORT_MARK), IMPORT_MARK)).fetchall()
    for (name,) in rows:
        pid_text = str(name)[len(IMPORT_MARK) :]
        if not pid_text.isdigit() or not process_gone(int(pid_text)):
            continue
        pid = int(pid_text)
        referenced = {
            str(f)
            for (f,) in sql(dc)("SELECT filename FROM Cache WHERE filename LIKE ?", (f"%.p{pid}.val",)).fetchall()
        }
        removed = 0
        freed = 0
        for path in directory.glob(f"[0-9a-f][0-9a-f]/[0-9a-f][0-9a-f]/*.p{pid}.val"):
            if path.relative_to(directory).as_posix() in referenced:
                continue
            with contextlib.suppress(OSError):
                freed += path.stat().st_size
                path.unlink()
                removed += 1
        with dc.transact(retry=True):
            sql(dc)("DELETE FROM R1Meta WHERE name = ?", (name,))
        if removed:
            emit(
                Note(
                    "info",
                    f"removed {removed} file(s) ({freed} bytes) left in {directory} by an "
                    f"interrupted cache import (process {pid})",
                )
            )
