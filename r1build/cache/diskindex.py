"""The index as diskcache writes it: diskcache's ``Cache`` over ``cache.db``, the one module that imports diskcache.

A run that only reads the cache never imports it: reads are r1build's own SQLite reads (:mod:`.index`), and an
existing cache is opened for writing at its first write (:class:`~.opening.DeferredIndex`). :class:`DiskIndex` is
the few calls the store makes (set, delete, transact, the settings, the size of the files, the consistency
check), each of diskcache's ``Timeout`` raised as :class:`~.index.IndexTimeout`. Value files are named after the
process that writes them (:class:`PidDisk`), so an import that was killed leaves files the next open can tell.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import diskcache
from diskcache.core import UNKNOWN

from ..filemode import folder_modes, private_file, private_folder
from .index import IndexTimeout
from .rows import value_file_problem

__all__ = ["DiskIndex", "PidDisk"]

_NOT_NUMBER = "typeof({}) NOT IN ('integer', 'real')"
"""SQL: the column holds no number (text, bytes or ``NULL`` in a damaged index)."""


def _value_name(filename: str, pid: int) -> str:
    return f"{filename.removesuffix('.val')}.p{pid}.val"


class PidDisk(diskcache.Disk):  # type: ignore[misc]
    """diskcache's file storage with the writing process's id in each value file's name, its value files and their
    two levels of folders made with the cache folder's modes (:func:`~r1build.filemode.folder_modes`: private
    unless the folder was made to share), whatever the umask."""

    def __init__(self, directory: str, **kwargs: Any) -> None:
        super().__init__(directory, **kwargs)
        self._folder_mode, self._file_mode = folder_modes(directory)

    def _write(self, full_path: str, iterator: Any, mode: str, encoding: str | None = None) -> int:
        """diskcache's ``_write`` (ten tries: another process may remove an empty folder meanwhile) with modes."""
        folder = Path(full_path).parent
        for attempt in range(10):
            with contextlib.suppress(OSError):
                private_folder(folder.parent, self._folder_mode)
                private_folder(folder, self._folder_mode)
            try:
                fd = private_file(full_path, self._file_mode)
            except OSError:
                if attempt == 9:
                    raise
                continue
            with os.fdopen(fd, "wb" if "b" in mode else "w", encoding=encoding) as writer:
                size = 0
                for chunk in iterator:
                    size += len(chunk)
                    writer.write(chunk)
                return size
        raise AssertionError("unreachable")

    def filename(self, key: Any = UNKNOWN, value: Any = UNKNOWN) -> tuple[str, str]:
        filename, full_path = super().filename(key, value)
        pid = os.getpid()
        return _value_name(filename, pid), _value_name(full_path, pid)

    def remove(self, file_path: str) -> None:
        """Delete a value file, only when it is one of the cache's own: a row of a planted or damaged index can
        name any path (absolute, ``..``, through a symbolic link), and diskcache deletes what the row names
        when its entry is replaced, deleted or evicted."""
        if value_file_problem(self._directory, file_path) is None:
            super().remove(file_path)


class DiskIndex:
    """diskcache's ``Cache`` over ``directory`` (opened, its tables made where missing), with each ``Timeout``
    raised as :class:`~.index.IndexTimeout`."""

    def __init__(self, directory: Path, timeout: float) -> None:
        self._dc = diskcache.Cache(str(directory), timeout=timeout, eviction_policy="least-recently-used", disk=PidDisk)
        self._mend_numbers()

    def _mend_numbers(self) -> None:
        """Numbers a damaged index holds as text or nothing made numbers again (SQLite keeps ``'x'`` in an INTEGER
        column): diskcache adds rows' sizes up in triggers and in Python, and one ``NULL`` size made the total
        ``NULL`` and every later write, size and check a TypeError. A row's size and times become 0 (hints for
        eviction: it goes first), the total the sum of the sizes; its bytes are untouched (reads verify them)."""
        sql = self._dc._sql
        damaged = sql(
            f"SELECT EXISTS (SELECT 1 FROM Cache WHERE {_NOT_NUMBER.format('size')} OR "
            f"{_NOT_NUMBER.format('access_time')} OR {_NOT_NUMBER.format('store_time')}) OR EXISTS (SELECT 1 FROM "
            f"Settings WHERE key IN ('size', 'count') AND {_NOT_NUMBER.format('value')})"
        ).fetchone()[0]
        if not damaged:
            return
        try:
            with self._dc.transact(retry=False):
                for column in ("size", "access_time", "store_time"):
                    sql(f"UPDATE Cache SET {column} = 0 WHERE {_NOT_NUMBER.format(column)}")
                sql("UPDATE Settings SET value = (SELECT COALESCE(SUM(size), 0) FROM Cache) WHERE key = 'size'")
                sql("UPDATE Settings SET value = (SELECT COUNT(*) FROM Cache) WHERE key = 'count'")
        except diskcache.Timeout:
            return  # another process holds the write lock: it or a later open mends them
        self._dc.reset("size")
        self._dc.reset("count")

    def set(self, key: str, value: Any, *, read: bool = False) -> None:
        """Store ``value`` (bytes, or a reader of them with ``read``) under ``key``; waits for no retry."""
        try:
            self._dc.set(key, value, read=read, retry=False)
        except diskcache.Timeout:
            raise IndexTimeout(f"writing {key}") from None

    def delete(self, key: str) -> bool:
        """Remove one entry; whether it was there."""
        try:
            return bool(self._dc.delete(key, retry=False))
        except diskcache.Timeout:
            raise IndexTimeout(f"deleting {key}") from None

    @contextlib.contextmanager
    def transact(self) -> Iterator[None]:
        """Hold the write lock for a batch of writes: other processes see all of them or none."""
        try:
            with self._dc.transact(retry=False):
                yield
        except diskcache.Timeout:
            raise IndexTimeout("a transaction") from None

    def reset(self, name: str, value: Any = None) -> Any:
        """A setting of the index (``size_limit``); with ``value``, stored first."""
        try:
            return self._dc.reset(name) if value is None else self._dc.reset(name, value)
        except diskcache.Timeout:
            raise IndexTimeout(f"setting {name}") from None

    def volume(self) -> int:
        """Bytes on disk: the database and the value files."""
        return int(self._dc.volume())

    def check(self, *, fix: bool) -> list[Any]:
        """diskcache's consistency check of the index and the value files (``fix``: repaired); its warnings."""
        try:
            return list(self._dc.check(fix=fix, retry=False))
        except diskcache.Timeout:
            raise IndexTimeout("checking the index") from None

    def close(self) -> None:
        self._dc.close()
