"""The records of one sample's exchange with the endpoint: what went wrong with an attempt (:data:`FaultKind`),
each HTTP attempt, the finished answer, the whole exchange, the meter of text received and the budget's protocol.
Standard library and records only (no ``openai``), so whatever reads a search's outcome can import them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, get_args, overload

from ..errors import R1BuildError
from .budget import StopReason, estimate_tokens

FaultKind = Literal[
    "rate_limited",  # HTTP 429
    "server_error",  # HTTP 5xx, 408, 409, 425
    "connection",  # the connection could not be made or broke before the response
    "timeout",  # no complete answer within the request's deadline
    "bad_response",  # a body that does not parse or does not fit the protocol
    "stream_cut",  # a stream that ended before its finish chunk
    "fatal",  # a status that ends the run (400, 401, 402, 403, 404, 422, other 4xx)
    "cancelled",  # the search was interrupted or ended by a fatal error while the request was in flight
    "stopped",  # no retry: the search stopped (circuit breaker, a pause beyond the wall-time budget)
]
"""What went wrong with one HTTP attempt (or, for ``cancelled`` and ``stopped``, with a sample)."""

FAULT_KINDS: tuple[str, ...] = get_args(FaultKind)

RETRYABLE: frozenset[FaultKind] = frozenset(
    {"rate_limited", "server_error", "connection", "timeout", "bad_response", "stream_cut"}
)
"""Fault kinds that cost a retry; anything else that fails a sample is final for that sample."""


@dataclass(eq=False)
class Meter:
    """Text received so far by the attempt in flight of one sample, for live progress (not for accounting)."""

    chars: int = 0
    """Characters of reasoning and content received by the attempt in flight."""
    on_the_wire: bool = False
    """Whether an attempt is sent and unanswered now (not waiting for a pause or the budget)."""
    on_code: Callable[[str], None] | None = None
    """Called with the content received so far each time a streamed delta of the content holds a backtick (a
    code fence may have closed): a continuous search gates finished code before the answer ends."""

    @property
    def tokens(self) -> int:
        """Estimated tokens received by the attempt in flight."""
        return estimate_tokens(self.chars)


class Spend(Protocol):
    """What the budget says about each attempt of one sample."""

    async def reserve(self) -> int | StopReason:
        """``max_tokens`` for the next attempt (held from the budget), or the budget that allows none."""

    def charge(self, *, prompt_tokens: int, completion_tokens: int) -> None:
        """What the attempt just made really cost (replaces what :meth:`reserve` held)."""


@dataclass(frozen=True, kw_only=True)
class Attempt:
    """One HTTP request of a sample."""

    started_s: float
    """Seconds after the sample started."""
    latency_s: float
    """Seconds the attempt took."""
    outcome: Literal["ok"] | FaultKind
    """``ok`` or the fault kind."""
    status: int | None = None
    """HTTP status, when there was one."""
    message: str = ""
    """What went wrong, redacted."""
    retry_after_s: float | None = None
    """What the server asked to wait."""
    max_tokens: int | None = None
    """The attempt's ``max_tokens``."""
    prompt_tokens: int = 0
    """Prompt tokens it cost (reported, else estimated from the messages' length; 0 when refused)."""
    completion_tokens: int = 0
    """Completion tokens it cost (reported, else estimated from the length of the text received)."""
    usage_reported: bool = False
    """Whether the counts are the server's."""
    label: str = ""
    """The fault in a few words, for the cause of a stop (``HTTP 503 Service Unavailable``, ``a cut stream``)."""


@dataclass(frozen=True, kw_only=True)
class Completion:
    """A finished answer."""

    content: str
    """The answer text (may still hold ``<think>`` when the server has no reasoning parser)."""
    reasoning: str
    """Reasoning from ``reasoning_content`` / ``reasoning`` fields."""
    finish_reason: str | None
    """``stop``, ``length``, ``content_filter`` ..."""
    prompt_tokens: int
    """Prompt tokens (reported, else estimated)."""
    completion_tokens: int
    """Completion tokens including reasoning (reported, else estimated)."""
    reasoning_tokens: int
    """Reasoning tokens, where reported."""
    usage_reported: bool
    """Whether the server reported usage (else the counts are estimates)."""
    model: str | None
    """Model the server says answered."""
    response_id: str | None
    """The server's id of the completion."""
    latency_s: float
    """Seconds from request to last byte."""
    first_token_s: float | None
    """Seconds to the first streamed delta."""


@dataclass
class Exchange:
    """A sample: its request, every attempt, and the answer or why there is none."""

    messages: list[dict[str, str]]
    """Messages sent (reasoning is never among them)."""
    params: dict[str, Any]
    """Request parameters besides the messages."""
    attempts: list[Attempt] = field(default_factory=list)
    """Every HTTP attempt, in order."""
    completion: Completion | None = None
    """The answer, when one arrived."""
    failure: FaultKind | None = None
    """The last fault kind when no answer arrived."""
    fatal: R1BuildError | None = None
    """The error that must end the run (401, 402, ...), when one happened."""
    budget: StopReason | None = None
    """The budget that allowed no further attempt, when one did not."""
    partial: Completion | None = None
    """What the last failed attempt received before it failed (``finish_reason`` None), when it received text:
    the controller keeps it when it holds complete code."""

    @property
    def prompt_tokens(self) -> int:
        """Prompt tokens of every attempt."""
        return sum(a.prompt_tokens for a in self.attempts)

    @property
    def completion_tokens(self) -> int:
        """Completion tokens of every attempt (those of attempts that failed mid-stream included)."""
        return sum(a.completion_tokens for a in self.attempts)

    @property
    def estimated(self) -> bool:
        """Whether some attempt's counts are estimates."""
        return any(not a.usage_reported and (a.prompt_tokens or a.completion_tokens) for a in self.attempts)


@overload
def utf8_text(text: str) -> str: ...
@overload
def utf8_text(text: None) -> None: ...
def utf8_text(text: str | None) -> str | None:
    """``text`` as Unicode that UTF-8 can hold: JSON's ``\\ud83d`` escapes may leave surrogates (a server's bug,
    or a pair split across two stream events): a round trip through UTF-16 joins a split pair again, and a lone one
    becomes U+FFFD, instead of failing the answer where it is stored."""
    if text is None or text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text
