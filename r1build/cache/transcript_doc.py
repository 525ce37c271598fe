"""The transcript document's identity and its first checks, for every reader of transcripts; and the one reader
of the links a search leaves under its decision key.

A transcript is a JSON blob in the cache (written by :mod:`r1build.generate.transcripts`). Replay reads its answer
and ``r1build report`` / ``export-dataset`` read its spend, prompt and answer; both start here, so that reading
records never imports the generation client. The links (:data:`LINKS_NAMESPACE`) name a search's transcripts, and,
for ``r1build generate``, the candidates it judged: :func:`read_links` is how the resolver, replay and the
overview read them.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from ..convert import record

if TYPE_CHECKING:
    from ..records import CandidateRef
    from . import Cache

__all__ = ["KIND", "LINKS_NAMESPACE", "SCHEMA", "SearchLinks", "parse_transcript", "read_links", "token_count"]

LINKS_NAMESPACE = "generation"
"""Cache JSON namespace that links a search's transcripts (and, for ``r1build generate``, its candidates and
results), keyed by decision key."""

KIND = "r1build.transcript"
"""The ``kind`` field of every transcript document."""
SCHEMA = 1
"""The transcript document's schema version."""


def parse_transcript(text: str | None) -> tuple[dict[str, Any], dict[str, Any] | None] | None:
    """A transcript document and its answer (None when no answer arrived) from the blob's text; None when the
    text is missing, not JSON or not a transcript."""
    if text is None:
        return None
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: JSON nested deeper than the parser goes
        return None
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        return None
    answer = doc.get("answer") if isinstance(doc.get("answer"), dict) else None
    return doc, answer


@record(frozen=True, kw_only=True)
class SearchLinks:
    """What a search linked under its decision key (:data:`LINKS_NAMESPACE`)."""

    transcripts: list[str]
    """Digests of its transcript blobs, by round and sample."""
    candidates: list[CandidateRef] | None
    """The distinct candidates ``r1build generate`` judged, in preference order; None where the links name none
    (a search inside a resolve) or some that this version cannot read."""
    stop_reason: str | None
    """Why the search ended, as it said."""
    cause: str
    """The stop in words."""
    created: str
    """When the links were written (ISO timestamp); empty when unknown."""


def token_count(value: Any) -> int | None:
    """A token count as a transcript stores it, or None where it holds something else (a string, a list, NaN, an
    infinity, a boolean)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value) if math.isfinite(value) else None


def read_links(cache: Cache, key: str) -> SearchLinks | None:
    """The links of the search under decision ``key``; None when there are none."""
    from ..records import CandidateRef, from_json

    doc = cache.get_json(LINKS_NAMESPACE, key)
    if not isinstance(doc, dict) or not doc:
        return None
    listed = doc.get("transcripts")
    # each once: a transcript linked twice is one sample (replayed, counted and paid once)
    transcripts = list(dict.fromkeys(t for t in listed if isinstance(t, str))) if isinstance(listed, list) else []
    candidates: list[CandidateRef] | None = None
    if isinstance(doc.get("candidates"), list):
        try:
            candidates = [from_json(CandidateRef, item) for item in doc["candidates"]]
        except (TypeError, ValueError, KeyError):
            candidates = None  # a record this version cannot read: no candidates rather than a guess
    reason = doc.get("stop_reason")
    return SearchLinks(
        transcripts=transcripts,
        candidates=candidates,
        stop_reason=str(reason) if reason else None,
        cause=str(doc.get("cause") or ""),
        created=str(doc.get("created") or ""),
    )
