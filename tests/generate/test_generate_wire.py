"""Answers that arrive bent, against the real local server: a connection cut after the answer was whole, a
stream without a finish reason but with its closing usage, deltas of another choice, usage that is no count, a
choice without a message, and URLs the HTTP client cannot use. None of them may cost a retry of an answer
already received (paid for), give budget back, or end in a traceback."""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import time
from typing import Any

import pytest

from r1build.cli.main import main
from r1build.errors import ConfigError
from r1build.generate.client import ChatClient, Exchange, Meter
from r1build.generate.providers import resolve_endpoint
from r1build.manifest.model import Generation
from tests.generate.chat_server import Answer, ChatServer, Events, Fault, Hangup, Raw, Reply, chunk
from tests.generate.gen_support import KEY, Project

USAGE = {"prompt_tokens": 10, "completion_tokens": 50, "total_tokens": 60}


def ask(
    script: list[Reply],
    *,
    stream: bool = True,
    max_tokens: int = 1000,
    after_finish_s: float = 5.0,
    timeout: float = 5.0,
) -> tuple[Exchange, int]:
    """One sample against a server playing ``script``; the exchange and how many requests the server saw."""
    generation = Generation(retries=2, retry_backoff_s=0.01, request_timeout_s=timeout, stream=stream)
    with ChatServer(script) as server:
        endpoint = resolve_endpoint(generation, {"R1BUILD_BASE_URL": server.url, "DEEPSEEK_API_KEY": KEY})

        async def go() -> Exchange:
            async with ChatClient(endpoint, generation) as client:
                client.after_finish_s = after_finish_s
                exchange = Exchange(
                    [{"role": "user", "content": "write vadd"}], client.params(temperature=None, max_tokens=max_tokens)
                )
                return await client.complete(exchange, deadline=time.monotonic() + 20, meter=Meter())

        return asyncio.run(go()), len(server.chat_requests())


@pytest.mark.parametrize(
    "events",
    [
        [chunk("the answer ```cuda\nx\n```"), chunk(finish="stop")],
        [chunk("the answer ```cuda\nx\n```"), chunk(finish="stop"), chunk(choices=False, usage=USAGE)],
    ],
    ids=["before-usage", "before-done"],
)
def test_a_connection_cut_after_the_finish_chunk_keeps_the_answer(events: list[Any]) -> None:
    """The answer was whole (its finish chunk came); only the usage chunk or [DONE] was lost to the cut: it is the
    answer, not a fault that asks (and pays) for it again."""
    exchange, requests = ask([Events(events, done=False, drop=True), Answer("asked again")])
    c = exchange.completion
    assert requests == 1 and c is not None
    assert (c.content, c.finish_reason) == ("the answer ```cuda\nx\n```", "stop")
    assert [a.outcome for a in exchange.attempts] == ["ok"]


@pytest.mark.parametrize(
    "events",
    [
        [chunk("the answer ```cuda\nx\n```"), chunk(finish="stop")],
        [chunk("the answer ```cuda\nx\n```"), chunk(finish="stop"), chunk(choices=False, usage=USAGE)],
    ],
    ids=["after-finish", "after-usage"],
)
def test_a_connection_held_open_after_the_finish_chunk_keeps_the_answer(events: list[Any], stopwatch: Any) -> None:
    """A server (or proxy) that holds the connection open after the answer's finish chunk, never sending [DONE]:
    the answer is taken once the stream has been silent a moment, not timed out after ``request-timeout-s`` and
    asked (and paid) for again."""
    exchange, requests = ask([Events(events, done=False, stall=True), Answer("asked again")], after_finish_s=0.2)
    c = exchange.completion
    assert requests == 1 and c is not None and c.content == "the answer ```cuda\nx\n```"
    assert stopwatch() < 2.5  # the request timeout is 5 s


@pytest.mark.slow
def test_a_stream_silent_before_its_finish_chunk_still_times_out(stopwatch: Any) -> None:
    events = Events([chunk("the answer ```cu")], done=False, stall=True)
    exchange, requests = ask([events, Answer("asked again")], after_finish_s=0.1, timeout=1.0)
    assert requests == 2 and [a.outcome for a in exchange.attempts] == ["timeout", "ok"]
    assert stopwatch() >= 1.0


def test_a_cut_before_the_finish_chunk_is_still_retried() -> None:
    exchange, requests = ask([Events([chunk("the answer ```cu")], done=False, drop=True), Answer("asked again")])
    assert requests == 2 and exchange.completion is not None and exchange.completion.content == "asked again"
    assert [a.outcome for a in exchange.attempts] == ["stream_cut", "ok"]


@pytest.mark.parametrize(("used", "finish"), [(50, "stop"), (1000, "length")])
def test_the_closing_usage_chunk_ends_a_stream_without_a_finish_reason(used: int, finish: str) -> None:
    """A server that never sends a finish reason but closes with the usage chunk has finished: the answer is kept
    (cut off at ``max_tokens`` when it used them all), not retried."""
    usage = {**USAGE, "completion_tokens": used}
    exchange, requests = ask([Events([chunk("the answer"), chunk(choices=False, usage=usage)]), Answer("again")])
    c = exchange.completion
    assert requests == 1 and c is not None
    assert (c.content, c.finish_reason, c.completion_tokens, c.usage_reported) == ("the answer", finish, used, True)


def test_without_finish_reason_or_closing_usage_a_stream_is_cut() -> None:
    exchange, requests = ask([Events([chunk("the answer")]), Answer("asked again")])
    assert requests == 2 and [a.outcome for a in exchange.attempts] == ["stream_cut", "ok"]


def test_deltas_of_another_choice_are_not_mixed_in() -> None:
    events = [
        chunk("first "),
        chunk("OTHER ", index=1),
        chunk("half", finish="stop"),
        chunk("CHOICE", index=1, finish="length"),
    ]
    exchange, _ = ask([Events(events)])
    assert exchange.completion is not None
    assert (exchange.completion.content, exchange.completion.finish_reason) == ("first half", "stop")


def test_a_choice_index_written_as_text_is_read_as_its_number() -> None:
    """A server that writes a chunk's choice index as text ("0"): its deltas were taken for another choice's and
    dropped, the answer came out empty and was asked (and paid) for again. Text "1" is still another choice."""
    events = [chunk("first "), chunk("OTHER ", index=1), chunk("half", finish="stop")]
    for event, index in zip(events, ("0", " 1", "0"), strict=True):
        event["choices"][0]["index"] = index
    exchange, requests = ask([Events(events), Answer("asked again")])
    assert requests == 1 and exchange.completion is not None
    assert (exchange.completion.content, exchange.completion.finish_reason) == ("first half", "stop")


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": -5, "completion_tokens": -1000},
        {"prompt_tokens": 5, "completion_tokens": "lots"},
        {"prompt_tokens": 5, "completion_tokens": None},
        {"prompt_tokens": 5, "completion_tokens": True},
    ],
    ids=["negative", "text", "null", "boolean"],
)
@pytest.mark.parametrize("stream", [True, False])
def test_usage_that_is_no_count_is_estimated_from_the_text(usage: dict[str, Any], stream: bool) -> None:
    """Usage that cannot be a count neither fails the answer (asking again would pay twice) nor gives budget
    back (a negative count): the answer is charged by its text's length, as where a server reports none."""
    content = "x" * 400
    body = (
        b'{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,'
        + b'"message":{"role":"assistant","content":"'
        + content.encode()
        + b'"},"finish_reason":"stop"}],"usage":'
        + json.dumps(usage).encode()
        + b"}"
    )
    reply: Reply = (
        Events([chunk(content), chunk(finish="stop"), chunk(choices=False, usage=usage)]) if stream else Raw(body)
    )
    exchange, requests = ask([reply, Answer("asked again")], stream=stream)
    c = exchange.completion
    assert requests == 1 and c is not None and c.content == content
    assert (c.completion_tokens, c.usage_reported) == (100, False)
    attempt = exchange.attempts[0]
    assert attempt.completion_tokens == 100 and attempt.prompt_tokens > 0


@pytest.mark.parametrize("stream", [True, False])
def test_a_choice_without_a_message_is_an_empty_answer(stream: bool) -> None:
    choice = {"index": 0, "message": None, "finish_reason": "stop"}
    body = json.dumps({"id": "c", "object": "chat.completion", "created": 1, "model": "m", "choices": [choice]})
    exchange, requests = ask([Raw(body.encode()), Answer("asked again")], stream=stream)
    assert requests == 1 and exchange.completion is not None
    assert (exchange.completion.content, exchange.completion.finish_reason) == ("", "stop")


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:99999/v1",
        "http://127.0.0.1:port/v1",
        "http://[::1/v1",
        "http://me:s3cret-pw@[::1/v1",
        "http://api host/v1",
        "http://127.0.0.1:8\t000/v1",
    ],
    ids=["port-out-of-range", "port-not-a-number", "unclosed-bracket", "with-password", "space", "tab"],
)
def test_a_url_the_http_client_cannot_use_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError, match=r"R1BUILD_BASE_URL: .* is not a valid URL") as caught:
        resolve_endpoint(Generation(), {"R1BUILD_BASE_URL": url, "DEEPSEEK_API_KEY": KEY})
    assert "s3cret-pw" not in str(caught.value)


@pytest.mark.slow
def test_generate_with_a_bad_url_exits_2_without_a_traceback(
    project: Project, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project.write(budget={"rounds": 1, "samples": 1})
    monkeypatch.setenv("R1BUILD_BASE_URL", "http://127.0.0.1:99999/v1")
    monkeypatch.setenv("DEEPSEEK_API_KEY", KEY)
    code = main(["generate", "vadd", "--manifest", str(project.root), "--cache-dir", str(project.cache_dir)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "R1BUILD_BASE_URL: 'http://127.0.0.1:99999/v1' is not a valid URL (Port out of range" in err


def _raw_chunk(body: str) -> bytes:
    return b"data: " + body.encode() + b"\n\n"


def test_fields_that_are_no_text_are_left_out() -> None:
    """Python's json reads NaN and Infinity, and the client does not check types: a model, an id, a delta or a
    finish reason that is no string is left out, not joined into the answer or stored."""
    head = '"object":"chat.completion.chunk","created":1'
    events = Events(
        [
            _raw_chunk(f'{{"id":Infinity,{head},"model":NaN,"choices":[{{"index":0,"delta":{{"content":5}}}}]}}'),
            _raw_chunk(
                f'{{"id":"c",{head},"model":"m","choices":[{{"index":0,"delta":{{"reasoning_content":{{}}}}}}]}}'
            ),
            chunk("the answer"),
            _raw_chunk(f'{{"id":"c",{head},"model":"m","choices":[{{"index":0,"delta":{{}},"finish_reason":7}}]}}'),
            chunk(finish="stop"),
        ]
    )
    exchange, requests = ask([events])
    c = exchange.completion
    assert requests == 1 and c is not None
    assert (c.content, c.reasoning, c.finish_reason, c.response_id) == ("the answer", "", "stop", "c")
    assert c.model == "m"


@pytest.mark.slow
def test_numbers_json_cannot_hold_do_not_end_the_search(project: Project) -> None:
    """NaN and Infinity from the server (Python's json reads them) reach no transcript: storing one raised
    ValueError (JSON has no NaN) out of the search, a traceback that lost the round."""
    from tests.generate.gen_support import answer, kernel_source, search_vadd

    manifest = project.write(budget={"rounds": 1, "samples": 1})
    text = json.dumps(answer(kernel_source(1)))
    body = (
        '{"id":Infinity,"object":"chat.completion","created":1,"model":NaN,"choices":[{"index":0,"message":'
        f'{{"role":"assistant","content":{text}}},"finish_reason":"stop"}}],'
        '"usage":{"prompt_tokens":NaN,"completion_tokens":Infinity}}'
    )
    with ChatServer([Raw(body.encode())]) as server, project.cache() as cache:
        outcome = search_vadd(manifest, cache, server.url)
        doc = json.loads(cache.get_text(outcome.transcripts[0]) or "")
    assert [c.source for c in outcome.candidates] == [kernel_source(1)]
    assert doc["answer"]["model"] is None and doc["answer"]["response_id"] is None
    assert doc["answer"]["usage_reported"] is False


@pytest.mark.slow
@pytest.mark.parametrize("stream", [True, False])
def test_a_count_no_float_can_hold_is_no_count(
    project: Project, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stream: bool
) -> None:
    """A usage count of 400 digits (JSON holds any integer) was taken as the answer's cost, and pricing it raised
    OverflowError (an int too large to convert to a float) out of `r1build generate`: a traceback. Such a count is
    no count: the answer is kept and charged by its text's length."""
    from tests.generate.gen_support import answer, kernel_source

    project.write(budget={"rounds": 1, "samples": 1}, generation={"stream": stream, "max-concurrency": 1})
    usage = {"prompt_tokens": 10**400, "completion_tokens": 10**400, "total_tokens": 10**400}
    content = answer(kernel_source(1))
    message = {"role": "assistant", "content": content}
    body = {"id": "c", "object": "chat.completion", "created": 1, "model": "deepseek-reasoner", "usage": usage}
    body["choices"] = [{"index": 0, "message": message, "finish_reason": "stop"}]
    reply: Reply = (
        Events([chunk(content), chunk(finish="stop"), chunk(choices=False, usage=usage)])
        if stream
        else Raw(json.dumps(body).encode())
    )
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with ChatServer([reply]) as server:
        monkeypatch.setenv("R1BUILD_BASE_URL", server.url)
        monkeypatch.setenv("DEEPSEEK_API_KEY", KEY)
        code = main(["generate", "vadd", "--manifest", str(project.root), "--cache-dir", str(project.cache_dir)])
        requests = len(server.chat_requests())
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "Traceback" not in text and requests == 1
    assert code == 0 and "1 generated (1 passed the gate" in text, text
    assert "1000000000" not in text  # the count is not shown: the text's length is what was charged


def test_a_url_pasted_with_a_newline_is_used_without_it() -> None:
    endpoint = resolve_endpoint(Generation(), {"R1BUILD_BASE_URL": " http://127.0.0.1:8000/v1/\n"})
    assert endpoint.base_url == "http://127.0.0.1:8000/v1"


def test_a_key_pasted_with_a_newline_is_sent_without_it() -> None:
    """``export DEEPSEEK_API_KEY=$(cat key.txt)`` keeps the file's newline: httpx refused the header and every
    request 'failed to connect' ('is the server running?'); no key has whitespace around it."""
    with ChatServer([Answer("ok")]) as server:
        endpoint = resolve_endpoint(Generation(), {"R1BUILD_BASE_URL": server.url, "DEEPSEEK_API_KEY": f" {KEY}\n"})
        generation = Generation(retries=0)

        async def go() -> Exchange:
            async with ChatClient(endpoint, generation) as client:
                exchange = Exchange([{"role": "user", "content": "x"}], client.params(temperature=None, max_tokens=300))
                return await client.complete(exchange, deadline=time.monotonic() + 10)

        exchange = asyncio.run(go())
    assert exchange.completion is not None
    assert server.chat_requests()[0].headers["authorization"] == f"Bearer {KEY}"
    assert endpoint.secrets == (KEY,)


@pytest.mark.parametrize(
    ("key", "what"),
    [
        ("sk-abc\u201d123", "RIGHT DOUBLE QUOTATION MARK, character 7 of 10"),
        ("sk-abc\r\nX-Injected: 1", "U+000D, character 7 of 21"),
        ("sk-abc 123", "SPACE, character 7 of 10"),
    ],
    ids=["smart-quote", "header-injection", "inner-space"],
)
def test_a_key_no_header_can_carry_is_a_config_error(key: str, what: str) -> None:
    """Before, a pasted smart quote failed every request as 'the response is not valid JSON: ascii codec ...' and
    a CR LF as 'failed to connect': exit 1 blaming the server for the key."""
    with pytest.raises(ConfigError) as caught:
        resolve_endpoint(Generation(), {"DEEPSEEK_API_KEY": key})
    message = str(caught.value)
    assert message.startswith("$DEEPSEEK_API_KEY holds a character no API key has") and what in message
    assert "sk-abc" not in message and caught.value.exit_code == 2


@pytest.mark.parametrize("stream", [True, False])
def test_an_error_body_with_status_200_is_named_in_its_words(stream: bool) -> None:
    """Some gateways answer an error with status 200: it is retried like any malformed response, and it is said
    in the server's words rather than as a dump of an empty completion."""
    body = b'{"error": {"message": "Rate limit reached for requests", "code": "rate_limit_exceeded"}}'
    exchange, requests = ask([Raw(body), Answer("asked again")], stream=stream)
    assert requests == 2 and exchange.completion is not None
    failed = exchange.attempts[0]
    assert (failed.outcome, failed.label) == ("bad_response", "an error in place of an answer")
    assert failed.message == "an error in place of an answer (HTTP 200): Rate limit reached for requests"


@pytest.mark.parametrize(
    ("status", "message", "hint"),
    [
        (400, "Model Not Exist", "(model 'deepseek-reasoner': set generation.model)"),
        (404, "The model `deepseek-r2` does not exist.", "(model 'deepseek-reasoner')"),
        (
            400,
            "This model's maximum context length is 32768 tokens. However, you requested 40000 tokens.",
            f"(generation.max-tokens is {Generation().max_tokens:d}: lower it",
        ),
        (
            422,
            "max_tokens must be less than or equal to 8192",
            f"(generation.max-tokens is {Generation().max_tokens:d}: lower it",
        ),
    ],
    ids=["deepseek-unknown-model", "vllm-unknown-model", "context-length", "max-tokens-range"],
)
def test_a_refusal_of_a_setting_is_a_config_error(status: int, message: str, hint: str) -> None:
    """The model name and max-tokens are settings: a server refusing them is exit 2 saying which, not exit 1 'the
    server refused the request as malformed'."""
    exchange, requests = ask([Fault(status, message=message), Answer("never")])
    assert requests == 1 and isinstance(exchange.fatal, ConfigError)
    assert message in str(exchange.fatal) and hint in str(exchange.fatal)


def test_a_refusal_of_something_else_is_still_a_generation_error() -> None:
    from r1build.errors import GenerationError

    exchange, _ = ask([Fault(400, message="messages: roles must alternate")])
    assert type(exchange.fatal) is GenerationError


@pytest.mark.parametrize(
    "event",
    [b"data: \n\n", b"event: ping\ndata: ping\n\n", b"id: 7\nretry: 100\n\n", b"data: keep-alive\n\n"],
    ids=["empty-data", "ping-text", "id-and-retry-only", "text-keepalive"],
)
def test_events_that_carry_no_chunk_are_passed_over(event: bytes) -> None:
    """A proxy's keep-alive events (no data, or text for data) are no part of the answer: openai reads every event's
    data as JSON, and one of them failed the whole answer, asked (and paid) for again."""
    events = Events([chunk("the "), event, chunk("answer"), event, chunk(finish="stop")])
    exchange, requests = ask([events, Answer("asked again")])
    assert requests == 1 and exchange.completion is not None
    assert (exchange.completion.content, exchange.completion.finish_reason) == ("the answer", "stop")


def test_json_cut_short_in_an_event_still_fails_the_attempt() -> None:
    events = Events([chunk("the "), b'data: {"id": "c", "choices": [{"delta": {"cont\n\n', chunk(finish="stop")])
    exchange, requests = ask([events, Answer("asked again")])
    assert requests == 2 and [a.outcome for a in exchange.attempts] == ["bad_response", "ok"]


PLAIN = (
    b'{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":'
    b'"assistant","content":"the answer"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":9}}'
)


def test_a_whole_json_answer_cut_mid_body_is_a_fault_not_a_traceback() -> None:
    """A server that ignores ``stream`` and drops the connection inside its JSON body: httpx's own error escaped
    (the client wraps only what it reads itself) and ended the run with a traceback."""
    cut = Events([PLAIN[:60]], done=False, drop=True, content_type="application/json")
    exchange, requests = ask([cut, Answer("asked again")])
    assert requests == 2 and [a.outcome for a in exchange.attempts] == ["stream_cut", "ok"]
    assert "connection failed while reading the body" in exchange.attempts[0].message


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize(
    ("body", "content_type", "said"),
    [
        (
            b"upstream connect error or disconnect/reset before headers",
            "text/plain",
            "HTTP 502: upstream connect error or disconnect/reset before headers",
        ),
        (
            b"<html><head><title>502 Bad Gateway</title><style>body{color:red}</style></head>\n<body><h1>502 Bad "
            b"Gateway</h1><hr><center>nginx</center></body></html>",
            "text/html",
            "HTTP 502: 502 Bad Gateway 502 Bad Gateway nginx",
        ),
    ],
    ids=["text", "html"],
)
def test_an_error_status_with_a_body_that_is_not_json_says_its_words(
    body: bytes, content_type: str, said: str, stream: bool
) -> None:
    """A proxy's 502 in text or HTML (Envoy, nginx) was reported as 'HTTP 502: Error code: 502', its words lost."""
    exchange, requests = ask([Raw(body, status=502, content_type=content_type), Answer("asked again")], stream=stream)
    assert requests == 2 and [a.outcome for a in exchange.attempts] == ["server_error", "ok"]
    assert exchange.attempts[0].message == said


@pytest.mark.parametrize(
    ("reply", "stream", "said"),
    [
        (Events([], done=False, drop=True), True, "every stream was cut (2 requests)"),
        (Answer("role chunk only", drop_after=1), True, "every stream was cut (2 requests)"),
        (Hangup(), True, "2 requests, all a closed connection"),
        (Events([b'{"choi'], done=False, drop=True, content_type="application/json"), False, "a closed connection"),
    ],
    ids=["headers-then-cut", "role-chunk-then-cut", "hang-up", "plain-body-cut"],
)
def test_a_server_reached_that_closes_is_not_a_server_never_reached(
    project: Project, reply: Reply, stream: bool, said: str
) -> None:
    """A server that answered (its status and headers came, or it read the request) and then closed the
    connection was reported as one no request reached: 'every attempt failed to connect (is the server running,
    is the URL right?)', sending the user after their URL for a server or proxy that broke mid-answer."""
    from r1build.errors import GenerationError
    from tests.generate.gen_support import search_vadd

    manifest = project.write(budget={"rounds": 1, "samples": 1}, generation={"retries": 1, "stream": stream})
    with ChatServer([reply]) as server, project.cache() as cache, pytest.raises(GenerationError) as caught:
        search_vadd(manifest, cache, server.url)
    message = str(caught.value)
    assert len(server.chat_requests()) == 2
    assert "no request reached" not in message and "failed to connect" not in message, message
    assert f"no answer from {server.url}: " in message and said in message, message


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (PLAIN, "text/plain"),
        (PLAIN, ""),
        (b"data: " + json.dumps(chunk("the answer", finish="stop")).encode() + b"\n\ndata: [DONE]\n\n", "text/plain"),
    ],
    ids=["json-as-text", "json-untyped", "events-as-text"],
)
def test_an_answer_under_another_content_type_is_read(body: bytes, content_type: str) -> None:
    """A streamed request answered under a type that is neither events nor JSON: JSON is the whole answer (it was
    'an empty stream', retried and not even counted), events are still read as events."""
    exchange, requests = ask([Raw(body, content_type=content_type), Answer("asked again")])
    c = exchange.completion
    assert requests == 1 and c is not None and (c.content, c.finish_reason) == ("the answer", "stop")


@pytest.mark.parametrize(
    ("reply", "stream"),
    [
        (Events([b'data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[5]}\n\n']), True),
        (
            Events([b'data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"delta":"hi"}]}\n\n']),
            True,
        ),
        (Raw(b'{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[5]}'), False),
    ],
    ids=["stream-choice-a-number", "stream-delta-a-string", "plain-choice-a-number"],
)
def test_json_of_another_shape_is_a_malformed_response_not_a_traceback(reply: Reply, stream: bool) -> None:
    """The client builds its objects from the JSON without checking it: a choice that is a number raised
    AttributeError out of the run."""
    exchange, requests = ask([reply, Answer("asked again")], stream=stream)
    assert requests == 2 and [a.outcome for a in exchange.attempts] == ["bad_response", "ok"]
    assert exchange.attempts[0].message.startswith("the response does not fit the protocol (AttributeError")


def test_surrogates_json_escapes_leave_become_text_utf8_can_hold() -> None:
    """JSON's ``\\ud83d`` escapes can give Python strings no UTF-8 can hold: a pair split across two stream events is
    joined again, a lone one becomes U+FFFD (storing the transcript raised UnicodeEncodeError before)."""
    events = Events(
        [
            chunk("a \ud83d", reasoning="think \udc00"),
            chunk("\ude00 b "),
            chunk("c \udc00 d"),
            chunk(finish="stop"),
        ]
    )
    exchange, _ = ask([events])
    c = exchange.completion
    assert c is not None
    assert (c.content, c.reasoning) == ("a \U0001f600 b c \ufffd d", "think \ufffd")
    body = json.dumps(
        {
            "id": "r\udc01",
            "object": "chat.completion",
            "created": 1,
            "model": "deepseek-reasoner",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "x \ud83d y"}, "finish_reason": "stop"}
            ],
        }
    )
    exchange, _ = ask([Raw(body.encode())], stream=False)
    c = exchange.completion
    assert c is not None and (c.content, c.response_id) == ("x \ufffd y", "r\ufffd")


@pytest.mark.slow
def test_a_lone_surrogate_does_not_end_the_search(project: Project, caplog: pytest.LogCaptureFixture) -> None:
    """An error text and an answer with a lone surrogate are stored and the answer's kernel kept (a traceback out of
    the search, in the transcript's canonical JSON, before)."""
    from tests.generate.gen_support import answer, kernel_source, search_vadd

    caplog.set_level(logging.DEBUG)
    manifest = project.write(budget={"rounds": 1, "samples": 1})
    text = answer(kernel_source(1)) + "\n(done \ud83d)"
    error = Raw(json.dumps({"error": {"message": "overloaded \udc00"}}).encode(), status=503)
    with ChatServer([error, Answer(text)]) as server, project.cache() as cache:
        outcome = search_vadd(manifest, cache, server.url)
        stored = cache.get_text(outcome.transcripts[0]) or ""
    assert [c.source for c in outcome.candidates] == [kernel_source(1)]
    doc = json.loads(stored)
    assert doc["answer"]["content"].endswith("(done \ufffd)")
    assert "overloaded \ufffd" in stored  # the failed attempt's words, stored with it
    logged = [r.getMessage() for r in caplog.records]
    assert any("overloaded \ufffd" in m for m in logged)  # and logged: a log file or pytest-xdist must hold it
    for message in logged:
        message.encode("utf-8")


def test_a_byte_that_is_no_utf8_costs_its_character_not_the_answer() -> None:
    """A streamed request answered with a plain JSON body holding one byte that is no UTF-8 in its text: the answer,
    that byte replaced; asking again paid twice and could meet the same byte (found by a fuzzing pass)."""
    body = (
        b'{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,'
        b'"message":{"role":"assistant","content":"caf\xe9 ```cuda\\nx\\n```"},"finish_reason":"stop"}]}'
    )
    exchange, requests = ask([Raw(body), Answer("asked again")], stream=True)
    assert requests == 1 and exchange.completion is not None
    assert exchange.completion.content == "caf\ufffd ```cuda\nx\n```"


@pytest.mark.parametrize("stream", [True, False])
def test_content_sent_as_a_list_of_text_parts_is_read(stream: bool) -> None:
    """Some OpenAI-compatible servers send ``content`` as parts (``[{"type": "text", "text": ...}]``): their text is
    the answer (it was read as empty; found by a fuzzing pass)."""
    parts = [
        {"type": "text", "text": "the answer "},
        {"type": "image_url", "image_url": {}},
        {"type": "text", "text": "ok"},
    ]
    if stream:
        first = chunk()
        first["choices"][0]["delta"]["content"] = parts
        reply: Reply = Events([first, chunk(finish="stop")])
    else:
        message = {"role": "assistant", "content": parts}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        reply = Raw(
            json.dumps(
                {"id": "c", "object": "chat.completion", "created": 1, "model": "m", "choices": [choice]}
            ).encode()
        )
    exchange, requests = ask([reply, Answer("asked again")], stream=stream)
    assert requests == 1 and exchange.completion is not None
    assert exchange.completion.content == "the answer ok"


BOM = b"\xef\xbb\xbf"


@pytest.mark.parametrize(
    "reply",
    [
        Events([BOM + b"data: " + json.dumps(chunk("the answer")).encode() + b"\n\n", chunk(finish="stop")]),
        Raw(BOM + PLAIN),
        Raw(BOM + PLAIN, content_type="text/plain"),
    ],
    ids=["events", "json-body", "json-body-as-text"],
)
def test_a_byte_order_mark_before_the_body_is_no_part_of_it(reply: Reply) -> None:
    """A UTF-8 byte order mark before a streamed answer (servers on some platforms write one): the event stream
    standard says to ignore it. It glued itself to the first event's field name, which dropped that event (its
    content lost without a word), and it made a JSON body to a streamed request a bad response, asked (and paid) for
    again, though the same body to a plain request was read."""
    exchange, requests = ask([reply, Answer("asked again")])
    assert requests == 1 and exchange.completion is not None
    assert exchange.completion.content == "the answer"


@pytest.mark.parametrize(("status", "method"), [(301, "GET"), (308, "POST")])
def test_a_refusal_after_a_redirect_names_the_redirect(status: int, method: str) -> None:
    """A base URL the server redirects (``http://`` to ``https://``, a moved path): the HTTP client follows, a 301
    turning the POST into a GET, and the refusal where it landed (405, 404) was said as the configured URL's own,
    with no word of the redirect the user must fix the URL for."""
    moved = Raw(b"", status=status, content_type="text/plain", headers={"location": "/v2/chat/completions"})
    exchange, requests = ask([moved, Fault(405, "Method Not Allowed"), Answer("asked again")])
    assert requests == 2 and exchange.fatal is not None
    message = str(exchange.fatal)
    assert f"HTTP 405: the server refused the request: Method Not Allowed (redirected by HTTP {status}" in message
    assert f"/v2/chat/completions, sent there as {method}" in message


def _completion_body(content: str) -> bytes:
    return json.dumps(
        {
            "id": "r1",
            "object": "chat.completion",
            "created": 1,
            "model": "deepseek-reasoner",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        }
    ).encode()


def test_a_plain_body_past_the_bound_fails_its_attempts_declared_or_inflated(monkeypatch: pytest.MonkeyPatch) -> None:
    """The client read a plain body whole: a server that sends without end (or a small gzip body that inflates to
    gigabytes) filled memory until the deadline. Past the bound (here lowered), each attempt is a bad response,
    whether the body declares its length or a gzip body passes it only once inflated; one within it, gzip or not,
    is read as before, and the requests ask only for the encodings inflated within the bound."""
    from r1build.generate import bodies

    monkeypatch.setattr(bodies, "BODY_BYTES", 100_000)
    big = _completion_body("x" * 300_000)
    assert len(gzip.compress(big)) < 100_000  # declared small, inflated past the bound
    for script in ([Raw(big)] * 3, [Raw(big, gzip=True)] * 3):
        exchange, requests = ask(list(script), stream=False)
        assert exchange.completion is None and requests == 3
        assert all(a.outcome == "bad_response" for a in exchange.attempts)
        assert "100000 bytes" in exchange.attempts[0].message, exchange.attempts[0].message
    with ChatServer([Raw(_completion_body("the answer"), gzip=True)]) as server:
        endpoint = resolve_endpoint(
            Generation(retries=0, stream=False), {"R1BUILD_BASE_URL": server.url, "DEEPSEEK_API_KEY": KEY}
        )

        async def go() -> Exchange:
            async with ChatClient(endpoint, Generation(retries=0, stream=False)) as client:
                exchange = Exchange([{"role": "user", "content": "x"}], client.params(temperature=None, max_tokens=10))
                return await client.complete(exchange, deadline=time.monotonic() + 20, meter=Meter())

        exchange = asyncio.run(go())
        headers = {k.lower(): v for k, v in server.chat_requests()[0].headers.items()}
    assert exchange.completion is not None and exchange.completion.content == "the answer"
    assert headers.get("accept-encoding") == "gzip, deflate"


def test_a_stream_event_without_its_blank_line_and_a_json_answer_to_a_stream_are_held_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One event of a stream was read line by line until its blank line (a server that never sends one filled
    memory); a JSON body in answer to a stream request was read whole. Both are held: a bad response past them.
    (The whole body of a stream is held to the same bound as a plain one.)"""
    from r1build.generate import bodies

    monkeypatch.setattr(bodies, "EVENT_BYTES", 50_000)
    monkeypatch.setattr(bodies, "BODY_BYTES", 100_000)
    endless = Events([b"data: " + b"x" * 200_000], done=False)
    exchange, _ = ask([endless] * 3)
    assert exchange.completion is None and all(a.outcome == "bad_response" for a in exchange.attempts)
    assert "one event of the stream passed 50000 bytes" in exchange.attempts[0].message
    for plain in (Raw(_completion_body("y" * 300_000)), Raw(_completion_body("y" * 300_000), gzip=True)):
        exchange, _ = ask([plain] * 3)  # declared past the bound; passing it once inflated
        assert exchange.completion is None and all(a.outcome == "bad_response" for a in exchange.attempts)
        assert "100000 bytes" in exchange.attempts[0].message, exchange.attempts[0].message
    exchange, _ = ask([Raw(_completion_body("fits"))])  # a JSON answer to a stream within the bound: as before
    assert exchange.completion is not None and exchange.completion.content == "fits"
