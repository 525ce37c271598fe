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

Every value is stored as ``<sha256 of payload>\\n<payload>`` and verified on every read: a mismatch is a miss,
reported through :mod:`r1build.events`, never returned. diskcache gives atomic writes (SQLite transactions and
rename for large values), safe concurrent use by several processes, and a size limit with LRU eviction.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import diskcache

from ..errors import CacheError
from ..events import Note, emit
from ..keys import canonical_json, digest_bytes
from ..records import Decision, Result, from_json, to_json

__all__ = ["KINDS", "Cache", "CacheStats", "Entry", "default_cache_dir"]

KINDS = ("blob", "decision", "gate", "json")
DEFAULT_SIZE_LIMIT = 4 * 1024**3
T = TypeVar("T")


def default_cache_dir() -> Path:
    """``$R1BUILD_CACHE_DIR`` or the platform's user cache directory (platformdirs)."""
    env = os.environ.get("R1BUILD_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("r1build", appauthor=False))


@dataclass
class CacheStats:
    """Counts of one cache: entries and bytes per kind, and this process's hits and misses."""

    directory: str
    entries: dict[str, int] = field(default_factory=dict)
    volume: int = 0
    size_limit: int = 0
    hits: dict[str, int] = field(default_factory=dict)
    misses: dict[str, int] = field(default_factory=dict)
    corrupt: dict[str, int] = field(default_factory=dict)
    lifetime_hits: dict[str, int] = field(default_factory=dict)
    lifetime_misses: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Entry:
    """One stored entry, as ``cache ls`` and bundles see it."""

    key: str
    kind: str
    size: int


def _pack(payload: bytes) -> bytes:
    return digest_bytes(payload).encode() + b"\n" + payload


def _unpack(raw: bytes) -> tuple[str, bytes] | None:
    if len(raw) < 65 or raw[64:65] != b"\n":
        return None
    return raw[:64].decode("ascii", "replace"), raw[65:]


class Cache:
    """The r1build cache in one directory. Safe to share between processes and threads."""

    def __init__(self, directory: Path | str | None = None, *, size_limit: int | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            settings: dict[str, Any] = {"eviction_policy": "least-recently-used"}
            if size_limit is not None:
                settings["size_limit"] = size_limit
            self._dc = diskcache.Cache(str(self.directory), timeout=120, **settings)
            if size_limit is None and self._dc.size_limit == diskcache.DEFAULT_SETTINGS["size_limit"]:
                self._dc.reset("size_limit", DEFAULT_SIZE_LIMIT)
        except (OSError, diskcache.Timeout, Exception) as exc:
            if isinstance(exc, CacheError):
                raise
            raise CacheError(f"cannot open the cache at {self.directory}: {exc}") from None
        self._lock = threading.Lock()
        self._hits: Counter[str] = Counter()
        self._misses: Counter[str] = Counter()
        self._corrupt: Counter[str] = Counter()

    # -- lifecycle ---------------------------------------------------------------------------------------
    def close(self) -> None:
        """Flush this process's hit/miss counters into the lifetime totals and close."""
        with self._lock:
            counters = [("hit", self._hits), ("miss", self._misses)]
            with contextlib.suppress(diskcache.Timeout):
                for name, counter in counters:
                    for kind, n in counter.items():
                        self._dc.incr(f"stat/{name}/{kind}", n, default=0)
            self._hits.clear()
            self._misses.clear()
        self._dc.close()

    def __enter__(self) -> Cache:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # -- raw verified access -----------------------------------------------------------------------------
    def _count(self, counter: Counter[str], kind: str) -> None:
        with self._lock:
            counter[kind] += 1

    def _put(self, key: str, payload: bytes) -> None:
        try:
            self._dc.set(key, _pack(payload), tag=key.split("/", 1)[0])
        except diskcache.Timeout as exc:
            raise CacheError(f"cache at {self.directory} is locked: {exc}") from None

    def _get(self, key: str, expect: str | None = None) -> bytes | None:
        kind = key.split("/", 1)[0]
        raw = self._dc.get(key, default=None)
        if raw is None:
            self._count(self._misses, kind)
            return None
        unpacked = _unpack(raw) if isinstance(raw, bytes) else None
        if unpacked is None or digest_bytes(unpacked[1]) != unpacked[0] or (expect and unpacked[0] != expect):
            self._count(self._corrupt, kind)
            self._count(self._misses, kind)
            emit(Note("warning", f"cache entry {key} is corrupt (digest mismatch); ignoring it"))
            return None
        self._count(self._hits, kind)
        return unpacked[1]

    def raw_items(self) -> Iterator[tuple[str, bytes | None]]:
        """Every stored key with its raw stored value (None if it vanished meanwhile); statistics excluded."""
        for key in self._dc.iterkeys():
            if not isinstance(key, str) or key.startswith("stat/"):
                continue
            raw = self._dc.get(key, default=None, retry=True)
            yield key, raw if isinstance(raw, bytes) else None

    def put_raw(self, key: str, payload: bytes) -> None:
        """Store ``payload`` under ``key`` (used by bundle import, after verification)."""
        self._put(key, payload)

    def get_raw(self, key: str) -> bytes | None:
        """The verified payload under ``key``."""
        expect = key.split("/", 1)[1] if key.startswith("blob/") else None
        return self._get(key, expect)

    def delete(self, key: str) -> bool:
        """Remove one entry."""
        return bool(self._dc.delete(key, retry=True))

    # -- blobs -------------------------------------------------------------------------------------------
    def put_blob(self, data: bytes) -> str:
        """Store bytes; returns their sha256, the blob's key."""
        digest = digest_bytes(data)
        key = f"blob/{digest}"
        if key not in self._dc:
            self._put(key, data)
        return digest

    def get_blob(self, digest: str) -> bytes | None:
        """The bytes whose sha256 is ``digest``, verified; None when absent or corrupt."""
        return self._get(f"blob/{digest}", expect=digest)

    def put_text(self, text: str) -> str:
        """Store text as a UTF-8 blob."""
        return self.put_blob(text.encode())

    def get_text(self, digest: str) -> str | None:
        """A text blob."""
        data = self.get_blob(digest)
        return None if data is None else data.decode()

    # -- records -----------------------------------------------------------------------------------------
    def _get_record(self, key: str, cls: type[T]) -> T | None:
        payload = self._get(key)
        if payload is None:
            return None
        try:
            return from_json(cls, payload)
        except ValueError as exc:
            self._count(self._corrupt, key.split("/", 1)[0])
            emit(Note("warning", f"cache entry {key} does not parse ({exc}); ignoring it"))
            return None

    def put_decision(self, decision: Decision) -> None:
        """Store a decision under its key."""
        self._put(f"decision/{decision.key}", to_json(decision))

    def get_decision(self, key: str) -> Decision | None:
        """The decision for ``key``, verified."""
        return self._get_record(f"decision/{key}", Decision)

    def put_gate(self, key: str, result: Result) -> None:
        """Store a static-gate result."""
        self._put(f"gate/{key}", to_json(result))

    def get_gate(self, key: str) -> Result | None:
        """A static-gate result."""
        return self._get_record(f"gate/{key}", Result)

    def put_json(self, namespace: str, key: str, obj: Any) -> None:
        """Store a small JSON document."""
        self._put(f"json/{namespace}/{key}", canonical_json(obj))

    def get_json(self, namespace: str, key: str) -> Any | None:
        """A small JSON document, or None."""
        import json

        payload = self._get(f"json/{namespace}/{key}")
        return None if payload is None else json.loads(payload)

    # -- maintenance -------------------------------------------------------------------------------------
    def entries(self, kind: str | None = None) -> list[Entry]:
        """Stored entries, sorted by key."""
        out = []
        for key, raw in self.raw_items():
            k = key.split("/", 1)[0]
            if (kind is None or k == kind) and raw is not None:
                out.append(Entry(key, k, len(raw)))
        return sorted(out, key=lambda e: e.key)

    def decisions(self) -> list[Decision]:
        """Every readable decision record."""
        out = []
        for entry in self.entries("decision"):
            d = self._get_record(entry.key, Decision)
            if d is not None:
                out.append(d)
        return out

    def verify(self, *, repair: bool = False) -> list[str]:
        """Check every entry's digest; returns the keys that fail (and deletes them when ``repair``)."""
        bad = []
        for key, raw in self.raw_items():
            unpacked = _unpack(raw) if raw is not None else None
            ok = unpacked is not None and digest_bytes(unpacked[1]) == unpacked[0]
            if ok and unpacked is not None and key.startswith("blob/"):
                ok = key == f"blob/{unpacked[0]}"
            if not ok:
                bad.append(key)
                if repair:
                    self.delete(key)
        return sorted(bad)

    def gc(self, *, size_limit: int | None = None) -> dict[str, int]:
        """Delete corrupt entries and evict down to the size limit; returns counts."""
        corrupt = len(self.verify(repair=True))
        if size_limit is not None:
            self._dc.reset("size_limit", size_limit)
        before = len(self._dc)
        self._dc.cull(retry=True)
        self._dc.expire(retry=True)
        return {"corrupt": corrupt, "evicted": max(0, before - len(self._dc)), "volume": self._dc.volume()}

    def stats(self) -> CacheStats:
        """Entry counts, volume and hit/miss statistics."""
        counts: Counter[str] = Counter()
        for key in self._dc.iterkeys():
            if isinstance(key, str) and not key.startswith("stat/"):
                counts[key.split("/", 1)[0]] += 1
        life_hit = {k: int(self._dc.get(f"stat/hit/{k}", 0)) for k in KINDS}
        life_miss = {k: int(self._dc.get(f"stat/miss/{k}", 0)) for k in KINDS}
        with self._lock:
            return CacheStats(
                directory=str(self.directory),
                entries={k: counts.get(k, 0) for k in KINDS},
                volume=int(self._dc.volume()),
                size_limit=int(self._dc.size_limit),
                hits=dict(self._hits),
                misses=dict(self._misses),
                corrupt=dict(self._corrupt),
                lifetime_hits={k: life_hit[k] + self._hits.get(k, 0) for k in KINDS},
                lifetime_misses={k: life_miss[k] + self._misses.get(k, 0) for k in KINDS},
            )
