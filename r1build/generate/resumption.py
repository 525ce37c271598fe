"""Taking back what a search cut short received: its answers join the new search's pool, and what its requests
cost is charged to the new search's budget, so a re-run never asks, nor pays, for them again.

A search is cut short by Ctrl-C, a fatal error or the end of its process; its links say so (a search links its
transcripts as it stores them, and again however it ends: :mod:`.links`). A search that got no answer at all is
not continued (nothing was received: the next run asks anew), nor is one that ended by its own stops.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..cache import Cache, parse_transcript, read_links, token_count
from ..convert import record
from .budget import Ledger
from .extract import Extraction, strip_think
from .links import TranscriptLinks
from .outcome import Usage
from .pool import Pool, read_answer

__all__ = ["Resumed", "resume_cut_short"]

_Stored = tuple[tuple[int, int], str, dict[str, Any], dict[str, Any] | None]


@record(frozen=True)
class Resumed:
    """What a search took back from the one cut short."""

    stop_reason: str
    """How the search taken back ended (``interrupted`` or ``fatal``)."""
    done: dict[int, set[int]]
    """By round, the samples not to ask again: every one but those cancelled in flight or refused by the fatal
    error."""


@record(kw_only=True)
class _Taker:
    """Where what is taken back goes: the new search's usage, ledger, pool and links."""

    usage: Usage
    ledger: Ledger
    pool: Pool
    links: TranscriptLinks
    model: str
    """The model asked, where a transcript names none."""


def resume_cut_short(
    cache: Cache, links: TranscriptLinks, *, usage: Usage, ledger: Ledger, pool: Pool, model: str
) -> Resumed | None:
    """Take back the search of ``links.key`` that was cut short, if there is one with an answer (see the module
    docstring). Keeps ``links`` as the search goes where no ``r1build generate`` decided this key (what it recorded
    stays until the search ends: a resolve judges it if this one is killed)."""
    found = read_links(cache, links.key)
    links.as_we_go = found is None or found.candidates is None
    if found is None or found.candidates is not None or found.stop_reason not in ("interrupted", "fatal"):
        return None
    stored = _stored_transcripts(cache, found.transcripts, links.kernel, links.arch)
    if not any(answer is not None for _, _, _, answer in stored):
        return None
    taker = _Taker(usage=usage, ledger=ledger, pool=pool, links=links, model=model)
    done: dict[int, set[int]] = {}
    for (round_no, sample), digest, doc, answer in sorted(stored, key=lambda item: item[0]):
        if _take_back(taker, (round_no, sample), digest, doc, answer):
            done.setdefault(round_no, set()).add(sample)
    return Resumed(str(found.stop_reason), done)


def _stored_transcripts(cache: Cache, digests: Sequence[str], kernel: str, arch: str) -> list[_Stored]:
    """The transcripts of ``kernel`` and ``arch`` among ``digests`` that read back: (round, sample), digest, the
    document and its answer (None where the request got none)."""
    stored = []
    for digest in digests:
        parsed = parse_transcript(cache.get_text(digest))
        if parsed is None:
            continue
        doc, answer = parsed
        try:
            where = (int(doc["round"]), int(doc["sample"]))
        except (KeyError, TypeError, ValueError, OverflowError):
            continue
        if doc.get("kernel") == kernel and doc.get("arch") == arch:
            stored.append((where, digest, doc, answer))
    return stored


def _take_back(
    taker: _Taker, where: tuple[int, int], digest: str, doc: dict[str, Any], answer: dict[str, Any] | None
) -> bool:
    """Charge what one stored sample's requests cost and admit its answer to the pool; whether it is not to be
    asked again (one cancelled in flight or refused by the fatal error is)."""
    usage = taker.usage
    attempts = [a for a in doc.get("attempts") or [] if isinstance(a, dict)]
    taker.ledger.settle(
        None,
        prompt_tokens=sum(_tokens(a.get("prompt_tokens")) for a in attempts),
        completion_tokens=sum(_tokens(a.get("completion_tokens")) for a in attempts),
    )
    usage.requests += len(attempts)
    usage.retries += max(0, len(attempts) - 1)
    usage.estimated = usage.estimated or any(not a.get("usage_reported") for a in attempts)
    taker.links.add(where, digest, stored_now=False)
    if answer is None and doc.get("failure") in ("cancelled", "fatal"):
        return False  # cut off in flight, or refused by what cut the search short: asked again
    usage.samples += 1
    if answer is None:
        usage.count("gave_up")
        return True
    usage.answers += 1
    usage.reasoning_tokens += _tokens(answer.get("reasoning_tokens"))
    finish, content = answer.get("finish_reason"), str(answer.get("content") or "")
    if finish == "stop":
        taker.ledger.observe(_tokens(answer.get("completion_tokens")))
    _admit(taker, where, digest, doc, read_answer(finish, content, taker.links.kernel, usage)[0], content)
    return True


def _admit(
    taker: _Taker, where: tuple[int, int], digest: str, doc: dict[str, Any], extraction: Extraction | None, content: str
) -> None:
    """Admit the candidate of a stored answer to the pool, with the first message it was asked with."""
    if extraction is None or extraction.source is None:
        return
    request = doc.get("request") if isinstance(doc.get("request"), dict) else {}
    messages = [m for m in (request or {}).get("messages") or [] if isinstance(m, dict)][:1]
    taker.pool.admit_answer(
        extraction.source,
        model=str(doc.get("model") or taker.model),
        round_no=where[0],
        sample=where[1],
        transcript=digest,
        messages=messages,
        answer=strip_think(content).strip(),
    )


def _tokens(value: Any) -> int:
    """A token count read back from a stored transcript (0 where it is none, or not a count)."""
    return max(0, token_count(value) or 0)
