"""What a search (or a replay) produced and spent: its candidates and results in preference order, its
transcripts, the stop and its cause, and the requests, tokens, money and faults of its samples."""

from __future__ import annotations

from typing import Literal

from ..convert import field, record
from ..records import Candidate, Result
from .budget import StopReason
from .exchange import FaultKind

SampleLoss = Literal[
    "truncated",  # the answer was cut off at max_tokens
    "interrupted",  # the server ended the answer early (DeepSeek's insufficient_system_resource, vLLM's abort)
    "no_code",  # the answer had no CUDA code block
    "content_filter",  # the provider's filter stopped the answer
    "cancelled",  # interrupted or ended by a fatal error while in flight
    "gave_up",  # every attempt failed (the faults are counted by kind too)
    "kept_partial",  # not a loss: an answer cut off mid-stream whose complete code was kept
    "missing_transcript",  # replay: a transcript blob is gone
]
"""Why a sample gave no candidate (besides the faults of its attempts, counted by
:data:`~r1build.generate.exchange.FaultKind`)."""


@record(kw_only=True)
class Usage:
    """What a search spent and what went wrong along the way."""

    samples: int = 0
    """Samples started (one wanted answer each)."""
    requests: int = 0
    """HTTP requests sent, retries included."""
    retries: int = 0
    """Requests that were retries."""
    answers: int = 0
    """Samples that got a complete answer."""
    prompt_tokens: int = 0
    """Prompt tokens (reported; estimated where a server reported none)."""
    completion_tokens: int = 0
    """Completion tokens, reasoning included (plus those of attempts that failed mid-stream)."""
    reasoning_tokens: int = 0
    """Reasoning tokens, where reported."""
    cost_usd: float = 0.0
    """Money spent at the configured prices."""
    estimated: bool = False
    """Whether some counts are estimates (a server reported no usage, or a stream was cut)."""
    duplicates: int = 0
    """Generated candidates identical to an earlier one (judged once)."""
    failures: dict[FaultKind | SampleLoss, int] = field(default_factory=dict)
    """Faults of attempts by kind (:data:`~r1build.generate.exchange.FaultKind`) and samples that ended without a
    candidate (:data:`SampleLoss`)."""

    def count(self, kind: FaultKind | SampleLoss, n: int = 1) -> None:
        """Add to a failure count."""
        self.failures[kind] = self.failures.get(kind, 0) + n


@record(kw_only=True)
class SearchOutcome:
    """What a search (or a replay) produced."""

    candidates: list[Candidate]
    """Distinct candidates in preference order: seeds first, then generated ones by round and sample."""
    results: list[Result]
    """One result per candidate, in the same order."""
    transcripts: list[str]
    """Digests of the transcript blobs, by round and sample."""
    usage: Usage
    """Requests, tokens, money and faults."""
    stop_reason: StopReason
    """Why the search ended."""
    rounds: int = 0
    """Rounds completed."""
    cause: str = ""
    """The stop in words, naming its real cause (``the token budget is spent: 24,800 of 25,000 tokens``,
    ``the endpoint failed 12 requests in a row with no answer: 12 requests, all HTTP 503 Service
    Unavailable``)."""

    def generated(self) -> list[tuple[Candidate, Result]]:
        """Generated candidates with their results."""
        return [(c, r) for c, r in zip(self.candidates, self.results, strict=True) if c.origin.kind == "generated"]
