"""What ``r1build cache ls`` shows: one row per cache entry, decisions read for their kernel, arch and winner.

The CLI renders these rows (a table, or ``--json``); reading and decoding the entries is the library's work.
"""

from __future__ import annotations

import datetime as _dt
from typing import TYPE_CHECKING, Any

from ..convert import record
from ..records import Decision, from_json
from .codec import EntryKind

if TYPE_CHECKING:
    from .store import Cache

__all__ = ["Listed", "list_entries"]


@record(frozen=True, kw_only=True)
class Listed:
    """One cache entry as listed."""

    key: str
    kind: EntryKind
    size: int
    """Bytes on disk."""
    used: str
    """When it was last read or written (ISO 8601, UTC; empty when never)."""
    decision: dict[str, Any] | None = None
    """For a decision: kernel, arch, winner digest, provenance, measured, checks version, device, created; an
    empty mapping when its payload does not decode (``corrupt``)."""

    def to_json(self) -> dict[str, Any]:
        row: dict[str, Any] = {"key": self.key, "kind": self.kind, "size": self.size, "used": self.used}
        if self.decision is not None:
            row.update(self.decision or {"corrupt": True})
        return row


def _when(timestamp: float) -> str:
    if not timestamp:
        return ""
    return _dt.datetime.fromtimestamp(timestamp, _dt.timezone.utc).isoformat(timespec="seconds")


def list_entries(cache: Cache, kind: EntryKind | None = None) -> list[Listed]:
    """Every entry of ``cache`` (of ``kind`` only, when given), decisions with what they decided."""
    rows = []
    for entry in cache.entries(kind):
        decision: dict[str, Any] | None = None
        if entry.kind == "decision":
            payload = cache.peek(entry.key)
            decision = {} if payload is None else _decided(from_json(Decision, payload))
        rows.append(Listed(key=entry.key, kind=entry.kind, size=entry.size, used=_when(entry.used), decision=decision))
    return rows


def _decided(decision: Decision) -> dict[str, Any]:
    return {
        "kernel": decision.kernel,
        "arch": decision.arch,
        "winner": decision.winner.digest if decision.winner else None,
        "provenance": decision.winner.provenance() if decision.winner else None,
        "measured": decision.measured,
        "checks": decision.checks,
        "device": decision.device,
        "created": decision.created,
    }
