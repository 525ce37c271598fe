"""``r1build generate`` against servers that bend the chat-completions protocol, end to end through the CLI and the
real local server: a finish chunk without a delta, a last event without its blank line, events under a JSON content
type, an HTML page with status 200. None may cost a retry of an answer already received, or leave the user without
the server's words."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from r1build.cli.main import main
from tests.generate.chat_server import ChatServer, Events, Raw, Reply, chunk
from tests.generate.gen_support import KEY, Project, answer, kernel_source

pytestmark = pytest.mark.slow  # seconds a test: nvcc, resolves, processes or servers

ANSWER = answer(kernel_source(1))
ASKED_AGAIN = Raw(b"asked again", content_type="text/plain")


Generate = Callable[..., tuple[int, str, str, int]]


@pytest.fixture
def generate(project: Project, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Generate:
    """``r1build generate vadd`` (one sample, two retries) against a server playing a script: the exit code, stdout,
    stderr and how many requests the server saw."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)

    def run(script: list[Reply], *, stream: bool = True) -> tuple[int, str, str, int]:
        generation = {"retries": 2, "retry-backoff-s": 0.01, "request-timeout-s": 5, "stream": stream}
        project.write(budget={"rounds": 1, "samples": 1}, generation=generation)
        with ChatServer(script) as server:
            monkeypatch.setenv("R1BUILD_BASE_URL", server.url)
            monkeypatch.setenv("DEEPSEEK_API_KEY", KEY)
            code = main(["generate", "vadd", "--manifest", str(project.root), "--cache-dir", str(project.cache_dir)])
            requests = len(server.chat_requests())
        out, err = capsys.readouterr()
        return code, out, err, requests

    return run


def _finish_chunk(finish: str, *, delta: bool) -> dict[str, Any]:
    """A finish chunk whose delta is null, or missing."""
    event = chunk(finish=finish)
    if delta:
        event["choices"][0]["delta"] = None
    else:
        del event["choices"][0]["delta"]
    return event


@pytest.mark.parametrize(
    ("content", "finish", "delta", "fault"),
    [(ANSWER, "stop", True, "faults: none"), (ANSWER[:60], "length", False, "faults: truncated 1")],
    ids=["delta-null-stop", "delta-missing-length"],
)
def test_a_finish_chunk_without_a_delta_ends_the_answer(
    generate: Generate, content: str, finish: str, delta: bool, fault: str
) -> None:
    """A finish chunk with ``"delta": null`` (or none) was skipped whole, its finish reason with it: the answer, whole
    and paid for, was taken for a cut stream and asked for again."""
    events = Events([chunk(content), _finish_chunk(finish, delta=delta)])
    code, out, err, requests = generate([events, ASKED_AGAIN])
    assert (
        code == (0 if finish == "stop" else 1) and requests == 1 and fault in out and "stream_cut" not in out + err
    ), out + err


def test_a_last_event_without_its_blank_line_is_read(generate: Generate) -> None:
    """A server that ends its stream (no ``[DONE]``) right after its finish chunk's ``data:`` line, without the blank
    line that ends an event: the finish chunk was dropped as unfinished and the whole answer asked for again."""
    last = b"data: " + json.dumps(chunk(finish="stop")).encode() + b"\n"
    code, out, err, requests = generate([Events([chunk(ANSWER), last], done=False), ASKED_AGAIN])
    assert code == 0 and requests == 1 and "faults: none" in out, out + err


def test_events_sent_as_json_are_read_as_events(generate: Generate) -> None:
    """A proxy that labels the stream ``application/json``: the events were read as one JSON body, which failed
    every attempt ('not valid JSON')."""
    body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in (chunk(ANSWER), chunk(finish="stop")))
    reply = Raw(body + b"data: [DONE]\n\n", content_type="application/json")
    code, out, err, requests = generate([reply, ASKED_AGAIN])
    assert code == 0 and requests == 1 and "faults: none" in out, out + err


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])
def test_an_html_page_with_status_200_is_named_in_its_words(generate: Generate, stream: bool) -> None:
    """A base URL that points at a web page answers HTML with 200: a streamed request said only 'the response carried
    no stream events (not server-sent events, or an empty stream)', a plain one showed the markup."""
    page = b"<html><head><title>Open WebUI</title><style>h1{}</style></head><body><h1>Sign in</h1></body></html>"
    code, _, err, requests = generate([Raw(page, content_type="text/html")], stream=stream)
    last = err.strip().splitlines()[-1]
    assert code == 1 and requests == 3, err
    assert "no answer from http://127.0.0.1:" in last and "an HTML page" in last, last
    assert "Open WebUI Sign in" in last and "<" not in last and "Traceback" not in err, last
