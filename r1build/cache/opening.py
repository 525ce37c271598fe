"""Opening a cache directory: refusing a location that is no cache, creating r1build's own tables in a new one,
checking the layout version of an old one, waiting while another process creates it, and falling back to a
read-only index where this process may not write (how the index itself is read then: :mod:`.index`)."""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import threading
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..convert import record
from ..errors import CacheError, CacheLocationError
from ..events import Note, emit
from ..filemode import folder_modes, private_file, private_folder
from .index import (
    Connections,
    IndexTimeout,
    ReadOnlyIndex,
    damage_error,
    damaged,
    looks_read_only,
    sweep_interrupted_imports,
)
from .rows import DBNAME, FORMAT

if TYPE_CHECKING:
    from .diskindex import DiskIndex

__all__ = ["DEFAULT_SIZE_LIMIT", "FORMAT", "DeferredIndex", "Opened", "open_index"]

DEFAULT_SIZE_LIMIT = 4 * 1024**3
"""Size limit of a new cache, in bytes."""

_CACHE_FILE = re.compile(
    r"^(cache\.db(-wal|-shm|-journal)?|cache\.db\.damaged-[0-9TZ]+(-wal|-shm)?|[0-9a-f]{2}|claims"
    r"|\.?nvcc-versions\.json(\.\d+\.tmp)?)$"
)  # nvcc-versions: the toolchain's memo (r1build.toolchain.nvcc)


def _cache_file(name: str) -> bool:
    """Whether a name is one diskcache itself creates (another process may be creating the cache right now, and
    SQLite creates ``cache.db`` only at its first statement), a damaged index that repair moved aside, or the
    folder of the per-key claims (:mod:`r1build.cache.claim`)."""
    return _CACHE_FILE.match(name) is not None


@record(frozen=True)
class Opened:
    """An opened index, r1build's own connections to it, and why it is read-only (None: writable)."""

    index: Any
    """A :class:`~r1build.cache.diskindex.DiskIndex`, a :class:`DeferredIndex` (opened at the first write) or a
    :class:`~r1build.cache.index.ReadOnlyIndex`."""
    connections: Connections
    read_only: BaseException | None


def _dangling(path: Path) -> bool:
    try:
        return path.is_symlink() and not path.exists()
    except OSError:
        return False


def open_index(directory: Path, *, timeout: float, size_limit: int | None, create: bool) -> Opened:
    """Open (``create``: or create) the cache index in ``directory``; a new cache gets the default size limit,
    ``size_limit`` replaces the stored one. :class:`~r1build.errors.CacheLocationError` for a location that is
    no cache, :class:`~r1build.errors.CacheError` (or its damage subclass) when it cannot be opened.

    A cache that is there, of this layout and writable by this process is opened for reading alone; diskcache
    opens it at the first write (:class:`DeferredIndex`): a run the cache answers never imports it."""
    _check_location(directory, create)
    _create_index_file(directory)
    if size_limit is None:
        ready = _open_ready(directory, timeout)
        if ready is not None:
            return ready
    deadline = time.monotonic() + timeout
    while True:
        index: DiskIndex | None = None
        connections = Connections(str(directory / DBNAME), timeout=timeout, tune=True)
        try:
            index = _disk_index(directory, timeout)
            fresh = _prepare(connections, directory)
            if size_limit is not None or fresh:
                index.reset("size_limit", size_limit if size_limit is not None else DEFAULT_SIZE_LIMIT)
            sweep_interrupted_imports(connections, directory)
            return Opened(index, connections, None)
        except (sqlite3.OperationalError, IndexTimeout) as exc:
            connections.close()
            if index is not None:
                index.close()
            busy = isinstance(exc, IndexTimeout) or "locked" in str(exc) or "busy" in str(exc)
            if not busy and (directory / DBNAME).is_file() and looks_read_only(exc, directory):
                return _open_read_only(directory, exc)
            if not busy or time.monotonic() > deadline:
                raise _unusable(directory, exc) from None
            time.sleep(0.02)
        except (OSError, sqlite3.Error) as exc:
            connections.close()
            if index is not None:
                index.close()
            if isinstance(exc, OSError) and (directory / DBNAME).is_file() and looks_read_only(exc, directory):
                return _open_read_only(directory, exc)
            raise _unusable(directory, exc) from None


def _check_location(d: Path, create: bool) -> None:
    """Refuse a location that is no cache (a file, a folder of other files; without ``create``, one that holds no
    cache) and make the folder, private, where it is missing."""
    try:
        if d.exists() and not d.is_dir():
            raise CacheLocationError(f"cache directory {d} is not a directory")
        if not create and (d / DBNAME).exists() and not (d / DBNAME).is_file():  # a run goes on with a scratch one
            raise CacheLocationError(
                f"{d / DBNAME} is there but is no file (a folder, a device or a FIFO): the cache's index is damaged "
                "beyond repair; move it away and start a new cache"
            )
        if not create and not (d / DBNAME).is_file():
            raise CacheLocationError(
                f"{d} holds no r1build cache (no {DBNAME}): nothing has been cached there, or the path is "
                "mistyped (--cache-dir, R1BUILD_CACHE_DIR)"
            )
        if d.is_dir() and not (d / DBNAME).exists() and any(not _cache_file(p.name) for p in d.iterdir()):
            raise CacheLocationError(f"{d} is not empty and holds no r1build cache; choose a new or empty directory")
        private_folder(d)
    except OSError as exc:
        if not create:  # a maintenance command, given a path that can hold no cache (a name too long, say)
            raise CacheLocationError(f"cannot use {d} as the cache directory: {exc.strerror}") from None
        why = f"it is a symbolic link to {d.readlink()}, which does not exist" if _dangling(d) else str(exc)
        raise CacheError(f"cannot create the cache directory {d}: {why}") from None


def _open_ready(directory: Path, timeout: float) -> Opened | None:
    """The index of a cache that is there, of this layout and writable, opened for reading (diskcache deferred to
    the first write); None for any other (new, being made, read-only, damaged, another layout, busy): the full
    opening says what it is."""
    db = directory / DBNAME
    if not (os.access(directory, os.W_OK) and os.access(db, os.W_OK)) or db.stat().st_size == 0:
        return None
    connections = Connections(str(db), timeout=timeout, tune=True)
    try:
        rows = connections.execute("SELECT value FROM R1Meta WHERE name = 'format'").fetchall()
        if not rows or rows[0][0] != FORMAT:
            connections.close()
            return None
        sweep_interrupted_imports(connections, directory)
    except sqlite3.Error:
        connections.close()
        return None
    return Opened(DeferredIndex(directory, timeout), connections, None)


def _disk_index(directory: Path, timeout: float) -> DiskIndex:
    from .diskindex import DiskIndex  # here: only a write (or a new cache) needs diskcache

    return DiskIndex(directory, timeout)


class DeferredIndex:
    """The index of a cache opened for reading, as :class:`~.diskindex.DiskIndex` answers for it: diskcache opens
    it at the first call (a write, a setting, the size of the files), once, whichever thread asks first."""

    def __init__(self, directory: Path, timeout: float) -> None:
        self.directory = directory
        self.timeout = timeout
        self._index: DiskIndex | None = None
        self._lock = threading.Lock()

    def _opened(self) -> DiskIndex:
        with self._lock:
            if self._index is None:
                self._index = _disk_index(self.directory, self.timeout)
            return self._index

    def set(self, key: str, value: Any, *, read: bool = False) -> None:
        self._opened().set(key, value, read=read)

    def delete(self, key: str) -> bool:
        return self._opened().delete(key)

    def transact(self) -> AbstractContextManager[None]:
        return self._opened().transact()

    def reset(self, name: str, value: Any = None) -> Any:
        return self._opened().reset(name, value)

    def volume(self) -> int:
        return self._opened().volume()

    def check(self, *, fix: bool) -> list[Any]:
        return self._opened().check(fix=fix)

    def close(self) -> None:
        """Close diskcache's connection where it was opened (a later call opens it again)."""
        with self._lock:
            index, self._index = self._index, None
        if index is not None:
            index.close()


def _create_index_file(directory: Path) -> None:
    """An empty ``cache.db`` (SQLite takes it for a new database) with the folder's file mode, made before SQLite
    makes it 0644 less the umask; its ``-wal`` and ``-shm`` files take the database's mode. Nothing where it
    exists, or cannot be made (a cache this process may only read: opening says so)."""
    if (directory / DBNAME).exists():
        return
    with contextlib.suppress(OSError):
        os.close(private_file(directory / DBNAME, folder_modes(directory)[1]))


def _unusable(directory: Path, exc: BaseException) -> CacheError:
    if damaged(exc):
        return damage_error(directory, exc)
    return CacheError(f"cannot open the cache at {directory}: {exc}")


def _open_read_only(directory: Path, why: BaseException) -> Opened:
    index = ReadOnlyIndex(directory)
    rows = index.connections.execute("SELECT value FROM R1Meta WHERE name = 'format'").fetchall()
    if rows and rows[0][0] != FORMAT:
        raise CacheError(f"the cache at {directory} has layout {rows[0][0]!r}; this r1build reads layout {FORMAT}")
    emit(
        Note(
            "warning",
            f"the cache at {directory} is read-only for this process ({why}): reading it, storing nothing new",
        )
    )
    return Opened(index, index.connections, why)


def _prepare(sql: Connections, directory: Path) -> bool:
    """Create r1build's own tables once; True when this call made the cache (it is new)."""
    with contextlib.suppress(sqlite3.OperationalError):
        rows = sql.execute("SELECT value FROM R1Meta WHERE name = 'format'").fetchall()
        if rows:
            _check_format(directory, rows[0][0])
            return False
    with sql.transaction():
        sql.execute("CREATE TABLE IF NOT EXISTS R1Meta (name TEXT PRIMARY KEY, value)")
        sql.execute("CREATE TABLE IF NOT EXISTS R1Stats (name TEXT PRIMARY KEY, value INTEGER NOT NULL)")
        fresh = bool(sql.execute("INSERT OR IGNORE INTO R1Meta VALUES ('format', ?)", (FORMAT,)).rowcount == 1)
        ((fmt,),) = sql.execute("SELECT value FROM R1Meta WHERE name = 'format'").fetchall()
    _check_format(directory, fmt)
    return fresh


def _check_format(directory: Path, fmt: object) -> None:
    if fmt != FORMAT:
        raise CacheError(f"the cache at {directory} has layout {fmt!r}; this r1build reads layout {FORMAT}")
