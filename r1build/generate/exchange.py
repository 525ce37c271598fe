"""The records of one sample's exchange with the endpoint: what went wrong with an attempt (:data:`FaultKind`),
each HTTP attempt, the finished answer, the whole exchange, the meter of text received and the budget's protocol.
Standard library and records only (no ``openai``), so whatever reads a search's outcome can import them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, Protocol, get_args, overload

from ..convert import field, record, replace
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


@record(eq=False)
class Meter:
    """Text received so far by the attempt in flight of one sample, for live progress (not for accounting)."""

    chars: int = 0
    """Characters of reasoning and content received by the attempt in flight."""
    on_the_wire: bool = False
    """Whether an attempt is sent and unanswered now (not waiting for a pause or the budget)."""
    on_code: Callable[[str], None] | None = None
    """Called with the content received so far each time a streamed delta completes a new run of three backticks
    or tildes (a code fence may have closed): a continuous search gates finished code before the answer ends. Only
    then: called at every backtick, it read an 840 KB answer of inline code spans again and again, 54 s of work
    that outlasted the request's time and lost an answer already paid for."""
    fence_tail: str = ""
    """The last two characters of the content so far (a fence may arrive split across deltas)."""

    def fence_closed(self, piece: str) -> bool:
        """Whether ``piece``, the next delta of the content, completes a new ````` or ``~~~``."""
        seen = self.fence_tail + piece
        self.fence_tail = seen[-2:]
        return "```" in seen or "~~~" in seen

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


@record(frozen=True, kw_only=True)
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


@record(frozen=True, kw_only=True)
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
    refusal: str = ""
    """What the model said in the message's ``refusal`` field instead of an answer (a model that declines)."""
    tool_calls: tuple[dict[str, str], ...] = ()
    """The tool calls (or legacy ``function_call``) the model answered with instead of content, in order: each
    ``{"name": ..., "arguments": ...}``, the arguments as the text the server sent."""

    def said_instead(self, limit: int = 300) -> str | None:
        """What the answer said instead of content, for a warning (None when it said nothing of the kind)."""
        parts = [f"the model refused: {self.refusal.strip()[:limit]}"] if self.refusal.strip() else []
        if self.tool_calls:
            calls = ", ".join(f"{c['name']}({c['arguments'][:limit]})" for c in self.tool_calls)
            parts.append(f"the model answered with a tool call instead of code: {calls}")
        return "; ".join(parts) or None


@record
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
    holds_code: Callable[[str], bool] | None = None
    """Whether content received holds complete code (set by the controller): an attempt that fails after such
    content is not retried, its code, already paid for, is the sample's answer (a retry paid again and dropped
    it)."""

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


def _field(value: Any, name: str) -> Any:
    """Field ``name`` of a message, delta or call: an object of the client, or a dict read by hand."""
    return value.get(name) if isinstance(value, dict) else getattr(value, name, None)


def _str(value: Any) -> str:
    return utf8_text(value) if isinstance(value, str) else ""


def refusal_of(message: Any) -> str:
    """The ``refusal`` text of a message or delta ("" where none, or not text)."""
    return _str(_field(message, "refusal"))


def tool_calls_of(message: Any) -> tuple[dict[str, str], ...]:
    """The tool calls of a whole message (and its legacy ``function_call``), each as name and arguments text."""
    calls = _field(message, "tool_calls")
    functions = [_field(c, "function") for c in (calls if isinstance(calls, (list, tuple)) else ())]
    functions.append(_field(message, "function_call"))
    return tuple(
        {"name": _str(_field(f, "name")), "arguments": _str(_field(f, "arguments"))} for f in functions if f is not None
    )


@record
class SaidInstead:
    """A stream's refusal and tool calls, joined from its deltas (a call's name and arguments come in pieces, the
    pieces of one call under one ``index``)."""

    refusal: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, str]] = field(default_factory=dict)

    def add(self, delta: Any) -> bool:
        """Take the refusal and tool-call pieces of ``delta``; whether it held any."""
        piece = refusal_of(delta)
        if piece:
            self.refusal.append(piece)
        calls = _field(delta, "tool_calls")
        pieces = [(_field(c, "index"), _field(c, "function")) for c in (calls if isinstance(calls, list) else ())]
        legacy = _field(delta, "function_call")
        pieces += [(-1, legacy)] if legacy is not None else []
        for index, function in pieces:
            call = self.calls.setdefault(index if isinstance(index, int) else 0, {"name": "", "arguments": ""})
            call["name"] += _str(_field(function, "name"))
            call["arguments"] += _str(_field(function, "arguments"))
        return bool(piece or pieces)

    def into(self, completion: Completion) -> Completion:
        """``completion`` with what the stream said instead of content."""
        calls = tuple(self.calls[i] for i in sorted(self.calls))
        return replace(completion, refusal="".join(self.refusal), tool_calls=calls)
