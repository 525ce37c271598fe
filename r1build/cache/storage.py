"""The cache's storage: entries on diskcache, each read verified and written packed (:mod:`.codec`).

:class:`Storage` is what every part of :class:`~r1build.cache.Cache` stands on: opening (:mod:`.opening`), plain
SQLite reads that never wait for writers, writes that wait up to ``timeout``, a last-used time refreshed at most
every ``touch_after`` seconds, hit/miss/corrupt counters flushed into lifetime totals, parsed decisions and gate
results remembered by payload digest, the read-only and tolerant (turned off after an error) modes, and the
:class:`Fallback` layer behind it. What is stored under which kind lives in :mod:`.blobs` and :mod:`.verdicts`;
listing, verifying and collecting garbage in :mod:`.maintenance`.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import sqlite3
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ..errors import CacheError
from ..events import Note, emit
from ..keys import digest_bytes
from .codec import HEADER, Corrupt, RecordKind, check_payload, decode, kind_of, pack, parse, verified
from .index import IMPORT_MARK, Connections, IndexTimeout, damage_error, damaged
from .location import resolve_cache_dir
from .opening import open_index
from .rows import number, row_bytes

if TYPE_CHECKING:
    from ..trust.signing import TrustedKeys

__all__ = ["DEFAULT_TIMEOUT", "TOUCH_AFTER", "Fallback", "Storage", "Unreadable"]

DEFAULT_TIMEOUT = 60.0
"""Seconds a write waits for another process's write before giving up."""
TOUCH_AFTER = 60.0
"""A read refreshes an entry's last-used time (for LRU eviction) only when it is older than this (seconds)."""
_MEMO_KINDS = frozenset({"decision", "gate"})
_MEMO_SIZE = 256

S = TypeVar("S", bound="Storage")


class Fallback(Protocol):
    """A second layer behind the local cache (the remote cache): asked only on a local miss."""

    def blob(self, digest: str) -> bytes | None:
        """The bytes whose sha256 is ``digest``, verified; None when absent, unusable or unreachable."""

    def record(self, kind: RecordKind, key: str, *, wait: bool = True) -> tuple[bytes, str] | None:
        """The payload of the record (``decision`` or ``gate``) under ``key``, its digest, shape and signature
        verified, with the id of the trusted key that signed it; None otherwise. ``wait=False``: a record the
        run can do without (a miss only costs local work) need not wait long for a remote not yet known to be
        up."""

    def stored(self, cache: Storage, kind: RecordKind, key: str, payload: bytes) -> None:
        """A record was stored locally (``payload`` under ``<kind>/<key>``): publish it if allowed."""

    def close(self) -> None:
        """The run is over (say what the layer did)."""


class Unreadable:
    """A stored row whose value cannot be read (missing value file, foreign value type)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


class _Chunks:
    """A reader (``read(n)``) of a value made of chunks, for diskcache to write a value file from."""

    def __init__(self, *parts: Iterable[bytes]) -> None:
        self._chunks = itertools.chain(*parts)

    def read(self, size: int = -1) -> bytes:
        """The next chunk (diskcache asks for 4 MiB, more than any chunk a bundle yields); b"" at the end."""
        return next(self._chunks, b"")


class Storage:
    """Verified entries in one cache directory. Safe to share between processes and threads.

    ``create=False`` refuses a directory that holds no cache (maintenance commands: a mistyped ``--cache-dir``
    must not become a new, empty, "intact" cache). ``tolerant`` turns the cache off, with one warning, at the
    first read or write that fails in the middle of a run instead of raising (see
    :func:`~r1build.cache.open_usable`).
    """

    def __init__(
        self,
        directory: Path | str | None = None,
        *,
        size_limit: int | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        touch_after: float = TOUCH_AFTER,
        create: bool = True,
        tolerant: bool = False,
    ) -> None:
        self.directory = resolve_cache_dir(directory)
        self.timeout = timeout
        self._lock = threading.Lock()
        self._hits: Counter[str] = Counter()
        self._misses: Counter[str] = Counter()
        self._corrupt: Counter[str] = Counter()
        self._memo: OrderedDict[tuple[str, str], Any] = OrderedDict()
        self.touch_after = touch_after
        """Seconds an entry's last-used time may lag behind its last read (0: exact LRU, a write per read)."""
        self.tolerant = tolerant
        self.read_only = False
        """Opened read-only: reads work, writes are skipped, maintenance raises :class:`CacheError`."""
        self.degraded: str | None = None
        """Why this cache cannot keep what is stored in it (read-only, a scratch stand-in, turned off), or None."""
        self._scratch: Path | None = None
        self.remote: Fallback | None = None
        """The layer behind this cache (the remote cache), asked on a miss; None for none."""
        self.fell_through: set[str] = set()
        """Keys this cache missed and handed to :attr:`remote` this run (asked of it, or passed over while it
        was off): what a later run may find there, so a record of this run's reads does not prove its answer."""
        self._revocations: set[str] = set()
        self.trusted: TrustedKeys | None = None
        """The keys the project trusts now (its manifest's ``trusted-keys``), set by the commands that read records
        for a project: a record kept here on the strength of a signature (fetched from the remote cache, imported
        from a signed bundle) whose signer is no longer among them is not used. None: no such check."""
        self.read_log: dict[str, str | None] | None = None
        """When a dict: every entry this cache reads, by full key, and the sha256 of the bytes it found stored
        (None: no entry; ``unreadable``: a row whose value could not be read). The CLI's warm path records it
        to prove later that a command would read the same bytes again."""
        opened = open_index(self.directory, timeout=timeout, size_limit=size_limit, create=create)
        if opened.read_only is not None:
            self.read_only = True
            self.degraded = f"read-only: {opened.read_only}"
        self._index: Any = opened.index
        self._sql: Connections = opened.connections

    def _refuse_read_only(self, what: str) -> None:
        if self.read_only:
            raise CacheError(
                f"the cache at {self.directory} is read-only for this process: cannot {what} "
                "(use a cache of your own with --cache-dir or R1BUILD_CACHE_DIR, or ask its owner)"
            )

    def _turn_off(self, exc: BaseException) -> None:
        """Tolerant caches: stop using the cache for the rest of the run, with one warning."""
        with self._lock:
            first = self.degraded is None or self.read_only
            self.degraded = f"turned off after an error: {exc}"
        if first:
            emit(
                Note(
                    "warning",
                    f"the cache at {self.directory} failed ({exc}); going on without it for the rest "
                    f"of this run (`r1build cache verify --cache-dir {self.directory}` checks it)",
                )
            )

    @property
    def _off(self) -> bool:
        return self.degraded is not None and self.degraded.startswith("turned off")

    @contextlib.contextmanager
    def importing(self) -> Iterator[None]:
        """Mark an import in progress (committed before it writes anything), so that the files of a killed or
        failed import are removed at the next open after its process is gone; the mark is cleared when the block
        completes."""
        self._refuse_read_only("import into it")
        name = f"{IMPORT_MARK}{os.getpid()}"
        try:
            self._sql.execute("INSERT OR REPLACE INTO R1Meta VALUES (?, ?)", (name, time.time()))
        except sqlite3.Error as exc:
            raise CacheError(f"cannot import into the cache at {self.directory}: {exc}") from None
        yield  # an import that fails keeps its mark: the value files it wrote go once this process is gone
        with contextlib.suppress(sqlite3.Error):
            self._sql.execute("DELETE FROM R1Meta WHERE name = ?", (name,))

    def flush_stats(self) -> None:
        """Add this process's hit/miss/corrupt counts to the lifetime totals and reset them."""
        with self._lock:
            items = [
                (f"{name}/{kind}", n)
                for name, counter in (("hit", self._hits), ("miss", self._misses), ("corrupt", self._corrupt))
                for kind, n in counter.items()
                if n
            ]
            self._hits.clear()
            self._misses.clear()
            self._corrupt.clear()
        if not items or self.read_only or self._off:
            return
        upsert = "INSERT INTO R1Stats VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET value = value + excluded.value"
        try:
            with self._sql.transaction():
                for name, n in items:
                    self._sql.execute(upsert, (name, n))
        except sqlite3.Error as exc:
            emit(Note("warning", f"could not record cache statistics in {self.directory}: {exc}"))

    def close(self) -> None:
        """Flush this process's statistics into the lifetime totals and close (reopens on next use)."""
        if self.remote is not None:
            self.remote.close()
        self.flush_stats()
        self._index.close()
        self._sql.close()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)

    def __enter__(self: S) -> S:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """Hold the write lock for a batch of writes: other processes see all of them or none."""
        self._refuse_read_only("write to it")
        try:
            with self._index.transact():
                yield
        except IndexTimeout:
            raise CacheError(f"cache at {self.directory} stayed locked for {self.timeout:g} s") from None

    # -- storage primitives ------------------------------------------------------------------------------
    def _locked(self, what: str) -> CacheError:
        return CacheError(f"cache at {self.directory} stayed locked for {self.timeout:g} s ({what})")

    def _query(self, statement: str, params: tuple[Any, ...] = ()) -> list[Any]:
        """Read diskcache's ``Cache`` table directly: no access-time update, no unpickling."""
        if self._off:
            return []
        try:
            return list(self._sql.execute(statement, params).fetchall())
        except sqlite3.Error as exc:
            if self.tolerant:
                self._turn_off(exc)
                return []
            if damaged(exc):
                raise damage_error(self.directory, exc) from None
            raise CacheError(f"cannot read the cache at {self.directory}: {exc}") from None

    def _put(self, key: str, payload: bytes, digest: str | None = None) -> None:
        self._set(key, pack(digest or digest_bytes(payload), payload))

    def _set(self, key: str, raw: bytes | _Chunks) -> None:
        """Store ``raw`` (the packed value, or a reader of it) under ``key``."""
        if self.read_only or self._off:
            return  # said once, when the cache was opened read-only or turned off
        try:
            self._index.set(key, raw, read=isinstance(raw, _Chunks))
        except IndexTimeout:
            if self.tolerant:
                self._turn_off(self._locked(f"writing {key}"))
                return
            raise self._locked(f"writing {key}") from None
        except (OSError, sqlite3.Error) as exc:
            if self.tolerant:
                self._turn_off(exc)
                return
            raise CacheError(f"cannot write {key} to the cache at {self.directory}: {exc}") from None

    def _stored(self, key: str, *, touch: bool = False) -> bytes | Unreadable | None:
        """The stored value (None when absent), read as a plain SQLite reader that never waits for writers.

        With ``touch``, the entry's last-used time is refreshed when it is older than ``touch_after`` seconds:
        the only write a read makes, and a rare one.
        """
        for _ in range(3):
            rows = self._query(
                "SELECT rowid, access_time, mode, filename, value FROM Cache WHERE key = ? AND raw = 1", (key,)
            )
            if not rows:
                return self._logged(key, None)
            rowid, used, mode, filename, value = rows[0]
            raw = row_bytes(self.directory, mode, filename, value)
            if raw is None:
                continue  # its value file was replaced or evicted meanwhile: look again
            if isinstance(raw, str):
                return self._logged(key, Unreadable(raw))
            now = time.time()
            if touch and not self.read_only and now - number(used) >= self.touch_after:
                with contextlib.suppress(sqlite3.Error):  # the last-used time is a hint: never fail a read
                    self._sql.execute("UPDATE Cache SET access_time = ? WHERE rowid = ?", (now, rowid))
            return self._logged(key, raw)
        return self._logged(key, Unreadable("its value file is missing"))

    def _logged(self, key: str, stored: bytes | Unreadable | None) -> bytes | Unreadable | None:
        """``stored``, noted in :attr:`read_log` when one is kept."""
        if self.read_log is not None:
            self.read_log[key] = (
                digest_bytes(stored) if isinstance(stored, bytes) else None if stored is None else "unreadable"
            )
        return stored

    def _read(self, key: str) -> Any | None:
        """The verified value under ``key`` (bytes for blobs, a record, a JSON value), counting a hit or miss."""
        kind = kind_of(key)
        raw = self._stored(key, touch=True)
        reason = raw.reason if isinstance(raw, Unreadable) else None
        value = None
        if isinstance(raw, bytes):
            try:
                value = self._decode(key, raw)
            except Corrupt as corrupt:
                reason = corrupt.reason
        with self._lock:
            if raw is None or reason is not None:
                self._misses[kind] += 1
            else:
                self._hits[kind] += 1
            if reason is not None:
                self._corrupt[kind] += 1
        if reason is not None:
            emit(Note("warning", f"cache entry {key} is corrupt ({reason}); ignoring it"))
        return value

    def _decode(self, key: str, raw: bytes) -> Any:
        """:func:`~r1build.cache.codec.decode` with parsed decisions and gate results remembered by payload digest."""
        kind = kind_of(key)
        if kind not in _MEMO_KINDS:
            return decode(key, raw)
        digest, payload = verified(raw)  # verified on every read, remembered or not
        memo_key = (key, digest)
        with self._lock:
            if memo_key in self._memo:
                self._memo.move_to_end(memo_key)
                return self._memo[memo_key]
        value = parse(key, payload, digest)
        with self._lock:
            self._memo[memo_key] = value
            while len(self._memo) > _MEMO_SIZE:
                self._memo.popitem(last=False)
        return value

    # -- raw verified access (bundles) -------------------------------------------------------------------
    def peek(self, key: str) -> bytes | None:
        """The verified payload under ``key`` without counting a read or refreshing its age; None if unusable."""
        stored = self._stored(key)
        if not isinstance(stored, bytes):
            return None
        try:
            decode(key, stored)
        except Corrupt:
            return None
        return stored[HEADER:]

    def put_raw(self, key: str, payload: bytes) -> None:
        """Store ``payload`` under the full ``key``; :class:`ValueError` when it does not fit the key."""
        reason = check_payload(key, payload)
        if reason is not None:
            raise ValueError(f"cannot store {key}: {reason}")
        self._put(key, payload)

    def put_stream(self, key: str, digest: str, chunks: Iterable[bytes]) -> None:
        """Store the payload that ``chunks`` yield, whose sha256 is ``digest``, under the full ``key`` as a value
        file written as the chunks come (a large blob of a bundle is never held whole). The producer of the chunks
        checks them: an exception from it stores nothing (the value file it leaves is the import's, removed as an
        interrupted import's once this process is gone)."""
        self._set(key, _Chunks([digest.encode() + b"\n"], chunks))

    def delete(self, key: str) -> bool:
        """Remove one entry; whether it was there."""
        self._refuse_read_only("delete from it")
        try:
            return bool(self._index.delete(key))
        except IndexTimeout:
            raise self._locked(f"deleting {key}") from None
