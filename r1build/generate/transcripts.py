"""Transcripts: every request and answer of a search, as JSON blobs in the cache.

One blob per sample: the messages and parameters sent, every HTTP attempt (latency, status, fault), the answer
(content, reasoning, finish reason, usage, latency) and what extraction made of it. The decision record links
the blobs by digest, and ``r1build replay`` re-extracts and re-judges the candidates from them with no network.
The API key is never part of a transcript: the payload is scrubbed of it before it is stored, whatever a
server echoed back.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from ..cache.store import Cache
from ..keys import canonical_json
from .client import Exchange

__all__ = ["KIND", "SCHEMA", "SCRUB_MIN", "StoredAnswer", "load_transcript", "store_transcript", "transcript_payload"]

KIND = "r1build.transcript"
SCHEMA = 1


@dataclass(frozen=True)
class StoredAnswer:
    """What replay needs from a transcript."""

    digest: str
    """The blob's digest."""
    kernel: str
    """Kernel the sample was for."""
    arch: str
    """Arch the sample was for."""
    round: int
    """Round of the sample."""
    sample: int
    """Index of the sample in its round."""
    model: str
    """Model that was asked."""
    content: str | None
    """The answer's content, when one arrived."""
    finish_reason: str | None
    """Its finish reason."""
    usage: dict[str, Any]
    """Token counts recorded with the answer."""


def transcript_payload(*, kernel: str, arch: str, round: int, sample: int, provider: str, endpoint: str,
                       model: str, direction: str | None, temperature: float | None, parent: str | None,
                       exchange: Exchange, extraction: dict[str, Any] | None, started: str,
                       elapsed_s: float) -> dict[str, Any]:
    """The JSON document of one sample."""
    completion = exchange.completion
    answer = dataclasses.asdict(completion) if completion is not None else None
    return {
        "kind": KIND,
        "schema": SCHEMA,
        "kernel": kernel,
        "arch": arch,
        "round": round,
        "sample": sample,
        "provider": provider,
        "endpoint": endpoint,
        "model": model,
        "direction": direction,
        "temperature": temperature,
        "parent": parent,
        "request": {"messages": exchange.messages, "params": exchange.params},
        "attempts": [dataclasses.asdict(a) for a in exchange.attempts],
        "answer": answer,
        "failure": exchange.failure,
        "extraction": extraction,
        "started": started,
        "elapsed_s": round_s(elapsed_s),
    }


def round_s(value: float) -> float:
    """Seconds to the millisecond."""
    return float(f"{value:.3f}")


SCRUB_MIN = 16
"""Keys at least this long (every hosted provider's are) are scrubbed from the whole transcript. Shorter ones
(a local server's ``test``) only ever reach error messages, which the client scrubs itself: scrubbing a common
word from an answer would change what replay extracts."""


def store_transcript(cache: Cache, payload: dict[str, Any], *, secret: str | None) -> str:
    """Store a transcript, scrubbed of ``secret``; returns its digest."""
    text = canonical_json(payload).decode()
    if secret and len(secret) >= SCRUB_MIN:
        text = text.replace(secret, "[redacted]")
        escaped = json.dumps(secret)[1:-1]
        if escaped != secret:
            text = text.replace(escaped, "[redacted]")
    return cache.put_text(text)


def load_transcript(cache: Cache, digest: str) -> StoredAnswer | None:
    """A transcript's answer, or None when the blob is missing, corrupt or not a transcript."""
    text = cache.get_text(digest)
    if text is None:
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        return None
    answer = doc.get("answer") if isinstance(doc.get("answer"), dict) else None
    try:
        return StoredAnswer(
            digest=digest,
            kernel=str(doc["kernel"]),
            arch=str(doc["arch"]),
            round=int(doc["round"]),
            sample=int(doc["sample"]),
            model=str(doc.get("model", "")),
            content=str(answer["content"]) if answer is not None else None,
            finish_reason=answer.get("finish_reason") if answer is not None else None,
            usage={k: answer.get(k) for k in ("prompt_tokens", "completion_tokens", "reasoning_tokens")}
            if answer is not None else {},
        )
    except (KeyError, TypeError, ValueError):
        return None
