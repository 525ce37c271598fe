"""Transcripts: every request and answer of a search, as JSON blobs in the cache.

One blob per sample: the messages and parameters sent, every HTTP attempt (latency, status, fault), the answer
(content, reasoning, finish reason, usage, latency) and what extraction made of it. The decision record links
the blobs by digest, and ``r1build replay`` re-extracts and re-judges the candidates from them with no network.
No configured secret is ever part of a transcript: every string of the payload is scrubbed of each of them,
whatever their length, before it is stored, whatever a server echoed back (a short key only where it stands
alone, so it never mangles an unrelated word).

The transcripts of a search are linked under its decision key in the ``generation`` JSON namespace of the cache
however the search ends (its budgets, a fatal error, Ctrl-C): that is where ``r1build replay`` finds them when no
decision was stored.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Sequence
from typing import Any

from ..cache import LINKS_NAMESPACE, Cache, parse_transcript, token_count, transcript_doc
from ..convert import asdict, record
from ..keys import canonical_json
from .exchange import Exchange, utf8_text
from .providers import redact

KIND = transcript_doc.KIND
SCHEMA = transcript_doc.SCHEMA

__all__ = [
    "KIND",
    "LINKS_NAMESPACE",
    "SCHEMA",
    "StoredAnswer",
    "link_transcripts",
    "load_transcript",
    "store_transcript",
    "transcript_payload",
]


@record(frozen=True, kw_only=True)
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


def transcript_payload(
    *,
    kernel: str,
    arch: str,
    round: int,
    sample: int,
    provider: str,
    endpoint: str,
    model: str,
    direction: str | None,
    temperature: float | None,
    parent: str | None,
    exchange: Exchange,
    extraction: dict[str, Any] | None,
    started: str,
    elapsed_s: float,
) -> dict[str, Any]:
    """The JSON document of one sample."""
    completion = exchange.completion
    answer = asdict(completion) if completion is not None else None
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
        "attempts": [asdict(a) for a in exchange.attempts],
        "answer": answer,
        "failure": exchange.failure,
        "extraction": extraction,
        "started": started,
        "elapsed_s": round_s(elapsed_s),
    }


def round_s(value: float) -> float:
    """Seconds to the millisecond."""
    return float(f"{value:.3f}")


def _scrubbed(value: Any, secrets: Sequence[str]) -> Any:
    """``value`` with every string scrubbed of ``secrets`` and held to what UTF-8 can hold (:func:`utf8_text`: a
    server's error text is stored too), and every number JSON cannot hold (NaN, infinity, whatever a server sent)
    as null."""
    if isinstance(value, str):
        value = utf8_text(value)
        return redact(value, secrets) if secrets else value
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {_scrubbed(k, secrets): _scrubbed(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_scrubbed(v, secrets) for v in value]
    return value


def store_transcript(cache: Cache, payload: dict[str, Any], *, secrets: Sequence[str]) -> str:
    """Store a transcript, every string scrubbed of each of ``secrets``; returns its digest."""
    return cache.put_text(canonical_json(_scrubbed(payload, secrets)).decode())


def link_transcripts(
    cache: Cache, key: str, *, kernel: str, arch: str, transcripts: Sequence[str], stop_reason: str, cause: str
) -> None:
    """Link a search's transcripts under its decision ``key``."""
    cache.put_json(
        LINKS_NAMESPACE,
        key,
        {
            "kernel": kernel,
            "arch": arch,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "transcripts": list(transcripts),
            "stop_reason": stop_reason,
            "cause": cause,
        },
    )


def load_transcript(cache: Cache, digest: str) -> StoredAnswer | None:
    """A transcript's answer, or None when the blob is missing, corrupt or not a transcript."""
    parsed = parse_transcript(cache.get_text(digest))
    if parsed is None:
        return None
    doc, answer = parsed
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
            usage={k: token_count(answer.get(k)) for k in ("prompt_tokens", "completion_tokens", "reasoning_tokens")}
            if answer is not None
            else {},
        )
    except (KeyError, TypeError, ValueError, OverflowError):  # OverflowError: a round of 1e400
        return None
