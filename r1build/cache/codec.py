"""The cache's entry codec: how one value is stored under its key and read back, verified.

Four kinds of entries, each under its own key prefix (:data:`KINDS`): ``blob/<sha256>`` (bytes keyed by their
own digest), ``decision/<decision key>`` (a :class:`~r1build.records.Decision` as JSON), ``gate/<gate key>`` (a
static-gate :class:`~r1build.records.Result`) and ``json/<namespace>/<key>`` (small JSON documents). Every value
is stored as ``<sha256 of payload>\\n<payload>``; a digest mismatch, a blob whose key is not its content's digest,
or a record that no longer parses is :class:`Corrupt`. This module knows nothing of where entries are stored.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal, get_args

from ..keys import digest_bytes
from ..records import Decision, Result, from_json

__all__ = [
    "HEADER",
    "KINDS",
    "Corrupt",
    "EntryKind",
    "RecordKind",
    "check_payload",
    "decode",
    "kind_of",
    "known_kind",
    "pack",
    "parse",
    "parse_decision",
    "verified",
]

EntryKind = Literal["blob", "decision", "gate", "json"]
"""The kinds of entries, each a key prefix."""
KINDS: tuple[EntryKind, ...] = get_args(EntryKind)
"""The kinds of entries, in the order reports list them."""
RecordKind = Literal["decision", "gate"]
"""The kinds of entries that are typed records (and that a remote layer signs)."""
HEADER = 65
"""Bytes before every payload: 64 hex digits of its sha256 and a newline."""


def kind_of(key: str) -> str:
    """The kind (key prefix) of a full key."""
    return key.split("/", 1)[0]


_KNOWN: dict[str, EntryKind] = {k: k for k in KINDS}


def known_kind(key: str) -> EntryKind | None:
    """The kind of a full key, None when it is none of :data:`KINDS`."""
    return _KNOWN.get(kind_of(key))


def pack(digest: str, payload: bytes) -> bytes:
    """The stored form of ``payload`` whose sha256 is ``digest``."""
    return digest.encode() + b"\n" + payload


def _unpack(raw: bytes) -> tuple[str, bytes] | None:
    if len(raw) < HEADER or raw[64:65] != b"\n":
        return None
    return raw[:64].decode("ascii", "replace"), raw[HEADER:]


def _parse_blob(key: str, payload: bytes) -> bytes:
    return payload


def parse_decision(key: str, payload: bytes) -> Decision:
    """The decision stored under ``key`` (:class:`ValueError` when it is not one, or another key's)."""
    decision = from_json(Decision, payload)
    if f"decision/{decision.key}" != key:
        raise ValueError(f"it holds the decision for key {decision.key}")
    return decision


def _parse_gate(key: str, payload: bytes) -> Result:
    return from_json(Result, payload)


def _parse_json(key: str, payload: bytes) -> Any:
    try:
        return json.loads(payload)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


_PARSERS: dict[str, Callable[[str, bytes], Any]] = {
    "blob": _parse_blob,
    "decision": parse_decision,
    "gate": _parse_gate,
    "json": _parse_json,
}


class Corrupt(Exception):
    """A payload that cannot be used under its key."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def parse(key: str, payload: bytes, digest: str | None = None) -> Any:
    """The value of ``payload`` under ``key``; ``digest`` is the payload's sha256 when already known."""
    kind = kind_of(key)
    parser = _PARSERS.get(kind)
    if parser is None or "/" not in key:
        raise Corrupt(f"unknown kind of key {key!r} (kinds: {', '.join(KINDS)})")
    if kind == "blob" and key != f"blob/{digest or digest_bytes(payload)}":
        raise Corrupt("content does not match the blob's digest")
    try:
        return parser(key, payload)
    except ValueError as exc:
        raise Corrupt(f"does not parse: {exc}") from None


def verified(raw: object) -> tuple[str, bytes]:
    """The digest and payload of the stored ``raw``, the digest checked; :class:`Corrupt` when they differ."""
    if not isinstance(raw, bytes):
        raise Corrupt("stored as a value of another type")
    unpacked = _unpack(raw)
    if unpacked is None:
        raise Corrupt("no digest header")
    digest, payload = unpacked
    if digest_bytes(payload) != digest:
        raise Corrupt("digest mismatch")
    return digest, payload


def decode(key: str, raw: object) -> Any:
    """The verified value of the stored ``raw`` under ``key``; :class:`Corrupt` when it is not usable."""
    digest, payload = verified(raw)
    return parse(key, payload, digest)


def check_payload(key: str, payload: bytes) -> str | None:
    """Why ``payload`` cannot be stored under ``key`` (None when it can): used by bundle import and the remote."""
    try:
        parse(key, payload)
    except Corrupt as corrupt:
        return corrupt.reason
    return None
