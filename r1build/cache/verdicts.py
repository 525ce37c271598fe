"""Decisions and gate verdicts in the cache: a :class:`~r1build.records.Decision` under its decision key, a
static-gate :class:`~r1build.records.Result` under its gate key (source digest, arch, flags, toolchain). A record
this cache misses is asked of the remote layer (its digest, shape and signature verified there) and kept here; one
stored here is handed to it, which publishes it when the run may write to the remote."""

from __future__ import annotations

from typing import Any

from ..records import Decision, Result, to_json
from .codec import Corrupt, RecordKind, parse
from .storage import Storage

__all__ = ["Verdicts"]


class Verdicts(Storage):
    """Decisions and static-gate results of one cache."""

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

    def _put_record(self, kind: RecordKind, key: str, payload: bytes) -> None:
        self._put(f"{kind}/{key}", payload)
        if self.remote is not None:
            self.remote.stored(self, kind, key, payload)

    def _read_record(self, kind: RecordKind, key: str) -> Any | None:
        """The local record under ``<kind>/<key>``, else the remote layer's (stored here on the way)."""
        value = self._read(f"{kind}/{key}")
        if value is None and self.remote is not None:
            payload = self.remote.record(kind, key)
            if payload is not None:
                self._put(f"{kind}/{key}", payload)
                try:
                    value = parse(f"{kind}/{key}", payload)
                except Corrupt:  # the remote layer checked it; this is a second look, not a new rule
                    value = None
        return value
