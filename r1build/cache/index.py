"""How the cache's index (``cache.db``, diskcache's SQLite database) is reached and opened when it is not simply
there and writable: r1build's own connections to it, telling damage from a read-only location, reading a read-only
index, the timeout of a write, and removing the files of an import that was killed (diskcache itself, and the names
of the value files it writes: :mod:`.diskindex`).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import CacheDamagedError, CacheError
from ..events import Note, emit
from .rows import DBNAME, number, value_file_problem

__all__ = [
    "DBNAME",
    "IMPORT_MARK",
    "Connections",
    "IndexTimeout",
    "ReadOnlyIndex",
    "damage_error",
    "damaged",
    "looks_read_only",
    "pid_in",
    "process_gone",
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


class IndexTimeout(Exception):
    """Another process held the index's write lock for the whole timeout (diskcache's ``Timeout``, raised as this
    so that no module but :mod:`.diskindex` imports diskcache)."""


class Connections:
    """r1build's own SQLite connections to ``cache.db``, one per thread (and per process, after a fork), for its
    own tables (``R1Meta``, ``R1Stats``) and its plain reads of diskcache's ``Cache`` table: diskcache's own
    connection is private to it. Autocommit, like diskcache's; :meth:`transaction` for a batch."""

    def __init__(self, database: str, *, timeout: float = 60.0, uri: bool = False, tune: bool = False) -> None:
        self.database = database
        self.timeout = timeout
        self.uri = uri
        self.tune = tune
        """Set diskcache's per-connection pragmas (synchronous, cache and mmap size) on each connection."""
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    def _connection(self) -> sqlite3.Connection:
        con: sqlite3.Connection | None = getattr(self._local, "con", None)
        if con is not None and self._local.pid == os.getpid():
            return con
        con = sqlite3.connect(
            self.database, timeout=self.timeout, uri=self.uri, isolation_level=None, check_same_thread=False
        )
        if self.tune:
            for pragma in _TUNING:
                con.execute(pragma)
        self._local.con, self._local.pid = con, os.getpid()
        with self._lock:
            self._all.append(con)
        return con

    def execute(self, statement: str, params: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        """Run one statement on this thread's connection."""
        return self._connection().execute(statement, params)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """Hold the write lock for a batch of statements: other processes see all of them or none."""
        con = self._connection()
        con.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            con.execute("ROLLBACK")
            raise
        con.execute("COMMIT")

    def close(self) -> None:
        """Close every thread's connection (a thread that runs a statement again opens a new one)."""
        with self._lock:
            connections, self._all = self._all, []
        for con in connections:
            con.close()
        self._local = threading.local()


_TUNING = ("PRAGMA synchronous = 1", "PRAGMA cache_size = 8192", "PRAGMA mmap_size = 67108864")
"""diskcache's per-connection defaults (``sqlite_*`` settings): WAL commits without a sync each, and its caches."""


def process_gone(pid: int) -> bool:
    """Whether no process has ``pid`` now (this one's is never gone). A pid beyond what the system takes (a name
    planted or damaged, ``import/99999999999999999999``) is no process of ours: not gone, its files are left."""
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (OSError, OverflowError):  # someone else's process: alive; or a pid no process can have
        return False
    return False


def pid_in(text: str) -> int | None:
    """The process id ``text`` spells in ASCII digits, else None (``str.isdigit`` also takes ``'²'``, which
    ``int`` refuses)."""
    return int(text) if text.isascii() and text.isdigit() else None


class ReadOnlyIndex:
    """``cache.db`` opened read-only, answering the few diskcache calls the store makes for reading.

    ``mode=ro`` reads a cache another process has open (its WAL files exist); where they do not and cannot be
    created (a folder this process may not write), ``immutable=1`` reads the database file as it is.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = str(directory)
        base = (directory / DBNAME).resolve().as_uri()
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
            self.connections = Connections(base + query, uri=True)
            """The connections every read of this index uses."""
            return
        if last is not None and damaged(last):
            raise damage_error(directory, last)
        raise CacheError(f"cannot read the cache at {directory}: {last}")

    def reset(self, key: str, value: Any = None) -> Any:
        if value is not None:
            raise sqlite3.OperationalError("attempt to write a readonly database")
        rows = self.connections.execute("SELECT value FROM Settings WHERE key = ?", (key,)).fetchall()
        return rows[0][0] if rows else 0

    def volume(self) -> int:
        ((pages,),) = self.connections.execute("PRAGMA page_count").fetchall()
        ((page_size,),) = self.connections.execute("PRAGMA page_size").fetchall()
        return int(pages) * int(page_size) + int(number(self.reset("size")))

    def close(self) -> None:
        """Close every thread's connection (a thread that reads again opens a new one)."""
        self.connections.close()


def sweep_interrupted_imports(sql: Connections, directory: Path) -> None:
    """Remove the value files of imports whose process is gone (killed before its transaction committed)."""
    rows = sql.execute(
        "SELECT name FROM R1Meta WHERE substr(name, 1, ?) = ?", (len(IMPORT_MARK), IMPORT_MARK)
    ).fetchall()
    for (name,) in rows:
        pid = pid_in(str(name)[len(IMPORT_MARK) :])
        if pid is None or not process_gone(pid):
            continue
        referenced = {
            str(f)
            for (f,) in sql.execute("SELECT filename FROM Cache WHERE filename LIKE ?", (f"%.p{pid}.val",)).fetchall()
        }
        removed = 0
        freed = 0
        for path in directory.glob(f"[0-9a-f][0-9a-f]/[0-9a-f][0-9a-f]/*.p{pid}.val"):
            rel = path.relative_to(directory).as_posix()
            if rel in referenced or value_file_problem(directory, rel) is not None:
                continue  # in use, or reached through a planted symbolic link: not the import's file
            with contextlib.suppress(OSError):
                freed += path.stat().st_size
                path.unlink()
                removed += 1
        sql.execute("DELETE FROM R1Meta WHERE name = ?", (name,))
        if removed:
            emit(
                Note(
                    "info",
                    f"removed {removed} file(s) ({freed} bytes) left in {directory} by an "
                    f"interrupted cache import (process {pid})",
                )
            )
