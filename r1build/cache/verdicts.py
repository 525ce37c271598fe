"""Decisions and gate verdicts in the cache: a :class:`~r1build.records.Decision` under its decision key, a
static-gate :class:`~r1build.records.Result` under its gate key (source digest, arch, flags, toolchain). A record
this cache misses is asked of the remote layer (its digest, shape and signature verified there) and kept here; one
stored here is handed to it, which publishes it when the run may write to the remote.

A record kept on the strength of a signature (fetched from the remote cache, imported from a bundle whose
signatures were checked) has its signer noted beside it (``json/signers/<kind>-<key>``, the key id). Where a
command reads for a project (:attr:`~.storage.Storage.trusted` set from its manifest), such a record whose signer
the project no longer trusts is not used: removing a key from ``trusted-keys`` revokes what it vouched for on every
machine that fetched it, not only for later fetches (one warning per record; the remote is asked again, where a
key still trusted may have signed it). A record made here, or imported without signature checks, has no signer:
the machine's own cache is trusted for what it decided."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from ..errors import CacheError
from ..events import Note, emit
from ..keys import canonical_json
from ..records import Decision, Result, to_json
from .codec import HEADER, Corrupt, RecordKind, decode, parse
from .storage import Storage

__all__ = [
    "SIGNERS",
    "UNCHECKED_IMPORT",
    "UNREADABLE_SIGNER",
    "Verdicts",
    "is_signer_note",
    "noted_record",
    "signer_key",
    "with_its_note",
]

SIGNERS = "signers"
"""The JSON namespace of the signer notes."""
UNREADABLE_SIGNER = "(an unreadable signer note)"
"""The signer of a record whose note is damaged: trusted by no manifest."""
UNCHECKED_IMPORT = "(imported unchecked)"
"""The signer of a record a bundle brought in with no signature checked (imported where no manifest listed trusted
keys): a project that lists trusted keys does not use it; one that lists none does, as a record made here."""


def signer_key(record_key: str) -> str:
    """The full key of the signer note of the record under ``record_key`` (``decision/<key>``)."""
    kind, _, key = record_key.partition("/")
    return f"json/{SIGNERS}/{kind}-{key}"


def is_signer_note(key: str) -> bool:
    """Whether the full ``key`` is a signer note (this machine's, never exported or imported)."""
    return key.startswith(f"json/{SIGNERS}/")


def noted_record(note: str) -> str:
    """The full key of the record a signer note is about (``json/signers/decision-<key>`` -> ``decision/<key>``)."""
    kind, _, key = note.removeprefix(f"json/{SIGNERS}/").partition("-")
    return f"{kind}/{key}"


def with_its_note(key: str) -> set[str]:
    """``key`` and what goes with it: a decision or gate record and its signer note, from either of them (a record
    left without its note would look made here, which no revocation of its signer's key would reach)."""
    record = noted_record(key) if is_signer_note(key) else key
    return {key, record, signer_key(record)} if record.startswith(("decision/", "gate/")) else {key}


class Verdicts(Storage):
    """Decisions and static-gate results of one cache."""

    def put_decision(self, decision: Decision) -> None:
        """Store a decision under its key (replacing any earlier one), and hand it to the remote layer."""
        self._put_record("decision", decision.key, to_json(decision))

    def get_decision(self, key: str, *, remote: bool = True, wait: bool = True) -> Decision | None:
        """The decision for ``key``, verified; ``remote=False``: this cache's only, the remote layer not asked;
        ``wait=False``: one the caller can do without (see :meth:`~.storage.Fallback.record`)."""
        value = self._read_record("decision", key, remote=remote, wait=wait)
        return value if isinstance(value, Decision) else None

    def put_gate(self, key: str, result: Result) -> None:
        """Store a static-gate result (and hand it to the remote layer)."""
        self._put_record("gate", key, to_json(result))

    def get_gate(self, key: str) -> Result | None:
        """A static-gate result."""
        value = self._read_record("gate", key, wait=False)  # a miss costs a local compile
        return value if isinstance(value, Result) else None

    def note_signer(self, record_key: str, signer: str | None) -> None:
        """Note (or, with None, forget) which trusted key's signature the record under ``record_key`` was kept
        for."""
        note = signer_key(record_key)
        if signer is not None:
            self._put(note, canonical_json({"key_id": signer}))
        elif self.peek(note) is not None:
            with contextlib.suppress(CacheError):
                self.delete(note)

    def signer_of(self, record_key: str) -> str | None:
        """The id of the key whose signature the record under ``record_key`` was kept for; None for one made
        here; :data:`UNCHECKED_IMPORT` for one a bundle brought in unchecked. A note that is there but cannot be
        read gives :data:`UNREADABLE_SIGNER`, which no key is: a damaged note must not turn a record kept for a
        signature into one made here."""
        note = signer_key(record_key)
        stored = self._stored(note)  # not counted as a read: notes are no entries users look up
        if stored is None:
            return None
        try:
            if not isinstance(stored, bytes):
                raise Corrupt(stored.reason)
            decode(note, stored)
            parsed = json.loads(stored[HEADER:])
        except (Corrupt, ValueError):
            return UNREADABLE_SIGNER
        signer = parsed.get("key_id") if isinstance(parsed, dict) else None
        return signer if isinstance(signer, str) else UNREADABLE_SIGNER

    def _put_record(self, kind: RecordKind, key: str, payload: bytes) -> None:
        self._put(f"{kind}/{key}", payload)
        self.note_signer(f"{kind}/{key}", None)  # made here: no longer a signed record's
        if self.remote is not None:
            self.remote.stored(self, kind, key, payload)

    def _revoked(self, kind: RecordKind, key: str) -> bool:
        """Whether the record here under ``<kind>/<key>`` was kept for a signature the project no longer trusts
        (said once per record)."""
        if self.trusted is None:
            return False
        signer = self.signer_of(f"{kind}/{key}")
        if signer is None or signer in self.trusted.keys or (signer == UNCHECKED_IMPORT and not self.trusted):
            return False
        message = (
            f"the cached {kind} {key[:16]} (cache {self.directory}) was imported from a bundle with no signature "
            "checked, and the manifest lists trusted-keys; not using it (import a bundle signed by a trusted key)"
            if signer == UNCHECKED_IMPORT
            else f"the cached {kind} {key[:16]} (cache {self.directory}) was kept for a signature by key {signer}, "
            "which the manifest's trusted-keys no longer holds; not using it"
        )
        with self._lock:
            said = message in self._revocations
            self._revocations.add(message)
        if not said:
            emit(Note("warning", message))
        return True

    def _read_record(self, kind: RecordKind, key: str, *, remote: bool = True, wait: bool = True) -> Any | None:
        """The local record under ``<kind>/<key>`` (unless its signer was revoked), else (``remote``) the remote
        layer's (kept here on the way, its signer noted)."""
        value = self._read(f"{kind}/{key}")
        if value is not None and self._revoked(kind, key):
            value = None
        if value is None and remote and self.remote is not None:
            self.fell_through.add(f"{kind}/{key}")
            fetched = self.remote.record(kind, key, wait=wait)
            if fetched is not None:
                payload, signer = fetched
                # the note first: a run stopped between the two writes must not leave the record without it,
                # which would make it look made here (trusted whatever keys the manifest lists later)
                self.note_signer(f"{kind}/{key}", signer)
                self._put(f"{kind}/{key}", payload)
                try:
                    value = parse(f"{kind}/{key}", payload)
                except Corrupt:  # the remote layer checked it; this is a second look, not a new rule
                    value = None
        return value
