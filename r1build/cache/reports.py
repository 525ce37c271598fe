"""What the cache says about itself: its entries as listings and bundles see them, entries that fail
verification, its counts and hit rates, and what garbage collection did."""

from __future__ import annotations

from ..convert import field, record
from .codec import EntryKind

__all__ = ["BadEntry", "CacheStats", "Entry", "GcReport"]


@record(frozen=True, kw_only=True)
class Entry:
    """One stored entry, as ``cache ls`` and bundles see it."""

    key: str
    """Full key, ``<kind>/...``."""
    kind: EntryKind
    """Its kind, the key's prefix."""
    size: int
    """Payload bytes."""
    stored: float = 0.0
    """When it was written (seconds since the epoch)."""
    used: float = 0.0
    """When it was last read or written (seconds since the epoch); eviction removes the oldest first."""


@record(frozen=True)
class BadEntry:
    """An entry that fails verification."""

    key: str
    """Full key."""
    reason: str
    """What is wrong with it."""


@record(kw_only=True)
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


@record(frozen=True, kw_only=True)
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
