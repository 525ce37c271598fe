"""One sample against a real local chat-completions server: answers, faults, retries and deadlines."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from r1build.errors import ConfigError, GenerationError
from r1build.generate.client import Attempt, ChatClient, Exchange, Meter, parse_retry_after
from r1build.generate.providers import resolve_endpoint
from r1build.manifest.model import Generation
from tests.generate.chat_server import Answer, ChatServer, Fault, Raw, Stall
from tests.generate.gen_support import KEY

FAST = {"retries": 2, "retry_backoff_s": 0.01, "request_timeout_s": 5.0}


def ask(
    server: ChatServer,
    *,
    deadline_s: float = 20.0,
    provider: str = "deepseek",
    temperature: float = 0.6,
    **settings: Any,
) -> tuple[Exchange, list[tuple[Attempt, float | None]]]:
    generation = Generation(provider=provider, **{**FAST, **settings})  # type: ignore[arg-type]
    endpoint = resolve_endpoint(generation, {"R1BUILD_BASE_URL": server.url, "DEEPSEEK_API_KEY": KEY})
    reports: list[tuple[Attempt, float | None]] = []

    async def go() -> Exchange:
        async with ChatClient(endpoint, generation) as client:
            exchange = Exchange(
                [{"role": "user", "content": "write vadd"}], client.params(temperature=temperature, max_tokens=1000)
            )
            return await client.complete(
                exchange,
                deadline=time.monotonic() + deadline_s,
                meter=Meter(),
                report=lambda a, w: reports.append((a, w)),
            )

    return asyncio.run(go()), reports


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_answer_with_reasoning(stream: bool, field: str) -> None:
    reply = Answer(
        "the answer ```cuda\nx\n```",
        reasoning="step one. step two.",
        reasoning_field=field,
        chunk_chars=4,
        completion_tokens=123,
    )
    with ChatServer([reply]) as server:
        exchange, reports = ask(server, stream=stream)
    c = exchange.completion
    assert c is not None and not reports
    assert (c.content, c.reasoning, c.finish_reason) == (reply.content, reply.reasoning, "stop")
    assert (c.prompt_tokens, c.completion_tokens, c.usage_reported) == (100, 123, True)
    body = server.chat_requests()[0].body
    assert body is not None and body["stream"] is stream
    assert [m["role"] for m in body["messages"]] == ["user"]  # no system prompt
    assert "n" not in body  # one sample per request
    assert server.chat_requests()[0].headers["authorization"] == f"Bearer {KEY}"


def test_sampling_parameters_follow_the_profile() -> None:
    with ChatServer([Answer("ok")]) as server:
        ask(server, provider="deepseek")
        ask(server, provider="vllm", top_p=0.9)
    deepseek, vllm = (r.body for r in server.chat_requests())
    assert deepseek is not None and vllm is not None
    assert "temperature" not in deepseek and "top_p" not in deepseek
    assert vllm["temperature"] == 0.6 and vllm["top_p"] == 0.9
    assert deepseek["max_tokens"] == 1000 and deepseek["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("usage", [True, False])
def test_stream_answered_without_streaming(usage: bool) -> None:
    reply = Answer("plain ```cuda\nx\n```", reasoning="thought", ignore_stream=True, usage=usage, completion_tokens=42)
    with ChatServer([reply]) as server:
        exchange, reports = ask(server)
    c = exchange.completion
    assert c is not None and not reports and (server.chat_requests()[0].body or {})["stream"] is True
    assert (c.content, c.reasoning, c.finish_reason, c.usage_reported) == (reply.content, "thought", "stop", usage)
    assert c.completion_tokens == (42 if usage else (len(reply.content) + len("thought")) // 4)


def test_usage_missing_is_estimated_from_text_not_chunks() -> None:
    """400 characters in 40 chunks: about 100 tokens by the text's length (4 characters a token), not 40."""
    with ChatServer([Answer("x" * 400, usage=False, chunk_chars=10)]) as server:
        exchange, _ = ask(server)
    assert exchange.completion is not None
    assert not exchange.completion.usage_reported and exchange.completion.completion_tokens == 100
    assert exchange.attempts[0].completion_tokens == 100 and exchange.estimated


def test_429_honours_retry_after(stopwatch: Any) -> None:
    with ChatServer([Fault(429, headers={"retry-after": "0.4"}), Answer("ok")]) as server:
        exchange, reports = ask(server)
    assert exchange.completion is not None and exchange.completion.content == "ok"
    assert [a.outcome for a in exchange.attempts] == ["rate_limited", "ok"]
    assert reports[0][1] == pytest.approx(0.4)
    requests = server.chat_requests()
    assert requests[1].received - requests[0].received >= 0.39


def test_retry_after_forms() -> None:
    assert parse_retry_after({"retry-after-ms": "250"}) == 0.25
    assert parse_retry_after({"retry-after": "2"}) == 2.0
    assert parse_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None
    assert parse_retry_after({"retry-after": " 1.5 "}) == 1.5
    # what float() reads but no server means as a wait: the backoff decides (it waited 10 s for "1_0", 1000 s for
    # "1e3", none for "-5")
    for odd in ("1_0", "1e3", "-5", "inf", "nan", "0x10", "٣"):
        assert parse_retry_after({"retry-after": odd}) is None, odd
        assert parse_retry_after({"retry-after-ms": odd}) is None, odd


@pytest.mark.parametrize(
    "fault",
    [
        Fault(500),
        Fault(503),
        Raw(b"<html>not json</html>"),
        Raw(b"[1, 2]"),
        Answer("cut", cut_after=2),
        Answer("dropped " * 50, chunk_chars=8, drop_after=3),
    ],
    ids=["500", "503", "not-json", "json-not-object", "stream-ends-early", "connection-drop"],
)
def test_transient_faults_are_retried(fault: Any) -> None:
    with ChatServer([fault, Answer("ok")]) as server:
        exchange, reports = ask(server)
    assert exchange.completion is not None and exchange.completion.content == "ok"
    assert len(server.chat_requests()) == 2
    assert len(reports) == 1 and reports[0][1] is not None
    assert reports[0][0].outcome in ("server_error", "bad_response", "stream_cut", "connection")


def test_body_not_json_when_not_streaming() -> None:
    with ChatServer([Raw(b"not json at all"), Answer("ok")]) as server:
        exchange, _ = ask(server, stream=False)
    assert [a.outcome for a in exchange.attempts] == ["bad_response", "ok"]


def test_retries_are_bounded() -> None:
    with ChatServer([Fault(500, message="still down")]) as server:
        exchange, reports = ask(server, retries=3)
    assert exchange.completion is None and exchange.failure == "server_error"
    assert len(server.chat_requests()) == 4
    assert [w is None for _, w in reports] == [False, False, False, True]
    assert "still down" in reports[-1][0].message


@pytest.mark.parametrize(
    ("status", "error", "hint"),
    [
        (400, GenerationError, "malformed"),
        (401, ConfigError, "DEEPSEEK_API_KEY"),
        (402, GenerationError, "credit"),
        (404, ConfigError, "unknown model"),
        (422, GenerationError, "parameters"),
    ],
)
def test_fatal_statuses_are_not_retried(status: int, error: type[Exception], hint: str) -> None:
    with ChatServer([Fault(status, message=f"nope, key {KEY} is bad"), Answer("never")]) as server:
        exchange, reports = ask(server)
    assert len(server.chat_requests()) == 1 and not reports
    assert isinstance(exchange.fatal, error)
    message = str(exchange.fatal)
    assert f"HTTP {status}" in message and hint in message and "nope" in message
    assert KEY not in message and KEY not in exchange.attempts[0].message


def test_stalled_connection_hits_the_overall_deadline(stopwatch: Any) -> None:
    with ChatServer([Stall(), Stall(after_headers=True), Answer("ok")]) as server:
        exchange, reports = ask(server, request_timeout_s=0.5, retries=2)
    assert exchange.completion is not None
    assert [a.outcome for a in exchange.attempts] == ["timeout", "timeout", "ok"]
    assert [w is not None for _, w in reports] == [True, True]
    assert stopwatch() < 4


def test_slow_answer_with_keepalives_within_the_deadline() -> None:
    reply = Answer("slow but fine", reasoning="thinking " * 20, chunk_chars=10, chunk_delay=0.02, keepalives=5)
    with ChatServer([reply]) as server:
        exchange, reports = ask(server, request_timeout_s=5)
    assert exchange.completion is not None and not reports
    assert exchange.completion.first_token_s is not None
    assert exchange.completion.latency_s >= 0.3


def test_sample_deadline_bounds_retries_and_waits(stopwatch: Any) -> None:
    """A retry-after longer than what is left of the deadline ends the sample instead of sleeping past it."""
    with ChatServer([Fault(429, headers={"retry-after": "30"})]) as server:
        exchange, reports = ask(server, deadline_s=1.0, retries=5)
    assert exchange.failure == "rate_limited" and reports[-1][1] is None
    assert stopwatch() < 2


def test_unreachable_server() -> None:
    with ChatServer([Answer("x")]) as server:
        url = server.url
    generation = Generation(**FAST)  # type: ignore[arg-type]
    endpoint = resolve_endpoint(generation, {"R1BUILD_BASE_URL": url})

    async def go() -> Exchange:
        async with ChatClient(endpoint, generation) as client:
            exchange = Exchange([{"role": "user", "content": "x"}], client.params(temperature=None, max_tokens=300))
            return await client.complete(exchange, deadline=time.monotonic() + 5)

    exchange = asyncio.run(go())
    assert exchange.failure == "connection" and len(exchange.attempts) == 3
