"""Cache maintenance: listing entries without counting them as reads, auditing every entry (and deleting the bad
ones), SQLite's check of the index, the size limit, garbage collection (corrupt entries, store consistency, LRU
eviction one entry at a time) and the statistics ``r1build cache stats`` shows."""

from __future__ import annotations

import sqlite3
import warnings
from collections import Counter
from typing import TYPE_CHECKING, Any

from ..errors import CacheError
from ..records import Decision
from ..selection.rules import decision_problem
from .codec import HEADER, KINDS, Corrupt, decode, known_kind, parse_decision
from .index import IndexTimeout
from .rows import number
from .storage import Storage, Unreadable
from .verdicts import with_its_note

if TYPE_CHECKING:  # imported where made: a run that reads the cache makes no report
    from .reports import BadEntry, CacheStats, Entry, GcReport

__all__ = ["Maintenance"]


class Maintenance(Storage):
    """Listing, auditing, size limit, garbage collection and statistics of one cache."""

    def entries(self, kind: str | None = None) -> list[Entry]:
        """Stored entries (of one kind), sorted by key; reading them does not count or refresh them."""
        from .reports import Entry

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
            k = known_kind(key)
            if k is not None:
                out.append(
                    Entry(
                        key=key,
                        kind=k,
                        size=max(0, int(number(size)) - HEADER),
                        stored=number(stored),
                        used=number(used),
                    )
                )
        return out

    def decisions(self) -> list[Decision]:
        """Every readable decision, sorted by kernel, arch and creation (not counted as reads)."""
        out = []
        for entry in self.entries("decision"):
            payload = self.peek(entry.key)
            if payload is not None:
                out.append(parse_decision(entry.key, payload))
        return sorted(out, key=lambda d: (d.kernel, d.arch, d.created))

    def audit(self, *, repair: bool = False) -> list[BadEntry]:
        """Check every entry (digest, blob key, record shape); returns the bad ones, deleted when ``repair``."""
        from .reports import BadEntry

        if repair:
            self._refuse_read_only("repair it")
        problems = []
        for entry in self.entries():
            stored = self._stored(entry.key)
            if stored is None:
                continue  # deleted meanwhile
            reason = stored.reason if isinstance(stored, Unreadable) else None
            if reason is None:
                try:
                    value = decode(entry.key, stored)
                except Corrupt as corrupt:
                    reason = corrupt.reason
                else:  # a decision that contradicts itself is never used (resolve refuses it): say so here too
                    reason = decision_problem(value) if isinstance(value, Decision) else None
            if reason is not None:
                problems.append(BadEntry(key=entry.key, reason=reason))
                if repair:
                    for key in sorted(with_its_note(entry.key)):  # a record and its signer note go together
                        if key == entry.key or self._stored(key) is not None:
                            self.delete(key)
        return problems

    def verify(self, *, repair: bool = False) -> list[str]:
        """Check every entry's digest; returns the keys that fail (and deletes them when ``repair``)."""
        return [p.key for p in self.audit(repair=repair)]

    def integrity(self) -> str | None:
        """What SQLite's quick check finds wrong with the index (``cache.db``), or None when it is sound."""
        try:
            rows = self._sql.execute("PRAGMA quick_check").fetchall()
        except sqlite3.Error as exc:
            return str(exc)
        found = [str(r[0]) for r in rows if str(r[0]) != "ok"]
        return "; ".join(found[:3]) if found else None

    def volume(self) -> int:
        """Bytes on disk: what the size limit applies to."""
        try:
            return int(self._index.volume())
        except sqlite3.Error as exc:
            raise CacheError(f"cannot read the cache at {self.directory}: {exc}") from None

    @property
    def size_limit(self) -> int:
        """Bytes the cache is evicted down to (shared by every process using the directory)."""
        return int(self._index.reset("size_limit"))

    def set_size_limit(self, size_limit: int) -> None:
        """Store a new size limit (it applies from each process's next write)."""
        if size_limit <= 0:
            raise ValueError("the size limit must be positive")
        self._refuse_read_only("change its size limit")
        self._index.reset("size_limit", size_limit)

    def gc(self, *, size_limit: int | None = None) -> GcReport:
        """Delete corrupt entries, fix the store's consistency, and evict (LRU) down to the size limit."""
        from .reports import GcReport

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
            for key in sorted(with_its_note(str(oldest[0][0]))):  # a record and its signer note go together
                evicted += self.delete(key)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("always")
                repaired = len(self._index.check(fix=True))
        except IndexTimeout:
            raise self._locked("collecting garbage") from None
        except (OSError, sqlite3.Error) as exc:
            raise CacheError(f"cannot collect garbage in {self.directory}: {exc}") from None
        return GcReport(
            corrupt=corrupt,
            evicted=evicted,
            repaired=repaired,
            volume_before=before,
            volume=self.volume(),
            size_limit=self.size_limit,
        )

    def stats(self) -> CacheStats:
        """Entry counts, bytes, volume and hit/miss statistics."""
        from .reports import CacheStats

        counts: Counter[str] = Counter()
        sizes: Counter[str] = Counter()
        for entry in self.entries():
            counts[entry.kind] += 1
            sizes[entry.kind] += entry.size
        life: dict[str, Counter[str]] = {"hit": Counter(), "miss": Counter(), "corrupt": Counter()}
        for name, value in self._query("SELECT name, value FROM R1Stats"):
            what, _, kind = str(name).partition("/")
            if what in life and isinstance(value, int):  # a count damaged into text or a float counts as none
                life[what][kind] += value
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
