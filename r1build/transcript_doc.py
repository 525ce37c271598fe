"""The transcript document's identity and its first checks, for every reader of transcripts.

A transcript is a JSON blob in the cache (written by :mod:`r1build.generate.transcripts`). Replay reads its answer
and ``r1build report`` / ``export-dataset`` read its spend, prompt and answer; both start here, so that reading
records never imports the generation client.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["KIND", "LINKS_NAMESPACE", "SCHEMA", "parse_transcript"]

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
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        return None
    answer = doc.get("answer") if isinstance(doc.get("answer"), dict) else None
    return doc, answer
