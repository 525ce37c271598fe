"""What a chat-completions server answered, read into a :class:`~.exchange.Completion`, or the :class:`Fault`
that says why not: a JSON body, or a stream of server-sent events (deltas of content and reasoning, a finish
chunk, a closing usage chunk), from servers that follow the protocol loosely (a JSON body for a stream request,
keep-alive events with no chunk, a refusal or tool calls in place of content, an error object in place of an
answer); and what an HTTP status or a broken connection means. :mod:`.client` sends the requests and retries.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import re
import time
from collections.abc import Mapping
from typing import Any

from ..convert import field, record
from ..toolchain.extras import GENERATE

try:
    import openai
except ImportError:  # the generate extra is not installed: the command that needs it says which to install
    raise GENERATE.missing() from None
from . import bodies
from .budget import estimate_tokens
from .exchange import Completion, FaultKind, Meter, SaidInstead, refusal_of, tool_calls_of, utf8_text
from .pacing import parse_retry_after, status_label

__all__ = [
    "MOST_TOKENS",
    "Fault",
    "OpenAIClient",
    "Partial",
    "completion_of",
    "connection_fault",
    "content_text",
    "count_of",
    "error_in_place_of_an_answer",
    "finish_at_end",
    "from_json_body",
    "not_a_completion",
    "not_events",
    "reasoning_of",
    "status_fault",
    "take_delta",
    "text_of",
]


_NOT_CONNECTED = frozenset({"ConnectError", "ProxyError"})
"""The HTTP client's errors (by class name: httpx and its successors name them alike) for a connection that was
never made: refused, a host that does not resolve, a proxy that would not connect."""

_MARKUP = re.compile(r"<(script|style)\b.*?</\1\s*>|<[^>]*>", re.IGNORECASE | re.DOTALL)
"""What an HTML error page holds besides its words: tags, scripts and styles."""

MOST_TOKENS = 10**9
"""The largest token count a server's usage is taken at: no one request's prompt or answer comes near it, and a
larger count (``1e400``, a number of 400 digits) is a server's garbage that no price can be applied to (an int
that big does not convert to a float)."""


class Fault(Exception):
    def __init__(
        self,
        kind: FaultKind,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        label: str = "",
    ) -> None:
        message = utf8_text(message)  # a server's words: logged, stored and shown, so UTF-8 must hold them
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.status = status
        self.retry_after = retry_after
        self.label = utf8_text(label)


@record
class Partial:
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    chunks: int = 0
    first_token_s: float | None = None
    responded: bool = False
    """Whether the response's status and headers arrived (the server was reached, and answered)."""
    opened: asyncio.Event | None = None
    """Set when a stream's status and headers arrived (the first request on an endpoint lets the rest go)."""


def _never_connected(cause: BaseException | None) -> bool:
    """Whether ``cause`` (what the client's connection error wraps) says no connection was made at all, as opposed
    to one that the server (or a proxy) closed or reset before or while answering."""
    return cause is None or any(c.__name__ in _NOT_CONNECTED for c in type(cause).__mro__)


def status_fault(exc: openai.APIStatusError) -> Fault:
    """What an HTTP error answer means: 429 a rate limit, 5xx (and 408, 409, 425) the server's fault, both retried
    after their Retry-After; any other a fatal refusal."""
    status = exc.status_code
    text = _error_text(exc) + _redirect_of(exc.response)
    label = status_label(status, getattr(exc.response, "reason_phrase", None))
    if status != 429 and status < 500 and status not in (408, 409, 425):
        return Fault("fatal", text, status=status, label=label)
    return Fault(
        "rate_limited" if status == 429 else "server_error",
        f"HTTP {status}: {text}",
        status=status,
        retry_after=parse_retry_after(exc.response.headers),
        label=label,
    )


def _redirect_of(response: Any) -> str:
    """Where the HTTP client was redirected before this answer (it follows redirects, a 301 or 302 turning the POST
    into a GET), in words; empty where it was not. The answer is then the new URL's, and the base URL to fix."""
    history = getattr(response, "history", None)
    if not history:
        return ""
    first = history[0]
    return (
        f" (redirected by HTTP {first.status_code} to {response.url}, sent there as {response.request.method}: set "
        "the base URL to where it points)"
    )


def connection_fault(exc: openai.APIConnectionError, partial: Partial) -> Fault:
    """What a broken connection means: a cut stream once the server answered, else no connection at all, or one
    the server closed before answering."""
    cause = exc.__cause__ or exc.__context__
    detail = f" ({type(cause).__name__}: {cause})" if cause else ""
    if partial.chunks or partial.responded:  # the server answered, then the connection broke
        return Fault("stream_cut", f"the connection broke during the response{detail}", label="a cut stream")
    if _never_connected(cause):
        return Fault("connection", f"connection failed{detail}", label="connection failed")
    # reached, but closed (or reset) before a whole response: no sign that the URL or the server is wrong
    return Fault(
        "connection", f"the server closed the connection before answering{detail}", label="a closed connection"
    )


def _error_text(exc: openai.APIStatusError) -> str:
    """What the server said with its error status: the JSON error's message, else its body's words (a proxy's
    text or HTML page: ``upstream connect error ...``), else the client's ``Error code: 502``."""
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, dict) else None
        if isinstance(message, str) and message:
            return message
        return json.dumps(body)[:300]
    words = words_of(body) if isinstance(body, str) else ""
    text = words or exc.message or ""
    return text if len(text) <= 300 else text[:300] + "..."


_BOM = b"\xef\xbb\xbf"
"""UTF-8's byte order mark, which servers on some platforms write before a body: no part of it."""

_EVENT_FIELDS = (b"data:", b":", b"event:", b"id:", b"retry:")
"""How a body of server-sent events begins (a field or a comment), whatever its content type says."""


async def not_events(stream: Any, started: float) -> Completion | None:
    """The whole answer of a server that did not send server-sent events: a JSON body (whatever its content type
    says: a server that ignores ``"stream"``); None where the body is to be read as events (the response keeps
    what was read: events under another type, a proxy's ``application/json`` included); a :class:`Fault` naming a
    body that is neither (an HTML page, a proxy's text), in its words."""
    content_type = str(stream.response.headers.get("content-type", ""))
    if content_type.startswith("text/event-stream"):
        return None
    try:
        body = await _read_whole(stream)
    except BaseException:
        await stream.close()
        raise
    head = body.removeprefix(_BOM).lstrip()
    if head.startswith(_EVENT_FIELDS) or not head:  # events (an empty body: an empty stream, said so there)
        return None
    await stream.close()
    if content_type.startswith("application/json") or head.startswith(b"{"):
        return from_json_body(body, time.monotonic() - started)
    raise not_a_completion(body.decode("utf-8", errors="replace"), content_type)


def words_of(text: str) -> str:
    """The words of a body that is no JSON (a proxy's text, an HTML page without its markup), at most 300
    characters."""
    words = " ".join(_MARKUP.sub(" ", text[:65536]).split())
    return words if len(words) <= 300 else words[:300] + "..."


def not_a_completion(text: str, content_type: str = "") -> Fault:
    """The fault of a successful response whose body is text, not a chat completion (an HTML page: often a base
    URL that points at a web page, not at the API), in its words."""
    html = "html" in content_type.lower() or text.lstrip()[:1] == "<"
    what = "an HTML page" if html else f"{content_type.split(';', maxsplit=1)[0].strip() or 'untyped'} text"
    return Fault(
        "bad_response",
        f"the server answered {what} (HTTP 200), not a chat completion: {words_of(text) or '(no words)'}",
        label=f"{what} in place of an answer",
    )


ANSWER_CHARS = 32 << 20
"""The most characters of reasoning and content one streamed answer may bring (an answer within ``max_tokens`` is
hundreds of thousands): past it the attempt fails as a bad response, instead of a server that streams without end
filling this process's memory until the request's deadline."""


def take_delta(delta: Any, partial: Partial, meter: Meter, said: SaidInstead, started: float) -> None:
    """Add one delta's reasoning and content (text only: a number or an object is no part of an answer) to what
    was received, and count it; a :class:`Fault` once the answer passes :data:`ANSWER_CHARS`."""
    extra = delta.model_extra or {}
    piece_r = reasoning_of(extra)
    piece = content_text(delta.content)
    if piece_r:
        partial.reasoning.append(piece_r)
        meter.chars += len(piece_r)
    if piece:
        partial.content.append(piece)
        meter.chars += len(piece)
        if meter.fence_closed(piece) and meter.on_code is not None:
            meter.on_code("".join(partial.content))
    if said.add(delta) or piece_r or piece:
        partial.chunks += 1
        if partial.first_token_s is None:
            partial.first_token_s = time.monotonic() - started
    if meter.chars > ANSWER_CHARS:
        raise Fault(
            "bad_response",
            f"the answer passed {ANSWER_CHARS} characters (a model's answer within max_tokens is hundreds of "
            "thousands): a server that sends without end",
            label="an answer without end",
        )


def finish_at_end(
    finish: str | None, closing_usage: Any, params: dict[str, Any], had_events: bool, partial: Partial
) -> str:
    """The stream's finish reason once it ended: its finish chunk's; without one, from a closing usage chunk (the
    answer is whole: cut off if it used every token it could); else a :class:`Fault` (an empty or cut stream)."""
    used = count_of(getattr(closing_usage, "completion_tokens", None))
    if finish is None and closing_usage is not None and used is not None:
        finish = "length" if used >= params["max_tokens"] else "stop"
    if finish is not None:
        return finish
    if not had_events:
        raise Fault(
            "stream_cut",
            "the response carried no stream events (not server-sent events, or an empty stream)",
            label="an empty stream",
        )
    raise Fault(
        "stream_cut", f"the stream ended before its finish chunk, after {partial.chunks} deltas", label="a cut stream"
    )


class OpenAIClient(openai.AsyncOpenAI):
    """The official client, reading streams through :class:`_ChunkEvents` (its own hook for the decoder)."""

    def _make_sse_decoder(self) -> Any:
        return _ChunkEvents(super()._make_sse_decoder())


class _ChunkEvents:
    """The client's server-sent-events decoder, less the events that carry no chunk: an event with no data (only
    ``id:`` or ``retry:`` fields) and one whose data is plain text (a proxy's ``event: ping`` / ``data: ping``
    keep-alive). openai reads every event's data as JSON, so one of them failed the whole answer; JSON that does not
    parse still does (it may be a chunk cut short)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    @staticmethod
    def _chunk(event: Any) -> bool:
        data = str(getattr(event, "data", "") or "").strip()
        return data.startswith(("{", "["))

    def iter_bytes(self, iterator: Any) -> Any:
        return (event for event in self.inner.iter_bytes(itertools.chain(iterator, [b"\n\n"])) if self._chunk(event))

    async def aiter_bytes(self, iterator: Any) -> Any:
        async for event in self.inner.aiter_bytes(_ended_by_a_blank_line(iterator)):
            if self._chunk(event):
                yield event


async def _ended_by_a_blank_line(iterator: Any) -> Any:
    """The bytes of a stream that ended cleanly, less a leading byte order mark, then a blank line: the last event
    of a server that ends without one (its finish chunk, ``data: {...}`` and the end of the body) is dispatched, not
    dropped as unfinished (the answer was then retried, paid again). A stream cut mid-way raises before it. The
    byte order mark (the event stream standard ignores one) glued itself to the first field's name, and that event
    was dropped, its content lost. One event is held to :data:`.bodies.EVENT_BYTES` (:class:`.bodies.EventBound`)."""
    head: bytes | None = b""  # the first bytes, until they are known to begin with a byte order mark or not
    bound = bodies.EventBound()
    async for data in iterator:
        bound.add(data)
        if head is not None:
            head += data
            if _BOM.startswith(head):
                continue
            data, head = head.removeprefix(_BOM), None
        yield data
    if head:  # a body shorter than a byte order mark
        yield head.removeprefix(_BOM)
    yield b"\n\n"


async def _read_whole(stream: Any) -> bytes:
    """The whole body of a response the client did not read as events; a connection that breaks meanwhile is a
    fault like any other (httpx's own error would otherwise escape: the client wraps only what it reads)."""
    try:
        body: bytes = await stream.response.aread()  # through bodies.bound_body: held to its bound
    except (asyncio.CancelledError, Fault, bodies.BodyTooLarge):
        raise
    except Exception as exc:
        what = f"connection failed while reading the body ({type(exc).__name__}: {exc})"
        raise Fault("stream_cut", what, label="a cut stream") from None
    return body


def error_in_place_of_an_answer(error: Any) -> None:
    """Raise the fault of a 200 response whose body is an error (gateways that report errors so), in its words."""
    if not error:
        return
    message = error.get("message") if isinstance(error, dict) else error
    text = message if isinstance(message, str) and message else json.dumps(error, default=str)
    raise Fault(
        "bad_response",
        f"an error in place of an answer (HTTP 200): {text[:300]}",
        label="an error in place of an answer",
    )


def text_of(value: Any) -> str | None:
    """A string field of a response, or None where the server sent something else (a number, NaN, an object)."""
    return value if isinstance(value, str) else None


def content_text(value: Any) -> str | None:
    """A message's or delta's ``content``: a string, or the text of a list of parts (``[{"type": "text", "text":
    ...}]``, as some OpenAI-compatible servers send it; parts of other kinds left out); None for anything else."""
    if isinstance(value, list):
        texts = [p["text"] for p in value if isinstance(p, dict) and p.get("type", "text") == "text"]
        return "".join(t for t in texts if isinstance(t, str))
    return text_of(value)


def reasoning_of(extra: Mapping[str, Any]) -> str | None:
    """The reasoning text a message or delta carries beside its content (``reasoning_content``, as DeepSeek names
    it, or ``reasoning``)."""
    return text_of(extra.get("reasoning_content")) or text_of(extra.get("reasoning"))


def count_of(value: Any) -> int | None:
    """A token count a server reported, or None where it is no count (negative, not a number, over
    :data:`MOST_TOKENS`): then the text's length is what the answer is charged, never a count that would give budget
    back."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        value = value.strip()
        if not (value.isascii() and value.isdigit()) or len(value) > 30:
            return None
        value = int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        value = int(value)
    if isinstance(value, int):
        return value if 0 <= value <= MOST_TOKENS else None
    return None


def from_json_body(body: bytes, latency: float) -> Completion:
    """A completion from a plain JSON body, read by hand (a streamed request answered without streaming)."""
    try:  # a byte that is no UTF-8 (in the answer's text) costs that character, not the answer paid for
        data = json.loads(body.decode("utf-8-sig", errors="replace"))  # (-sig: less a byte order mark)
    except ValueError as exc:
        raise Fault(
            "bad_response", f"the response is not valid JSON: {str(exc)[:200]}", label="a malformed response"
        ) from None
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        if isinstance(data, dict):
            error_in_place_of_an_answer(data.get("error"))
        raise Fault(
            "bad_response", f"the response is not a chat completion: {str(data)[:200]}", label="a malformed response"
        )
    raw_message = choices[0].get("message")
    message: dict[str, Any] = raw_message if isinstance(raw_message, dict) else {}
    content = utf8_text(content_text(message.get("content")) or "")
    reasoning = utf8_text(reasoning_of(message) or "")
    model, ident = utf8_text(text_of(data.get("model"))), utf8_text(text_of(data.get("id")))
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else None
    tokens = count_of(usage.get("completion_tokens")) if usage else None
    counts: dict[str, Any]
    if usage is None or tokens is None:  # counted from the text received
        counts = {"prompt_tokens": 0, "completion_tokens": estimate_tokens(len(content) + len(reasoning))}
        counts |= {"reasoning_tokens": 0, "usage_reported": False}
    else:
        details = usage.get("completion_tokens_details")
        reasoning_tokens = details.get("reasoning_tokens") if isinstance(details, dict) else None
        counts = {"prompt_tokens": count_of(usage.get("prompt_tokens")) or 0, "completion_tokens": tokens}
        counts |= {"reasoning_tokens": count_of(reasoning_tokens) or 0, "usage_reported": True}
    return Completion(
        content=content,
        reasoning=reasoning,
        finish_reason=text_of(choices[0].get("finish_reason")),
        model=model,
        response_id=ident,
        latency_s=latency,
        first_token_s=None,
        refusal=refusal_of(message),
        tool_calls=tool_calls_of(message),
        **counts,
    )


def completion_of(
    content: str,
    reasoning: str,
    finish: str | None,
    usage: Any,
    model: str | None,
    ident: str | None,
    latency: float,
    first: float | None,
) -> Completion:
    content, reasoning = utf8_text(content), utf8_text(reasoning)
    model, ident = utf8_text(model), utf8_text(ident)
    tokens = count_of(getattr(usage, "completion_tokens", None))
    if usage is not None and tokens is not None:
        details = getattr(usage, "completion_tokens_details", None)
        reasoning_tokens = getattr(details, "reasoning_tokens", None) if details is not None else None
        return Completion(
            content=content,
            reasoning=reasoning,
            finish_reason=finish,
            prompt_tokens=count_of(getattr(usage, "prompt_tokens", None)) or 0,
            completion_tokens=tokens,
            reasoning_tokens=count_of(reasoning_tokens) or 0,
            usage_reported=True,
            model=model,
            response_id=ident,
            latency_s=latency,
            first_token_s=first,
        )
    estimate = estimate_tokens(len(content) + len(reasoning))
    return Completion(
        content=content,
        reasoning=reasoning,
        finish_reason=finish,
        prompt_tokens=0,
        completion_tokens=estimate,
        reasoning_tokens=0,
        usage_reported=False,
        model=model,
        response_id=ident,
        latency_s=latency,
        first_token_s=first,
    )
