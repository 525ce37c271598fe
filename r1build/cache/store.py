"""The content-addressed cache on diskcache.

Four kinds of entries, each under its own key prefix:

``blob/<sha256>``
    Bytes (candidate sources, transcripts) keyed by the sha256 of the bytes themselves.
``decision/<decision key>``
    A :class:`~r1build.records.Decision` as JSON.
``gate/<gate key>``
    A static-gate :class:`~r1build.records.Result` keyed by source digest, arch, flags and toolchain.
``json/<namespace>/<key>``
    Small JSON documents (per-device measurements such as bandwidth floors).

Integrity
    Every value is stored as ``<sha256 of payload>\\n<payload>`` and verified on every read: a digest mismatch,
    a blob whose key is not its content's digest, or a record that no longer parses is a miss, reported through
    :mod:`r1build.events`, never returned. Storing a blob again heals a corrupt copy.

Where
    The directory is the one given, else ``$R1BUILD_CACHE_DIR``, else the platform's user cache directory
    (platformdirs). diskcache keeps values under 32 KiB inside its SQLite database (``cache.db``) and larger
    ones as files in two levels of sub-directories.

Several processes
    diskcache runs SQLite in WAL mode. Reads are plain SQLite reads that never wait for writers; writers wait
    for each other up to ``timeout`` seconds (then :class:`~r1build.errors.CacheError`). Opening retries while
    another process is creating the same directory. A non-empty directory that holds no cache is refused, so
    ``gc`` never deletes foreign files.

Damaged, read-only, missing
    The cache only ever speeds things up. A ``cache.db`` that is not a database or is malformed raises
    :class:`~r1build.errors.CacheDamagedError` (``r1build cache repair`` rebuilds it, see :mod:`.repair`). A
    cache this process may not write (a shared cache owned by another user, a read-only file system) is opened
    read-only: reads work, writes are skipped, maintenance is refused. :func:`open_usable` is how builds and
    project commands open it: a damaged or uncreatable cache becomes a scratch cache for the run, a read error
    in the middle of a run turns the cache off for the rest of it; either with one warning. How the index is
    opened in these cases lives in :mod:`.index`.

Interrupted imports
    Value files carry the id of the process that wrote them (``<hex>.p<pid>.val``), and a bundle import
    records itself in ``R1Meta`` before it writes anything. When an import is killed, SQLite rolls its
    transaction back; the next open finds the record of a process that is gone and removes the value files it
    left behind (``gc`` removes any unreferenced value file too).

Size
    The size limit (4 GiB for a new cache) is stored in the cache and shared by every process; each write
    evicts the least recently used entries (diskcache culls up to ten at a time) while the cache is over it.
    :meth:`Cache.gc` evicts one entry at a time down to a new limit. A read refreshes an entry's last-used time
    only when it is older than ``touch_after`` (60 s), so a warm read writes nothing (diskcache's own LRU ``get``
    writes on every read, which costs a write lock and, now and then, a WAL checkpoint with fsync).

Parsed records
    Decisions and gate results parsed in this process are remembered by payload digest (256 of them); a read
    still fetches and verifies the bytes, and returns the remembered record when they are the same. Records
    are frozen dataclasses: treat them as immutable.

A remote layer
    A :class:`Fallback` attached as :attr:`Cache.remote` (see :mod:`.remote`) is asked for a blob, decision or
    gate result this cache misses; what it returns (already verified by digest, and records by signature) is
    stored here, then used. A decision or gate result stored here is also handed to it, which publishes it when
    the run may write to the remote.

Statistics
    Hits, misses and corrupt reads are counted per kind in this process and added to lifetime totals (a small
    table in ``cache.db``, never evicted) when the cache is closed or :meth:`Cache.flush_stats` is called.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sqlite3
import tempfile
import threading
import time
import warnings
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, TypeVar

import diskcache

from ..errors import CacheError, CacheLocationError
from ..events import Note, emit
from ..keys import canonical_json, digest_bytes
from ..records import Decision, Result, from_json, to_json
from .index import (
    IMPORT_MARK,
    PidDisk,
    ReadOnlyIndex,
    damage_error,
    damaged,
    looks_read_only,
    sql,
    sweep_interrupted_imports,
)
from .location import default_cache_dir, resolve_cache_dir
from .rows import DBNAME as _DBNAME
from .rows import row_bytes

__all__ = [
    "DEFAULT_SIZE_LIMIT",
    "KINDS",
    "BadEntry",
    "Cache",
    "CacheStats",
    "Entry",
    "Fallback",
    "GcReport",
    "default_cache_dir",
    "open_usable",
    "resolve_cache_dir",
]

KINDS = ("blob", "decision", "gate", "json")
"""The kinds of entries, each a key prefix."""
DEFAULT_SIZE_LIMIT = 4 * 1024**3
"""Size limit of a new cache, in bytes."""
DEFAULT_TIMEOUT = 60.0
"""Seconds a write waits for another process's write before giving up."""
FORMAT = 1
"""Layout version of the cache directory, recorded in ``cache.db``."""
TOUCH_AFTER = 60.0
"""A read refreshes an entry's last-used time (for LRU eviction) only when it is older than this (seconds)."""
_MEMO_KINDS = frozenset({"decision", "gate"})
_MEMO_SIZE = 256

_HEADER = 65  # 64 hex digits of sha256 and a newline before every payload
_CACHE_FILE = re.compile(
    r"^(cache\.db(-wal|-shm|-journal)?|cache\.db\.damaged-[0-9TZ]+(-wal|-shm)?|[0-9a-f]{2}|claims"
    r"|\.?nvcc-versions\.json(\.\d+\.tmp)?)$"
)  # nvcc-versions: the toolchain's memo (r1build.toolchain)


def _cache_file(name: str) -> bool:
    """Whether a name is one diskcache itself creates (another process may be creating the cache right now, and
    SQLite creates ``cache.db`` only at its first statement), a damaged index that repair moved aside, or the
    folder of the per-key claims (:mod:`r1build.cache.claim`)."""
    return _CACHE_FILE.match(name) is not None


T = TypeVar("T")


@dataclass(frozen=True)
class Entry:
    """One stored entry, as ``cache ls`` and bundles see it."""

    key: str
    """Full key, ``<kind>/...``."""
    kind: str
    """One of :data:`KINDS`."""
    size: int
    """Payload bytes."""
    stored: float = 0.0
    """When it was written (seconds since the epoch)."""
    used: float = 0.0
    """When it was last read or written (seconds since the epoch); eviction removes the oldest first."""


@dataclass(frozen=True)
class BadEntry:
    """An entry that fails verification."""

    key: str
    """Full key."""
    reason: str
    """What is wrong with it."""


@dataclass
class CacheStats:
    """Counts of one cache: entries and bytes per kind, and hit/miss statistics."""

    directory: str
    """The cache directory."""
    entries: dict[str, int] = field(default_factory=dict)
    """Entries per kind."""
    bytes: dict[str, int] = field(default_factory=dict)
    """Payload bytes per kind."""
    volume: int = 0
    """Bytes on disk (database pages and value files), what the size limit applies to."""
    size_limit: int = 0
    """Bytes the cache is evicted down to."""
    hits: dict[str, int] = field(default_factory=dict)
    """Verified reads per kind, this process."""
    misses: dict[str, int] = field(default_factory=dict)
    """Reads per kind that found nothing usable (absent or corrupt), this process."""
    corrupt: dict[str, int] = field(default_factory=dict)
    """Reads per kind that found a corrupt entry, this process (also counted as misses)."""
    lifetime_hits: dict[str, int] = field(default_factory=dict)
    """Hits per kind over the cache's life, this process included."""
    lifetime_misses: dict[str, int] = field(default_factory=dict)
    """Misses per kind over the cache's life, this process included."""
    lifetime_corrupt: dict[str, int] = field(default_factory=dict)
    """Corrupt reads per kind over the cache's life, this process included."""

    @staticmethod
    def rate(hits: dict[str, int], misses: dict[str, int]) -> float | None:
        """Share of reads that hit, or None without reads."""
        total = sum(hits.values()) + sum(misses.values())
        return None if total == 0 else sum(hits.values()) / total


@dataclass(frozen=True)
class GcReport:
    """What :meth:`Cache.gc` did."""

    corrupt: int
    """Corrupt entries deleted."""
    evicted: int
    """Entries evicted to get under the size limit."""
    repaired: int
    """Inconsistencies of the store fixed (value files without entries, entries without files, counters)."""
    volume_before: int
    """Bytes on disk before."""
    volume: int
    """Bytes on disk after."""
    size_limit: int
    """The size limit now in force."""


def kind_of(key: str) -> str:
    """The kind (key prefix) of a full key."""
    return key.split("/", 1)[0]


def _pack(digest: str, payload: bytes) -> bytes:
    return digest.encode() + b"\n" + payload


def _unpack(raw: bytes) -> tuple[str, bytes] | None:
    if len(raw) < _HEADER or raw[64:65] != b"\n":
        return None
    return raw[:64].decode("ascii", "replace"), raw[_HEADER:]


def _parse_blob(key: str, payload: bytes) -> bytes:
    return payload


def _parse_decision(key: str, payload: bytes) -> Decision:
    decision = from_json(Decision, payload)
    if f"decision/{decision.key}" != key:
        raise ValueError(f"it holds the decision for key {decision.key}")
    return decision


def _parse_gate(key: str, payload: bytes) -> Result:
    return from_json(Result, payload)


def _parse_json(key: str, payload: bytes) -> Any:
    return json.loads(payload)


_PARSERS: dict[str, Callable[[str, bytes], Any]] = {
    "blob": _parse_blob,
    "decision": _parse_decision,
    "gate": _parse_gate,
    "json": _parse_json,
}


class _Corrupt(Exception):
    """A payload that cannot be used under its key."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _parse(key: str, payload: bytes, digest: str | None = None) -> Any:
    """The value of ``payload`` under ``key``; ``digest`` is the payload's sha256 when already known."""
    kind = kind_of(key)
    parse = _PARSERS.get(kind)
    if parse is None or "/" not in key:
        raise _Corrupt(f"unknown kind of key {key!r} (kinds: {', '.join(KINDS)})")
    if kind == "blob" and key != f"blob/{digest or digest_bytes(payload)}":
        raise _Corrupt("content does not match the blob's digest")
    try:
        return parse(key, payload)
    except ValueError as exc:
        raise _Corrupt(f"does not parse: {exc}") from None


def _verified(raw: object) -> tuple[str, bytes]:
    """The digest and payload of the stored ``raw``, the digest checked; :class:`_Corrupt` when they differ."""
    if not isinstance(raw, bytes):
        raise _Corrupt("stored as a value of another type")
    unpacked = _unpack(raw)
    if unpacked is None:
        raise _Corrupt("no digest header")
    digest, payload = unpacked
    if digest_bytes(payload) != digest:
        raise _Corrupt("digest mismatch")
    return digest, payload


def _decode(key: str, raw: object) -> Any:
    """The verified value of the stored ``raw`` under ``key``; :class:`_Corrupt` when it is not usable."""
    digest, payload = _verified(raw)
    return _parse(key, payload, digest)


def check_payload(key: str, payload: bytes) -> str | None:
    """Why ``payload`` cannot be stored under ``key`` (None when it can): used by bundle import."""
    try:
        _parse(key, payload)
    except _Corrupt as corrupt:
        return corrupt.reason
    return None


class Fallback(Protocol):
    """A second layer behind the local cache (the remote cache): asked only on a local miss."""

    def blob(self, digest: str) -> bytes | None:
        """The bytes whose sha256 is ``digest``, verified; None when absent, unusable or unreachable."""

    def record(self, kind: str, key: str) -> bytes | None:
        """The payload of the record (``decision`` or ``gate``) under ``key``, its digest, shape and signature
        verified; None otherwise."""

    def stored(self, cache: Cache, kind: str, key: str, payload: bytes) -> None:
        """A record was stored locally (``payload`` under ``<kind>/<key>``): publish it if allowed."""

    def close(self) -> None:
        """The run is over (say what the layer did)."""


class _Unreadable:
    """A stored row whose value cannot be read (missing value file, foreign value type)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


class Cache:
    """The r1build cache in one directory. Safe to share between processes and threads.

    ``create=False`` refuses a directory that holds no cache (maintenance commands: a mistyped ``--cache-dir``
    must not become a new, empty, "intact" cache). ``tolerant`` turns the cache off, with one warning, at the
    first read or write that fails in the middle of a run instead of raising (see :func:`open_usable`).
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
        self.read_log: dict[str, str | None] | None = None
        """When a dict: every entry this cache reads, by full key, and the sha256 of the bytes it found stored
        (None: no entry; ``unreadable``: a row whose value could not be read). The CLI's warm path records it
        to prove later that a command would read the same bytes again."""
        self._dc: Any = self._open(size_limit, create)

    # -- lifecycle ---------------------------------------------------------------------------------------
    def _open(self, size_limit: int | None, create: bool) -> Any:
        d = self.directory
        try:
            if d.exists() and not d.is_dir():
                raise CacheLocationError(f"cache directory {d} is not a directory")
            if not create and not (d / _DBNAME).is_file():
                raise CacheLocationError(
                    f"{d} holds no r1build cache (no {_DBNAME}): nothing has been cached there, or the path is "
                    "mistyped (--cache-dir, R1BUILD_CACHE_DIR)"
                )
            if d.is_dir() and not (d / _DBNAME).exists() and any(not _cache_file(p.name) for p in d.iterdir()):
                raise CacheLocationError(
                    f"{d} is not empty and holds no r1build cache; choose a new or empty directory"
                )
            d.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CacheError(f"cannot create the cache directory {d}: {exc}") from None
        deadline = time.monotonic() + self.timeout
        while True:
            dc: diskcache.Cache | None = None
            try:
                dc = diskcache.Cache(str(d), timeout=self.timeout, eviction_policy="least-recently-used", disk=PidDisk)
                fresh = self._prepare(dc)
                if size_limit is not None:
                    dc.reset("size_limit", size_limit)
                elif fresh:
                    dc.reset("size_limit", DEFAULT_SIZE_LIMIT)
                sweep_interrupted_imports(dc, d)
                return dc
            except (sqlite3.OperationalError, diskcache.Timeout) as exc:
                if dc is not None:
                    dc.close()
                busy = isinstance(exc, diskcache.Timeout) or "locked" in str(exc) or "busy" in str(exc)
                if not busy and (d / _DBNAME).is_file() and looks_read_only(exc, d):
                    return self._open_read_only(exc)
                if not busy or time.monotonic() > deadline:
                    raise self._unusable(exc) from None
                time.sleep(0.02)
            except (OSError, sqlite3.Error) as exc:
                if dc is not None:
                    dc.close()
                if isinstance(exc, OSError) and (d / _DBNAME).is_file() and looks_read_only(exc, d):
                    return self._open_read_only(exc)
                raise self._unusable(exc) from None

    def _unusable(self, exc: BaseException) -> CacheError:
        if damaged(exc):
            return damage_error(self.directory, exc)
        return CacheError(f"cannot open the cache at {self.directory}: {exc}")

    def _open_read_only(self, why: BaseException) -> ReadOnlyIndex:
        index = ReadOnlyIndex(self.directory)
        rows = sql(index)("SELECT value FROM R1Meta WHERE name = 'format'").fetchall()
        if rows and rows[0][0] != FORMAT:
            raise CacheError(
                f"the cache at {self.directory} has layout {rows[0][0]!r}; this r1build reads layout {FORMAT}"
            )
        self.read_only = True
        self.degraded = f"read-only: {why}"
        emit(
            Note(
                "warning",
                f"the cache at {self.directory} is read-only for this process ({why}): reading it, storing nothing new",
            )
        )
        return index

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
        """Mark an import in progress (committed before it writes anything), so that the files of a killed
        import are removed at the next open; the mark is cleared when the block ends."""
        self._refuse_read_only("import into it")
        name = f"{IMPORT_MARK}{os.getpid()}"
        try:
            with self._dc.transact(retry=True):
                sql(self._dc)("INSERT OR REPLACE INTO R1Meta VALUES (?, ?)", (name, time.time()))
            yield
        finally:
            with contextlib.suppress(sqlite3.Error, diskcache.Timeout), self._dc.transact(retry=True):
                sql(self._dc)("DELETE FROM R1Meta WHERE name = ?", (name,))

    @staticmethod
    def _prepare(dc: diskcache.Cache) -> bool:
        """Create r1build's own tables once; True when this call made the cache (it is new)."""
        execute = sql(dc)
        with contextlib.suppress(sqlite3.OperationalError):
            rows = execute("SELECT value FROM R1Meta WHERE name = 'format'").fetchall()
            if rows:
                Cache._check_format(dc, rows[0][0])
                return False
        with dc.transact(retry=False):
            execute("CREATE TABLE IF NOT EXISTS R1Meta (name TEXT PRIMARY KEY, value)")
            execute("CREATE TABLE IF NOT EXISTS R1Stats (name TEXT PRIMARY KEY, value INTEGER NOT NULL)")
            fresh = bool(execute("INSERT OR IGNORE INTO R1Meta VALUES ('format', ?)", (FORMAT,)).rowcount == 1)
            ((fmt,),) = execute("SELECT value FROM R1Meta WHERE name = 'format'").fetchall()
        Cache._check_format(dc, fmt)
        return fresh

    @staticmethod
    def _check_format(dc: diskcache.Cache, fmt: object) -> None:
        if fmt != FORMAT:
            raise CacheError(f"the cache at {dc.directory} has layout {fmt!r}; this r1build reads layout {FORMAT}")

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
            with self._dc.transact(retry=False):
                for name, n in items:
                    sql(self._dc)(upsert, (name, n))
        except (diskcache.Timeout, sqlite3.Error) as exc:
            emit(Note("warning", f"could not record cache statistics in {self.directory}: {exc}"))

    def close(self) -> None:
        """Flush this process's statistics into the lifetime totals and close (reopens on next use)."""
        if self.remote is not None:
            self.remote.close()
        self.flush_stats()
        self._dc.close()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)

    def __enter__(self) -> Cache:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """Hold the write lock for a batch of writes: other processes see all of them or none."""
        self._refuse_read_only("write to it")
        try:
            with self._dc.transact(retry=False):
                yield
        except diskcache.Timeout:
            raise CacheError(f"cache at {self.directory} stayed locked for {self.timeout:g} s") from None

    # -- storage primitives ------------------------------------------------------------------------------
    def _locked(self, what: str) -> CacheError:
        return CacheError(f"cache at {self.directory} stayed locked for {self.timeout:g} s ({what})")

    def _query(self, statement: str, params: tuple[Any, ...] = ()) -> list[Any]:
        """Read diskcache's ``Cache`` table directly: no access-time update, no unpickling."""
        if self._off:
            return []
        try:
            return list(sql(self._dc)(statement, params).fetchall())
        except sqlite3.Error as exc:
            if self.tolerant:
                self._turn_off(exc)
                return []
            if damaged(exc):
                raise damage_error(self.directory, exc) from None
            raise CacheError(f"cannot read the cache at {self.directory}: {exc}") from None

    def _put(self, key: str, payload: bytes, digest: str | None = None) -> None:
        if self.read_only or self._off:
            return  # said once, when the cache was opened read-only or turned off
        raw = _pack(digest or digest_bytes(payload), payload)
        try:
            self._dc.set(key, raw, retry=False)
        except diskcache.Timeout:
            if self.tolerant:
                self._turn_off(self._locked(f"writing {key}"))
                return
            raise self._locked(f"writing {key}") from None
        except (OSError, sqlite3.Error) as exc:
            if self.tolerant:
                self._turn_off(exc)
                return
            raise CacheError(f"cannot write {key} to the cache at {self.directory}: {exc}") from None

    def _stored(self, key: str, *, touch: bool = False) -> bytes | _Unreadable | None:
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
                return self._logged(key, _Unreadable(raw))
            now = time.time()
            if touch and not self.read_only and now - float(used or 0) >= self.touch_after:
                with contextlib.suppress(sqlite3.Error):  # the last-used time is a hint: never fail a read
                    sql(self._dc)("UPDATE Cache SET access_time = ? WHERE rowid = ?", (now, rowid))
            return self._logged(key, raw)
        return self._logged(key, _Unreadable("its value file is missing"))

    def _logged(self, key: str, stored: bytes | _Unreadable | None) -> bytes | _Unreadable | None:
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
        reason = raw.reason if isinstance(raw, _Unreadable) else None
        value = None
        if isinstance(raw, bytes):
            try:
                value = self._decode(key, raw)
            except _Corrupt as corrupt:
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
        """:func:`_decode` with parsed decisions and gate results remembered by payload digest."""
        kind = kind_of(key)
        if kind not in _MEMO_KINDS:
            return _decode(key, raw)
        digest, payload = _verified(raw)  # verified on every read, remembered or not
        memo_key = (key, digest)
        with self._lock:
            if memo_key in self._memo:
                self._memo.move_to_end(memo_key)
                return self._memo[memo_key]
        value = _parse(key, payload, digest)
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
            _decode(key, stored)
        except _Corrupt:
            return None
        return stored[_HEADER:]

    def put_raw(self, key: str, payload: bytes) -> None:
        """Store ``payload`` under the full ``key``; :class:`ValueError` when it does not fit the key."""
        reason = check_payload(key, payload)
        if reason is not None:
            raise ValueError(f"cannot store {key}: {reason}")
        self._put(key, payload)

    def delete(self, key: str) -> bool:
        """Remove one entry; whether it was there."""
        self._refuse_read_only("delete from it")
        try:
            return bool(self._dc.delete(key, retry=False))
        except diskcache.Timeout:
            raise self._locked(f"deleting {key}") from None

    # -- blobs -------------------------------------------------------------------------------------------
    def put_blob(self, data: bytes) -> str:
        """Store bytes (replacing a corrupt copy); returns their sha256, the blob's key."""
        digest = digest_bytes(data)
        key = f"blob/{digest}"
        if self._stored(key) != _pack(digest, data):
            self._put(key, data, digest)
        return digest

    def get_blob(self, digest: str) -> bytes | None:
        """The bytes whose sha256 is ``digest``, verified; None when absent or corrupt."""
        value = self._read(f"blob/{digest}")
        if not isinstance(value, bytes) and self.remote is not None:
            value = self.remote.blob(digest)
            if value is not None:
                self.put_blob(value)
        return value if isinstance(value, bytes) else None

    def has_blob(self, digest: str) -> bool:
        """Whether a blob is stored (not verified; cheap)."""
        return bool(self._query("SELECT 1 FROM Cache WHERE key = ? AND raw = 1", (f"blob/{digest}",)))

    def put_text(self, text: str) -> str:
        """Store text as a UTF-8 blob."""
        return self.put_blob(text.encode())

    def get_text(self, digest: str) -> str | None:
        """A text blob (None when absent, corrupt or not UTF-8)."""
        data = self.get_blob(digest)
        if data is None:
            return None
        try:
            return data.decode()
        except UnicodeDecodeError:
            emit(Note("warning", f"cache blob {digest} is not UTF-8 text"))
            return None

    # -- records -----------------------------------------------------------------------------------------
    def put_decision(self, decision: Decision) -> None:
        """Store a decision under its key (replacing any earlier one), and hand it to the remote layer."""
        self._put_record("decision", decision.key, to_json(decision))

    def get_decision(self, key: str) -> Decision | None:
        """The decision for ``key``, verified."""
        value = self._read_record("decision", key)
        return value if isinstance(value, Decision) else None

    def put_gate(self, key: str, result: Result) -> None:
        """Store a static-gate result (and hand it to the remote layer)."""
        self._put_record("gate", key, to_json(result))

    def get_gate(self, key: str) -> Result | None:
        """A static-gate result."""
        value = self._read_record("gate", key)
        return value if isinstance(value, Result) else None

    def _put_record(self, kind: str, key: str, payload: bytes) -> None:
        self._put(f"{kind}/{key}", payload)
        if self.remote is not None:
            self.remote.stored(self, kind, key, payload)

    def _read_record(self, kind: str, key: str) -> Any | None:
        """The local record under ``<kind>/<key>``, else the remote layer's (stored here on the way)."""
        value = self._read(f"{kind}/{key}")
        if value is None and self.remote is not None:
            payload = self.remote.record(kind, key)
            if payload is not None:
                self._put(f"{kind}/{key}", payload)
                try:
                    value = _parse(f"{kind}/{key}", payload)
                except _Corrupt:  # the remote layer checked it; this is a second look, not a new rule
                    value = None
        return value

    def put_json(self, namespace: str, key: str, obj: Any) -> None:
        """Store a small JSON document."""
        self._put(f"json/{namespace}/{key}", canonical_json(obj))

    def get_json(self, namespace: str, key: str) -> Any | None:
        """A small JSON document, or None."""
        return self._read(f"json/{namespace}/{key}")

    # -- maintenance -------------------------------------------------------------------------------------
    def entries(self, kind: str | None = None) -> list[Entry]:
        """Stored entries (of one kind), sorted by key; reading them does not count or refresh them."""
        statement = (
            "SELECT key, size + COALESCE(length(value), 0), store_time, access_time FROM Cache"
            " WHERE raw = 1 AND typeof(key) = 'text'"
        )
        params: tuple[Any, ...] = ()
        if kind is not None:
            statement += " AND substr(key, 1, ?) = ?"
            params = (len(kind) + 1, kind + "/")
        statement += " ORDER BY key"
        out = []
        for key, size, stored, used in self._query(statement, params):
            k = kind_of(key)
            if k in _PARSERS:
                out.append(Entry(key, k, max(0, int(size) - _HEADER), float(stored or 0), float(used or 0)))
        return out

    def decisions(self) -> list[Decision]:
        """Every readable decision, sorted by kernel, arch and creation (not counted as reads)."""
        out = []
        for entry in self.entries("decision"):
            payload = self.peek(entry.key)
            if payload is not None:
                out.append(_parse_decision(entry.key, payload))
        return sorted(out, key=lambda d: (d.kernel, d.arch, d.created))

    def audit(self, *, repair: bool = False) -> list[BadEntry]:
        """Check every entry (digest, blob key, record shape); returns the bad ones, deleted when ``repair``."""
        if repair:
            self._refuse_read_only("repair it")
        problems = []
        for entry in self.entries():
            stored = self._stored(entry.key)
            if stored is None:
                continue  # deleted meanwhile
            reason = stored.reason if isinstance(stored, _Unreadable) else None
            if reason is None:
                try:
                    _decode(entry.key, stored)
                except _Corrupt as corrupt:
                    reason = corrupt.reason
            if reason is not None:
                problems.append(BadEntry(entry.key, reason))
                if repair:
                    self.delete(entry.key)
        return problems

    def verify(self, *, repair: bool = False) -> list[str]:
        """Check every entry's digest; returns the keys that fail (and deletes them when ``repair``)."""
        return [p.key for p in self.audit(repair=repair)]

    def integrity(self) -> str | None:
        """What SQLite's quick check finds wrong with the index (``cache.db``), or None when it is sound."""
        try:
            rows = sql(self._dc)("PRAGMA quick_check").fetchall()
        except sqlite3.Error as exc:
            return str(exc)
        found = [str(r[0]) for r in rows if str(r[0]) != "ok"]
        return "; ".join(found[:3]) if found else None

    def volume(self) -> int:
        """Bytes on disk: what the size limit applies to."""
        try:
            return int(self._dc.volume())
        except sqlite3.Error as exc:
            raise CacheError(f"cannot read the cache at {self.directory}: {exc}") from None

    @property
    def size_limit(self) -> int:
        """Bytes the cache is evicted down to (shared by every process using the directory)."""
        return int(self._dc.reset("size_limit"))

    def set_size_limit(self, size_limit: int) -> None:
        """Store a new size limit (it applies from each process's next write)."""
        if size_limit <= 0:
            raise ValueError("the size limit must be positive")
        self._refuse_read_only("change its size limit")
        self._dc.reset("size_limit", size_limit)

    def gc(self, *, size_limit: int | None = None) -> GcReport:
        """Delete corrupt entries, fix the store's consistency, and evict (LRU) down to the size limit."""
        self._refuse_read_only("collect garbage")
        before = self.volume()
        corrupt = len(self.audit(repair=True))
        if size_limit is not None:
            self.set_size_limit(size_limit)
        evicted = 0
        while self.volume() > self.size_limit:  # one entry at a time: diskcache's cull takes ten
            oldest = self._query("SELECT key FROM Cache WHERE raw = 1 ORDER BY access_time LIMIT 1")
            if not oldest:
                break
            evicted += self.delete(oldest[0][0])
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("always")
                repaired = len(self._dc.check(fix=True, retry=False))
        except diskcache.Timeout:
            raise self._locked("collecting garbage") from None
        except (OSError, sqlite3.Error) as exc:
            raise CacheError(f"cannot collect garbage in {self.directory}: {exc}") from None
        return GcReport(corrupt, evicted, repaired, before, self.volume(), self.size_limit)

    def stats(self) -> CacheStats:
        """Entry counts, bytes, volume and hit/miss statistics."""
        counts: Counter[str] = Counter()
        sizes: Counter[str] = Counter()
        for entry in self.entries():
            counts[entry.kind] += 1
            sizes[entry.kind] += entry.size
        life: dict[str, Counter[str]] = {"hit": Counter(), "miss": Counter(), "corrupt": Counter()}
        for name, value in self._query("SELECT name, value FROM R1Stats"):
            what, _, kind = str(name).partition("/")
            if what in life:
                life[what][kind] += int(value)
        with self._lock:
            hits, misses, corrupt = Counter(self._hits), Counter(self._misses), Counter(self._corrupt)
        return CacheStats(
            directory=str(self.directory),
            entries={k: counts[k] for k in KINDS},
            bytes={k: sizes[k] for k in KINDS},
            volume=self.volume(),
            size_limit=self.size_limit,
            hits={k: hits[k] for k in KINDS},
            misses={k: misses[k] for k in KINDS},
            corrupt={k: corrupt[k] for k in KINDS},
            lifetime_hits={k: life["hit"][k] + hits[k] for k in KINDS},
            lifetime_misses={k: life["miss"][k] + misses[k] for k in KINDS},
            lifetime_corrupt={k: life["corrupt"][k] + corrupt[k] for k in KINDS},
        )


def open_usable(directory: Path | str | None = None) -> Cache:
    """The cache as builds and project commands use it: an accelerator, never a dependency.

    A cache this process may only read is read (one warning, from :class:`Cache`). A damaged index, or a cache
    directory that cannot be created, is replaced for this run by a scratch cache in a temporary folder, removed
    at close, with one warning naming the fix. A read or write that fails later turns the cache off for the
    rest of the run, again with one warning. A location that is a file or a folder of other files is still a
    :class:`~r1build.errors.CacheLocationError`: that is a setting to correct, not damage.
    """
    try:
        return Cache(directory, tolerant=True)
    except CacheLocationError:
        raise
    except CacheError as exc:
        scratch = Path(tempfile.mkdtemp(prefix="r1build-scratch-cache-"))
        emit(Note("warning", f"{exc}; going on without it (a scratch cache for this run only)"))
        cache = Cache(scratch, tolerant=True)
        cache._scratch = scratch
        cache.degraded = f"a scratch stand-in for {resolve_cache_dir(directory)} ({exc})"
        return cache
