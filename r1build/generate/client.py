"""One sample from R1: a chat-completions request through the official ``openai`` client, with R1's rules.

- One sample per request (``n`` is never sent); temperature and top_p only where the profile honours them.
- Streaming by default, so an answer that takes minutes keeps the connection busy (servers send SSE keep-alive
  comments); ``stream_options.include_usage`` asks for token counts.
- The client's own retries are off: retries happen here, after 429, 5xx, connection errors, timeouts and
  answers that do not parse (a body that is not JSON, a stream that ends before its finish chunk). The pause
  before a retry is one :class:`Pacer` shared by every sample of a search: a ``retry-after`` / ``retry-after-ms``
  (seconds or an HTTP date) or an exponential backoff holds back every request, not only the one that failed;
  a pause that would end after the search's deadline stops the search instead of sleeping through it, and a run
  of failures with no answer in between trips the circuit breaker.
- Each attempt's cost is counted from the usage the server reports, or from the length of the text received
  (never from the number of chunks), and handed to a :class:`~.exchange.Spend`, which also sets each attempt's
  ``max_tokens`` from what remains of the budget.
- Every attempt runs under an overall deadline (``asyncio.wait_for``), not only the HTTP client's per-read
  timeout, so a connection that stalls for ever costs one attempt, never an unbounded wait.
- 400, 401, 402, 403, 404, 422 (and other 4xx) end the run: :class:`~r1build.errors.ConfigError` for what the
  user must fix in their settings (key, URL, model), :class:`~r1build.errors.GenerationError` otherwise.

The key never leaves :class:`~r1build.generate.providers.Endpoint` except in the Authorization header; every
message this module produces passes through :meth:`ChatClient.redact`, which removes every configured secret.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, cast

from ..convert import replace
from ..errors import ConfigError, GenerationError, R1BuildError
from ..toolchain.extras import GENERATE

try:
    import openai
    from openai.types.chat import ChatCompletion, ChatCompletionChunk
except ImportError:  # the generate extra is not installed: the command that needs it says which to install
    raise GENERATE.missing() from None
from ..manifest.model import Generation
from .bodies import ACCEPT_ENCODING, BodyTooLarge, bound_body
from .budget import estimate_tokens
from .exchange import (
    FAULT_KINDS,
    RETRYABLE,
    Attempt,
    Completion,
    Exchange,
    FaultKind,
    Meter,
    SaidInstead,
    Spend,
    refusal_of,
    tool_calls_of,
)
from .pacing import MAX_BACKOFF_S, Pacer, parse_retry_after
from .providers import Endpoint
from .responses import (
    Fault,
    OpenAIClient,
    Partial,
    completion_of,
    connection_fault,
    content_text,
    error_in_place_of_an_answer,
    finish_at_end,
    not_a_completion,
    not_events,
    reasoning_of,
    status_fault,
    take_delta,
    text_of,
)

__all__ = [
    "FAULT_KINDS",
    "MAX_BACKOFF_S",
    "RETRYABLE",
    "Attempt",
    "ChatClient",
    "Completion",
    "Exchange",
    "FaultKind",
    "Meter",
    "Pacer",
    "Spend",
    "parse_retry_after",
]

_FATAL_HINTS = {
    400: "the server refused the request as malformed",
    401: "the API key was rejected",
    402: "the account has no credit left",
    403: "the API key may not use this model",
    404: "wrong base URL or unknown model",
    413: "the prompt is too large for the server",
    422: "the server could not process the request's parameters",
}


AFTER_FINISH_S = 5.0
"""Seconds a stream may stay silent after its finish chunk (the usage chunk and ``[DONE]`` come at once) before
the answer is taken as whole: a server or proxy that holds the connection open must not cost the answer."""


_UNKNOWN_MODEL = re.compile(
    r"\bmodel\b.*\b(not exists?|does not exist|doesn't exist|not found|unknown|invalid)\b"
    r"|\b(unknown|invalid|no such)\b.*\bmodel\b",
    re.IGNORECASE,
)
"""A refusal that names the model as unknown: the manifest's (or the profile's) model, a setting to fix."""
_TOO_LONG = re.compile(r"maximum context length|context length|\bmax_tokens\b|\bmax_completion_tokens\b", re.I)
"""A refusal that says the request asks for more tokens than the model takes: ``max-tokens``, a setting."""


def _charge(spend: Spend | None, attempt: Attempt | None) -> None:
    """Charge what ``attempt`` cost to the budget (nothing, for an attempt never sent)."""
    if spend is not None:
        tokens = (attempt.prompt_tokens, attempt.completion_tokens) if attempt is not None else (0, 0)
        spend.charge(prompt_tokens=tokens[0], completion_tokens=tokens[1])


class ChatClient:
    """Sends samples to one endpoint; use as an async context manager. ``pacer`` is shared by every sample sent
    through this client (one made from the settings when not given, with no deadline)."""

    def __init__(
        self,
        endpoint: Endpoint,
        generation: Generation,
        *,
        pacer: Pacer | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.generation = generation
        self.pacer = pacer or Pacer(
            generation.retry_backoff_s, generation.max_consecutive_failures, float("inf"), rng or random.Random()
        )
        self._client: openai.AsyncOpenAI | None = None
        self._probing = False
        """Whether the first request on this endpoint and key was sent (the rest wait for its answer)."""
        self._opened = asyncio.Event()
        """Set once the first request ended: the rest may go."""
        self._refused = False
        """Whether the first request was refused for good (nothing more is sent)."""
        self.after_finish_s = AFTER_FINISH_S
        """How long a stream may stay silent after its finish chunk before the answer is taken as whole."""

    async def __aenter__(self) -> ChatClient:
        t = self.generation.request_timeout_s
        try:
            self._client = OpenAIClient(
                api_key=self.endpoint.api_key,
                base_url=self.endpoint.base_url,
                max_retries=0,
                timeout=openai.Timeout(t, connect=min(30.0, t)),
                http_client=openai.DefaultAsyncHttpxClient(
                    headers={"Accept-Encoding": ACCEPT_ENCODING}, event_hooks={"response": [bound_body]}
                ),
            )
        except Exception as exc:  # the HTTP client refuses the URL (a port out of range, a bad character)
            raise ConfigError(
                self.redact(f"{self.endpoint.display_url!r} is not a URL the HTTP client can use: {exc}")
            ) from None
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    # -- helpers -----------------------------------------------------------------------------------------
    def redact(self, text: str) -> str:
        """``text`` without any configured secret."""
        return self.endpoint.redact(text)

    def params(self, *, temperature: float | None, max_tokens: int) -> dict[str, Any]:
        """Request parameters for one sample (besides the messages)."""
        params: dict[str, Any] = {
            "model": self.endpoint.model,
            "max_tokens": max_tokens,
            "stream": self.generation.stream,
        }
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
        if status in (400, 422) and _UNKNOWN_MODEL.search(message):  # DeepSeek: 400 "Model Not Exist"
            return ConfigError(f"{text} (model {self.endpoint.model!r}: set generation.model)")
        if status in (400, 413, 422) and _TOO_LONG.search(message):  # vLLM: "maximum context length is ..."
            return ConfigError(
                f"{text} (generation.max-tokens is {self.generation.max_tokens}: lower it, or the prompt is too long "
                "for the model's context)"
            )
        return GenerationError(text)

    # -- one sample --------------------------------------------------------------------------------------
    async def complete(
        self,
        exchange: Exchange,
        *,
        deadline: float,
        meter: Meter | None = None,
        spend: Spend | None = None,
        report: Callable[[Attempt, float | None], None] | None = None,
    ) -> Exchange:
        """Ask for the answer ``exchange`` describes, retrying what may be retried, until ``deadline``
        (``time.monotonic``); the attempts and the outcome are recorded in ``exchange`` as they happen.

        Every attempt first waits for the shared pause (:attr:`pacer`); ``spend`` sets each attempt's
        ``max_tokens`` and is told what each cost. ``report(attempt, wait)`` is called after each failed attempt,
        ``wait`` being the seconds until the retry or None when the sample gives up. Fatal statuses land in
        ``Exchange.fatal``. Cancellation marks the exchange ``cancelled`` and propagates.
        """
        meter = meter if meter is not None else Meter()
        try:
            await self._attempts(exchange, deadline, meter, spend, report)
        except asyncio.CancelledError:
            exchange.failure = "cancelled"
            raise
        return exchange

    def _prompt_estimate(self, messages: list[dict[str, str]]) -> int:
        return estimate_tokens(sum(len(m["content"]) for m in messages))

    async def _attempts(
        self,
        exchange: Exchange,
        deadline: float,
        meter: Meter,
        spend: Spend | None,
        report: Callable[[Attempt, float | None], None] | None,
    ) -> None:
        start = time.monotonic()
        retries = self.generation.retries
        pacer = self.pacer
        for attempt_no in range(retries + 1):
            probe = await self._admit()
            if probe is None:  # the first request on this endpoint and key was refused for good: send nothing
                return
            if not await pacer.turn():
                exchange.failure = "stopped" if exchange.attempts else None
                return
            params = exchange.params if spend is None else await self._reserved(exchange, spend, attempt_no)
            if params is None:
                return
            now = time.monotonic()
            remaining = deadline - now
            if remaining <= 0:
                _charge(spend, None)
                exchange.failure = exchange.failure or "timeout"
                return
            limit = min(self.generation.request_timeout_s, remaining)
            partial = Partial(opened=self._opened if probe else None)
            meter.chars = 0
            meter.on_the_wire = True
            try:
                completion = await asyncio.wait_for(
                    self._probed(probe, self._once(exchange.messages, params, partial, meter, now)), limit
                )
            except asyncio.TimeoutError:
                fault = self._timeout_fault(limit)
            except Fault as f:
                fault = f
            except asyncio.CancelledError:
                cancelled = Fault("cancelled", "cancelled")
                _charge(
                    spend,
                    self._failed_attempt(exchange, now - start, time.monotonic() - now, params, partial, cancelled),
                )
                raise
            else:
                meter.on_the_wire = False
                self._answered(exchange, completion, params, now - start, spend)
                return
            meter.on_the_wire = False
            attempt = self._failed_attempt(exchange, now - start, time.monotonic() - now, params, partial, fault)
            _charge(spend, attempt)
            if fault.kind != "fatal" and _holds_code(exchange):
                exchange.failure = fault.kind  # kept by the controller as the answer, cut off after its code
                return
            if self._retry_wait(exchange, attempt, fault, (now, deadline), attempt_no >= retries, report) is None:
                return

    def _retry_wait(
        self,
        exchange: Exchange,
        attempt: Attempt,
        fault: Fault,
        times: tuple[float, float],
        last: bool,
        report: Callable[[Attempt, float | None], None] | None,
    ) -> float | None:
        """After a failed attempt (sent at ``times[0]``; the search's deadline ``times[1]``): the seconds to wait
        before the next, reported; None to give up (a fatal refusal, the ``last`` attempt, a stopped search, a wait
        past the deadline)."""
        now, deadline = times
        if fault.kind == "fatal":
            assert fault.status is not None
            exchange.failure = "fatal"
            exchange.fatal = self._fatal(fault.status, fault.message)
            return None
        exchange.failure = fault.kind
        pause = self.pacer.failed(attempt.label, now, fault.retry_after)
        give_up = last or self.pacer.stopped is not None or time.monotonic() + pause >= deadline
        wait = None if give_up else pause
        if report is not None:
            report(attempt, wait)
        return wait

    def _timeout_fault(self, limit: float) -> Fault:
        """An attempt that got no complete answer within ``limit`` seconds: cut short by the search's deadline
        (each attempt after what was left of it: one label for all), or by the request's own timeout."""
        at_deadline = limit < self.generation.request_timeout_s
        label = "timed out at the wall-time deadline" if at_deadline else f"timed out after {limit:.3g} s"
        return Fault("timeout", f"no complete answer within {limit:.1f} s", label=label)

    async def _reserved(self, exchange: Exchange, spend: Spend, attempt_no: int) -> dict[str, Any] | None:
        """The request's parameters with the tokens the budget lets it ask for; None when the budget is spent (its
        reason set on ``exchange``) or the search stopped while it waited."""
        max_tokens = await spend.reserve()
        if isinstance(max_tokens, str):
            exchange.budget = max_tokens
            return None
        if self.pacer.stopped is not None:  # stopped while waiting for the budget
            _charge(spend, None)
            exchange.failure = "stopped" if exchange.attempts else None
            return None
        if attempt_no == 0:
            exchange.params["max_tokens"] = max_tokens
        return {**exchange.params, "max_tokens": max_tokens}

    def _answered(
        self, exchange: Exchange, completion: Completion, params: dict[str, Any], started: float, spend: Spend | None
    ) -> None:
        """Record the attempt that answered, charge it and keep its completion."""
        tokens = completion.completion_tokens
        if not completion.usage_reported:  # an estimate: the server cannot have sent more than asked
            tokens = min(tokens, params["max_tokens"])
        attempt = Attempt(
            started_s=started,
            latency_s=completion.latency_s,
            outcome="ok",
            max_tokens=params["max_tokens"],
            prompt_tokens=completion.prompt_tokens or self._prompt_estimate(exchange.messages),
            completion_tokens=tokens,
            usage_reported=completion.usage_reported,
        )
        exchange.attempts.append(attempt)
        _charge(spend, attempt)
        exchange.completion = completion
        exchange.failure = None
        self.pacer.answered()

    def _failed_attempt(
        self,
        exchange: Exchange,
        started: float,
        latency: float,
        params: dict[str, Any],
        partial: Partial,
        fault: Fault,
    ) -> Attempt:
        """Record a failed attempt; what it cost is estimated from the text received (the prompt counts once
        the server started answering)."""
        chars = sum(len(p) for p in partial.content) + sum(len(p) for p in partial.reasoning)
        if chars:
            exchange.partial = Completion(
                content="".join(partial.content),
                reasoning="".join(partial.reasoning),
                finish_reason=None,
                prompt_tokens=0,
                completion_tokens=estimate_tokens(chars),
                reasoning_tokens=0,
                usage_reported=False,
                model=None,
                response_id=None,
                latency_s=latency,
                first_token_s=partial.first_token_s,
            )
        attempt = Attempt(
            started_s=started,
            latency_s=latency,
            outcome=fault.kind,
            status=fault.status,
            message=self.redact(fault.message),
            retry_after_s=fault.retry_after,
            max_tokens=params.get("max_tokens"),
            prompt_tokens=self._prompt_estimate(exchange.messages) if chars else 0,
            completion_tokens=min(estimate_tokens(chars), params.get("max_tokens") or chars),
            label=fault.label or fault.kind,
        )
        exchange.attempts.append(attempt)
        return attempt

    async def _admit(self) -> bool | None:
        """May an attempt be sent: True when it is the first of this client (a new endpoint and key: it goes
        alone), False once that one answered, None when it was refused for good (a 401, a 402: the rest would be
        refused too)."""
        if self._opened.is_set():
            return None if self._refused else False
        if not self._probing:
            self._probing = True
            return True
        await self._opened.wait()
        return None if self._refused else False

    async def _probed(self, probe: bool, sent: Awaitable[Completion]) -> Completion:
        """``sent``; where it is the first request (``probe``), the others are let go once it ended (a stream:
        once its status and headers arrived, well before R1 finished thinking)."""
        try:
            completion = await sent
        except Fault as fault:
            self._refused = probe and fault.kind == "fatal"
            raise
        finally:
            if probe:
                self._opened.set()
        return completion

    async def _once(
        self, messages: list[dict[str, str]], params: dict[str, Any], partial: Partial, meter: Meter, started: float
    ) -> Completion:
        assert self._client is not None, "use ChatClient as an async context manager"
        try:
            if params.get("stream"):
                return await self._streamed(messages, params, partial, meter, started)
            return await self._plain(messages, params, started)
        except Fault:
            raise
        except BodyTooLarge as exc:  # a stream past its bounds, read through bodies.bound_body and EventBound
            raise _oversized(exc) from None
        except openai.APIStatusError as exc:
            raise status_fault(exc) from None
        except openai.APITimeoutError:
            raise Fault(
                "timeout", "the HTTP client timed out", label=f"timed out after {self.generation.request_timeout_s:g} s"
            ) from None
        except openai.APIConnectionError as exc:
            if isinstance(exc.__cause__, BodyTooLarge):  # a plain body, read by the client through bound_body
                raise _oversized(exc.__cause__) from None
            raise connection_fault(exc, partial) from None
        except openai.APIResponseValidationError as exc:
            raise Fault(
                "bad_response", f"the response does not fit the protocol: {exc.message}", label="a malformed response"
            ) from None
        except openai.APIError as exc:
            raise Fault(
                "bad_response", f"error event in the stream: {exc.message}", label="an error event in the stream"
            ) from None
        except ValueError as exc:  # JSON that does not parse, pydantic validation
            raise Fault(
                "bad_response", f"the response is not valid JSON: {str(exc)[:200]}", label="a malformed response"
            ) from None
        except Exception as exc:  # JSON of another shape (choices: [5]): the client does not check what it builds
            raise Fault(
                "bad_response",
                f"the response does not fit the protocol ({type(exc).__name__}: {str(exc)[:200]})",
                label="a malformed response",
            ) from None

    async def _plain(self, messages: list[dict[str, str]], params: dict[str, Any], started: float) -> Completion:
        assert self._client is not None
        response: Any = await self._client.chat.completions.create(messages=cast(Any, messages), **params)
        if isinstance(response, str) and response.lstrip().startswith("<"):
            raise not_a_completion(response, "text/html")  # a web page, not the API: named in its words
        if not isinstance(response, ChatCompletion) or not response.choices:
            if isinstance(response, ChatCompletion):
                error_in_place_of_an_answer((response.model_extra or {}).get("error"))
            raise Fault(
                "bad_response",
                f"the response is not a chat completion: {str(response)[:200]}",
                label="a malformed response",
            )
        choice = response.choices[0]
        message = choice.message
        if message is None:  # a choice without a message: an empty answer, as in a plain body read by hand
            content, reasoning = "", ""
        else:
            extra = message.model_extra or {}
            reasoning = reasoning_of(extra) or ""
            content = content_text(message.content) or ""
        usage = response.usage
        completion = completion_of(
            content,
            str(reasoning),
            text_of(choice.finish_reason),
            usage,
            text_of(response.model),
            text_of(response.id),
            time.monotonic() - started,
            None,
        )
        return replace(completion, refusal=refusal_of(message), tool_calls=tool_calls_of(message))

    async def _streamed(
        self, messages: list[dict[str, str]], params: dict[str, Any], partial: Partial, meter: Meter, started: float
    ) -> Completion:
        assert self._client is not None
        stream: Any = await self._client.chat.completions.create(messages=cast(Any, messages), **params)
        partial.responded = True
        if partial.opened is not None:
            partial.opened.set()
        whole = await not_events(stream, started)
        if whole is not None:
            return whole
        finish: str | None = None
        usage: Any = None
        model: str | None = None
        ident: str | None = None
        closing_usage = False  # the last chunk was the usage chunk (no choices): the server finished
        said = SaidInstead()  # a refusal or tool calls in place of content
        chunks = aiter(stream)
        try:
            while True:
                try:
                    if finish is None:
                        chunk = await anext(chunks)
                    else:  # the answer is whole: what may follow (usage, [DONE]) comes at once or not at all
                        chunk = await asyncio.wait_for(anext(chunks), self.after_finish_s)
                except (StopAsyncIteration, asyncio.TimeoutError):  # the end, or silence after the finish chunk
                    break
                _check_chunk(chunk)
                model = model or text_of(chunk.model)
                ident = ident or text_of(chunk.id)
                if chunk.usage is not None:
                    usage = chunk.usage
                closing_usage = chunk.usage is not None and not chunk.choices
                # one sample per request: deltas of another choice (a server that answers n > 1) are not this one's
                choice = next((c for c in chunk.choices or () if _choice_index(c) in (0, None)), None)
                if choice is None:
                    continue
                if choice.delta is not None:  # a finish chunk may come with a null delta, or none: its finish counts
                    take_delta(choice.delta, partial, meter, said, started)
                if text_of(choice.finish_reason) is not None:
                    finish = text_of(choice.finish_reason)
        except openai.APIConnectionError:
            if finish is None:
                raise
            # the connection broke after the finish chunk: the answer is whole, only usage or [DONE] was lost
        finally:
            await stream.close()
        finish = finish_at_end(finish, usage if closing_usage else None, params, model is not None, partial)
        return said.into(
            completion_of(
                "".join(partial.content),
                "".join(partial.reasoning),
                finish,
                usage,
                model,
                ident,
                time.monotonic() - started,
                partial.first_token_s,
            )
        )


def _choice_index(choice: Any) -> Any:
    """A stream chunk's choice index, a number written as text ("0", as some servers send it) read as that number."""
    index = getattr(choice, "index", 0)
    if isinstance(index, str) and index.strip().isascii() and index.strip().isdigit():
        return int(index)
    return index


def _oversized(exc: BodyTooLarge) -> Fault:
    """The fault of a response past what this process takes in (:mod:`.bodies`)."""
    return Fault("bad_response", f"{exc} (not read further)", label="an oversized response")


def _check_chunk(chunk: Any) -> None:
    """A :class:`Fault` for an event of the stream that is not a completion chunk."""
    if not isinstance(chunk, ChatCompletionChunk):
        raise Fault(
            "bad_response",
            f"a stream chunk is not a completion chunk: {str(chunk)[:200]}",
            label="a malformed response",
        )


def _holds_code(exchange: Exchange) -> bool:
    """Whether what the failed attempt received holds complete code (:attr:`~.exchange.Exchange.holds_code`)."""
    return (
        exchange.partial is not None
        and exchange.holds_code is not None
        and exchange.holds_code(exchange.partial.content)
    )
