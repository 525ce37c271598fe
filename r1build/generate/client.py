"""One sample from R1: a chat-completions request through the official ``openai`` client, with R1's rules.

- One sample per request (``n`` is never sent); temperature and top_p only where the profile honours them.
- Streaming by default, so an answer that takes minutes keeps the connection busy (servers send SSE keep-alive
  comments); ``stream_options.include_usage`` asks for token counts.
- The client's own retries are off: retries happen here, after 429, 5xx, connection errors, timeouts and
  answers that do not parse (a body that is not JSON, a stream that ends before its finish chunk), with
  exponential backoff that honours ``retry-after`` / ``retry-after-ms`` and never waits past the deadline.
- Every attempt runs under an overall deadline (``asyncio.wait_for``), not only the HTTP client's per-read
  timeout, so a connection that stalls for ever costs one attempt, never an unbounded wait.
- 400, 401, 402, 403, 404, 422 (and other 4xx) end the run: :class:`~r1build.errors.ConfigError` for what the
  user must fix in their settings (key, URL, model), :class:`~r1build.errors.GenerationError` otherwise.

The key never leaves :class:`~r1build.generate.providers.Endpoint` except in the Authorization header; every
message this module produces passes through :meth:`ChatClient.redact`.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, cast

import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from ..errors import ConfigError, GenerationError, R1BuildError
from ..manifest.model import Generation
from .providers import Endpoint

__all__ = ["MAX_BACKOFF_S", "RETRYABLE", "Attempt", "ChatClient", "Completion", "Exchange", "Meter"]

MAX_BACKOFF_S = 60.0
"""Longest wait between two attempts when the server does not ask for longer."""

RETRYABLE = frozenset({"rate_limited", "server_error", "connection", "timeout", "bad_response", "stream_cut"})
"""Fault kinds that cost a retry; anything else that fails a sample is final for that sample."""

_FATAL_HINTS = {
    400: "the server refused the request as malformed",
    401: "the API key was rejected",
    402: "the account has no credit left",
    403: "the API key may not use this model",
    404: "wrong base URL or unknown model",
    413: "the prompt is too large for the server",
    422: "the server could not process the request's parameters",
}


@dataclass(eq=False)
class Meter:
    """Completion tokens received so far by one sample (chunks, while streaming): the live part of the spend."""

    tokens: int = 0
    """Estimated completion tokens received, all attempts together."""
    on_tick: Callable[[], None] | None = None
    """Called after each received chunk (a budget check; it may cancel the sample)."""

    def tick(self) -> None:
        """Count one more chunk."""
        self.tokens += 1
        if self.on_tick is not None:
            self.on_tick()


@dataclass(frozen=True)
class Attempt:
    """One HTTP request of a sample."""

    started_s: float
    """Seconds after the sample started."""
    latency_s: float
    """Seconds the attempt took."""
    outcome: str
    """``ok`` or the fault kind (``rate_limited``, ``server_error``, ``connection``, ``timeout``,
    ``bad_response``, ``stream_cut``, ``fatal``)."""
    status: int | None = None
    """HTTP status, when there was one."""
    message: str = ""
    """What went wrong, redacted."""
    retry_after_s: float | None = None
    """What the server asked to wait."""
    tokens: int = 0
    """Chunks of answer received before the attempt ended."""


@dataclass(frozen=True)
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
    failure: str | None = None
    """The last fault kind when no answer arrived (``cancelled`` when the budget stopped it)."""
    fatal: R1BuildError | None = None
    """The error that must end the run (401, 402, ...), when one happened."""

    @property
    def wasted_tokens(self) -> int:
        """Tokens received by attempts that failed."""
        return sum(a.tokens for a in self.attempts if a.outcome != "ok")


class _Fault(Exception):
    def __init__(self, kind: str, message: str, *, status: int | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.status = status
        self.retry_after = retry_after


@dataclass
class _Partial:
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    chunks: int = 0
    first_token_s: float | None = None


def parse_retry_after(headers: Any) -> float | None:
    """Seconds a response asks to wait (``retry-after-ms``, ``retry-after`` as seconds or HTTP date)."""
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) / scale)
        except ValueError:
            pass
        if name == "retry-after":
            try:
                when = email.utils.parsedate_to_datetime(value)
            except (TypeError, ValueError):
                return None
            return max(0.0, when.timestamp() - time.time())
    return None


def _error_text(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, dict) else None
        if isinstance(message, str) and message:
            return message
        return json.dumps(body)[:300]
    text = exc.message or ""
    return text if len(text) <= 300 else text[:300] + "..."


class ChatClient:
    """Sends samples to one endpoint; use as an async context manager."""

    def __init__(self, endpoint: Endpoint, generation: Generation, *,
                 rng: random.Random | None = None) -> None:
        self.endpoint = endpoint
        self.generation = generation
        self._rng = rng or random.Random()
        self._client: openai.AsyncOpenAI | None = None

    async def __aenter__(self) -> ChatClient:
        t = self.generation.request_timeout_s
        self._client = openai.AsyncOpenAI(
            api_key=self.endpoint.api_key,
            base_url=self.endpoint.base_url,
            max_retries=0,
            timeout=openai.Timeout(t, connect=min(30.0, t)),
        )
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    # -- helpers -----------------------------------------------------------------------------------------
    def redact(self, text: str) -> str:
        """``text`` with the API key replaced."""
        key = self.endpoint.secret
        return text.replace(key, "[redacted]") if key and len(key) >= 4 else text

    def params(self, *, temperature: float | None, max_tokens: int) -> dict[str, Any]:
        """Request parameters for one sample (besides the messages)."""
        params: dict[str, Any] = {"model": self.endpoint.model, "max_tokens": max_tokens,
                                  "stream": self.generation.stream}
        if self.endpoint.profile.honours_temperature and temperature is not None:
            params["temperature"] = temperature
            params["top_p"] = self.generation.top_p
        if self.generation.stream and self.endpoint.profile.stream_usage:
            params["stream_options"] = {"include_usage": True}
        return params

    def _fatal(self, status: int, message: str) -> R1BuildError:
        hint = _FATAL_HINTS.get(status, "the server refused the request")
        where = f"{self.endpoint.profile.name} endpoint {self.endpoint.display_url}"
        text = self.redact(f"{where} answered HTTP {status}: {hint}: {message}")
        if status == 401:
            source = f"${self.endpoint.key_env}" if self.endpoint.key_env else "no API key was found"
            return ConfigError(f"{text} (key from {source})")
        if status in (403, 404):
            return ConfigError(f"{text} (model {self.endpoint.model!r})")
        return GenerationError(text)

    def backoff(self, retry: int, retry_after: float | None) -> float:
        """Seconds to wait before retry number ``retry`` (0-based)."""
        if retry_after is not None:
            return retry_after
        base = self.generation.retry_backoff_s * (2.0**retry)
        return min(MAX_BACKOFF_S, base * self._rng.uniform(0.75, 1.25))

    # -- one sample --------------------------------------------------------------------------------------
    async def complete(self, exchange: Exchange, *, deadline: float, meter: Meter | None = None,
                       report: Callable[[Attempt, float | None], None] | None = None) -> Exchange:
        """Ask for the answer ``exchange`` describes, retrying what may be retried, until ``deadline``
        (``time.monotonic``); the attempts and the outcome are recorded in ``exchange`` as they happen.

        ``report(attempt, wait)`` is called after each failed attempt, ``wait`` being the seconds until the
        retry or None when the sample gives up. Fatal statuses land in ``Exchange.fatal``. Cancellation (a
        budget stop) marks the exchange ``cancelled`` and propagates.
        """
        meter = meter if meter is not None else Meter()
        try:
            await self._attempts(exchange, deadline, meter, report)
        except asyncio.CancelledError:
            exchange.failure = "cancelled"
            raise
        return exchange

    async def _attempts(self, exchange: Exchange, deadline: float, meter: Meter,
                        report: Callable[[Attempt, float | None], None] | None) -> None:
        start = time.monotonic()
        retries = self.generation.retries
        for attempt_no in range(retries + 1):
            now = time.monotonic()
            remaining = deadline - now
            if remaining <= 0:
                exchange.failure = exchange.failure or "timeout"
                return
            limit = min(self.generation.request_timeout_s, remaining)
            partial = _Partial()
            try:
                completion = await asyncio.wait_for(
                    self._once(exchange.messages, exchange.params, partial, meter, now), limit)
            except asyncio.TimeoutError:
                fault = _Fault("timeout", f"no complete answer within {limit:.1f} s")
            except _Fault as f:
                fault = f
            except asyncio.CancelledError:
                exchange.attempts.append(Attempt(now - start, time.monotonic() - now, "cancelled",
                                                 tokens=partial.chunks))
                raise
            else:
                exchange.attempts.append(Attempt(now - start, completion.latency_s, "ok", tokens=partial.chunks))
                exchange.completion = completion
                exchange.failure = None
                return
            latency = time.monotonic() - now
            if fault.kind == "fatal":
                assert fault.status is not None
                exchange.attempts.append(Attempt(now - start, latency, "fatal", fault.status,
                                                 self.redact(fault.message)))
                exchange.failure = "fatal"
                exchange.fatal = self._fatal(fault.status, fault.message)
                return
            attempt = Attempt(now - start, latency, fault.kind, fault.status, self.redact(fault.message),
                              fault.retry_after, partial.chunks)
            exchange.attempts.append(attempt)
            exchange.failure = fault.kind
            wait: float | None = None
            if attempt_no < retries:
                wait = self.backoff(attempt_no, fault.retry_after)
                if time.monotonic() + wait >= deadline:
                    wait = None
            if report is not None:
                report(attempt, wait)
            if wait is None:
                return
            await asyncio.sleep(wait)

    async def _once(self, messages: list[dict[str, str]], params: dict[str, Any], partial: _Partial,
                    meter: Meter, started: float) -> Completion:
        assert self._client is not None, "use ChatClient as an async context manager"
        try:
            if params.get("stream"):
                return await self._streamed(messages, params, partial, meter, started)
            return await self._plain(messages, params, started)
        except openai.APIStatusError as exc:
            status = exc.status_code
            text = _error_text(exc)
            if status == 429:
                raise _Fault("rate_limited", f"HTTP 429: {text}", status=status,
                             retry_after=parse_retry_after(exc.response.headers)) from None
            if status >= 500 or status in (408, 409, 425):
                raise _Fault("server_error", f"HTTP {status}: {text}", status=status,
                             retry_after=parse_retry_after(exc.response.headers)) from None
            raise _Fault("fatal", text, status=status) from None
        except openai.APITimeoutError:
            raise _Fault("timeout", "the HTTP client timed out") from None
        except openai.APIConnectionError as exc:
            cause = exc.__cause__ or exc.__context__
            detail = f" ({type(cause).__name__}: {cause})" if cause else ""
            raise _Fault("connection", f"connection failed{detail}") from None
        except openai.APIResponseValidationError as exc:
            raise _Fault("bad_response", f"the response does not fit the protocol: {exc.message}") from None
        except openai.APIError as exc:
            raise _Fault("bad_response", f"error event in the stream: {exc.message}") from None
        except ValueError as exc:  # JSON that does not parse, pydantic validation
            raise _Fault("bad_response", f"the response is not valid JSON: {str(exc)[:200]}") from None

    async def _plain(self, messages: list[dict[str, str]], params: dict[str, Any], started: float) -> Completion:
        assert self._client is not None
        response: Any = await self._client.chat.completions.create(messages=cast(Any, messages), **params)
        if not isinstance(response, ChatCompletion) or not response.choices:
            raise _Fault("bad_response", f"the response is not a chat completion: {str(response)[:200]}")
        choice = response.choices[0]
        message = choice.message
        extra = message.model_extra or {}
        reasoning = extra.get("reasoning_content") or extra.get("reasoning") or ""
        content = message.content or ""
        usage = response.usage
        return _completion(content, str(reasoning), choice.finish_reason, usage, response.model, response.id,
                           time.monotonic() - started, None, chunks=None)

    async def _streamed(self, messages: list[dict[str, str]], params: dict[str, Any], partial: _Partial,
                        meter: Meter, started: float) -> Completion:
        assert self._client is not None
        stream: Any = await self._client.chat.completions.create(messages=cast(Any, messages), **params)
        content_type = str(stream.response.headers.get("content-type", ""))
        if content_type.startswith("application/json"):  # a server that ignores "stream": the whole answer
            try:
                body = await stream.response.aread()
            finally:
                await stream.close()
            return _from_json(body, time.monotonic() - started)
        finish: str | None = None
        usage: Any = None
        model: str | None = None
        ident: str | None = None
        try:
            async for chunk in stream:
                if not isinstance(chunk, ChatCompletionChunk):
                    raise _Fault("bad_response", f"a stream chunk is not a completion chunk: {str(chunk)[:200]}")
                model = model or chunk.model
                ident = ident or chunk.id
                if chunk.usage is not None:
                    usage = chunk.usage
                if not chunk.choices:
                    continue
                choice = chunk.choices[0]
                delta = choice.delta
                extra = delta.model_extra or {}
                piece_r = extra.get("reasoning_content") or extra.get("reasoning")
                if piece_r:
                    partial.reasoning.append(str(piece_r))
                if delta.content:
                    partial.content.append(delta.content)
                if piece_r or delta.content:
                    partial.chunks += 1
                    if partial.first_token_s is None:
                        partial.first_token_s = time.monotonic() - started
                    meter.tick()
                if choice.finish_reason is not None:
                    finish = choice.finish_reason
        finally:
            await stream.close()
        if finish is None:
            if model is None:
                raise _Fault("stream_cut", "the response carried no stream events (not server-sent events, or an "
                                           "empty stream)")
            raise _Fault("stream_cut", f"the stream ended before its finish chunk, after {partial.chunks} deltas")
        return _completion("".join(partial.content), "".join(partial.reasoning), finish, usage, model, ident,
                           time.monotonic() - started, partial.first_token_s, chunks=partial.chunks)


def _from_json(body: bytes, latency: float) -> Completion:
    """A completion from a plain JSON body, read by hand (a streamed request answered without streaming)."""
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise _Fault("bad_response", f"the response is not valid JSON: {str(exc)[:200]}") from None
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise _Fault("bad_response", f"the response is not a chat completion: {str(data)[:200]}")
    raw_message = choices[0].get("message")
    message: dict[str, Any] = raw_message if isinstance(raw_message, dict) else {}
    content = message.get("content") or ""
    reasoning = message.get("reasoning_content") or message.get("reasoning") or ""
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else None
    tokens = usage.get("completion_tokens") if usage else None
    if usage is None or not isinstance(tokens, int):
        return Completion(str(content), str(reasoning), choices[0].get("finish_reason"), 0,
                          (len(str(content)) + len(str(reasoning))) // 4, 0, False, data.get("model"), data.get("id"),
                          latency, None)
    details = usage.get("completion_tokens_details")
    reasoning_tokens = details.get("reasoning_tokens") if isinstance(details, dict) else None
    return Completion(str(content), str(reasoning), choices[0].get("finish_reason"),
                      int(usage.get("prompt_tokens") or 0), tokens, int(reasoning_tokens or 0), True,
                      data.get("model"), data.get("id"), latency, None)


def _completion(content: str, reasoning: str, finish: str | None, usage: Any, model: str | None,
                ident: str | None, latency: float, first: float | None, *, chunks: int | None) -> Completion:
    if usage is not None and getattr(usage, "completion_tokens", None) is not None:
        details = getattr(usage, "completion_tokens_details", None)
        reasoning_tokens = getattr(details, "reasoning_tokens", None) if details is not None else None
        return Completion(content, reasoning, finish, int(usage.prompt_tokens or 0), int(usage.completion_tokens),
                          int(reasoning_tokens or 0), True, model, ident, latency, first)
    estimate = chunks if chunks is not None else (len(content) + len(reasoning)) // 4
    return Completion(content, reasoning, finish, 0, estimate, 0, False, model, ident, latency, first)
