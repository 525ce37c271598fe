"""``cache clean`` and ``cache prune``: emptying the cache, and removing the blobs nothing refers to.

Prune keeps every decision, gate result and JSON document, and every blob one of them names (candidate sources,
transcripts, and what those transcripts name in turn); it deletes the other blobs, and the entries that fail
verification. A blob stored less than ``grace_s`` ago is kept, since a resolve running now may store a blob
before the decision that names it.
"""

from __future__ import annotations

import re
import time

from ..convert import record
from .store import Cache

__all__ = ["Cleaned", "Pruned", "clean_cache", "prune_cache"]

_DIGEST = re.compile(rb"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")

GRACE_S = 3600.0
"""Blobs younger than this are never pruned (a resolve in progress stores a blob before its decision)."""


@record(frozen=True)
class Cleaned:
    """What ``cache clean`` removed."""

    entries: int
    bytes: int


@record(frozen=True)
class Pruned:
    """What ``cache prune`` removed and kept."""

    blobs: int
    """Blobs no entry names, deleted."""
    bytes: int
    """Their payload bytes."""
    corrupt: int
    """Entries that failed verification, deleted."""
    kept: int
    """Entries left."""


def clean_cache(cache: Cache) -> Cleaned:
    """Delete every entry (the size limit and the folder stay)."""
    entries = cache.entries()
    removed = sum(1 for e in entries if cache.delete(e.key))
    return Cleaned(removed, sum(e.size for e in entries))


def prune_cache(cache: Cache, *, grace_s: float = GRACE_S, now: float | None = None) -> Pruned:
    """Delete the entries that fail verification and the blobs nothing names (older than ``grace_s``)."""
    corrupt = len(cache.audit(repair=True))
    entries = cache.entries()
    blobs = {e.key.partition("/")[2]: e for e in entries if e.kind == "blob"}
    named: set[str] = set()
    pending = [e.key for e in entries if e.kind != "blob"]
    while pending:  # what records name, then what the named blobs (transcripts) name in turn
        payload = cache.peek(pending.pop())
        for match in _DIGEST.findall(payload or b""):
            digest = match.decode()
            if digest in blobs and digest not in named:
                named.add(digest)
                pending.append(f"blob/{digest}")
    cutoff = (time.time() if now is None else now) - grace_s
    doomed = [e for digest, e in blobs.items() if digest not in named and e.stored < cutoff]
    removed = [e for e in doomed if cache.delete(e.key)]
    return Pruned(len(removed), sum(e.size for e in removed), corrupt, len(entries) - len(removed))
