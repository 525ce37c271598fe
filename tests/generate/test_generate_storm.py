"""A search through a storm of every fault at once, against the real local server: 503s, 429s with retry-after,
dropped and stalled streams, pages that are not JSON, among answers. What must hold whatever the mix: no more
requests in flight than ``max-concurrency`` (stalled ones included, until the client gives up on them), retries
bounded per sample, every request the server saw accounted for, and the tokens of the outcome the sum of what
each attempt of each transcript cost."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from r1build.cli.main import main
from tests.generate.chat_server import Answer, ChatServer, Fault, Raw, Reply, Request, Stall
from tests.generate.gen_support import KEY, Project, answer, kernel_source, search_vadd

pytestmark = pytest.mark.slow  # a few seconds of timeouts

STORM: list[Any] = [
    Fault(503),
    Fault(429, headers={"retry-after": "0.1"}),
    Answer("cut " * 100, chunk_chars=10, drop_after=3),
    Stall(),
    Raw(b"<html>maintenance</html>", content_type="text/html"),
    Stall(after_headers=True),
    None,  # an answer
    None,
]


def test_invariants_hold_through_a_storm_of_faults(project: Project, stopwatch: Any) -> None:
    retries = 2
    manifest = project.write(
        budget={"rounds": 2, "samples": 6, "candidates": 12, "patience": 9, "wall-time-s": 30},
        generation={
            "retries": retries,
            "retry-backoff-s": 0.02,
            "max-concurrency": 3,
            "max-consecutive-failures": 100,
            "request-timeout-s": 0.8,
        },
    )
    lock = threading.Lock()
    seen = [0]

    def script(request: Request) -> Reply:
        with lock:
            n = seen[0]
            seen[0] += 1
        fault = STORM[n % len(STORM)]
        return fault or Answer(answer(kernel_source(n, time_us=100 - n)), completion_tokens=300 + n, chunk_chars=64)

    with ChatServer(script) as server, project.cache() as cache:
        outcome = search_vadd(manifest, cache, server.url)
        docs = [json.loads(cache.get_text(d) or "") for d in outcome.transcripts]
    u = outcome.usage
    sent = len(server.chat_requests())
    assert server.max_in_flight <= 3, server.max_in_flight
    assert sent == u.requests == sum(len(d["attempts"]) for d in docs)
    assert all(len(d["attempts"]) <= retries + 1 for d in docs)
    assert u.samples == len(docs) <= 12
    assert u.completion_tokens == sum(a["completion_tokens"] for d in docs for a in d["attempts"])
    assert u.prompt_tokens == sum(a["prompt_tokens"] for d in docs for a in d["attempts"])
    assert u.answers == sum(1 for d in docs if d["answer"]) > 0
    assert stopwatch() < 30


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (
            Fault(429, message="You exceeded your current quota, check your plan"),
            "all HTTP 429 Too Many Requests (stopped after 3 failed requests in a row); last error: HTTP 429: You "
            "exceeded your current quota, check your plan",
        ),
        (
            Fault(429, headers={"retry-after": "1000000000"}),
            "asked to wait 1,000,000,000 s (retry-after), longer than",
        ),
        # no wait a transcript can store: the backoff decides, and the search ends with a clear error
        (Fault(503, headers={"retry-after": "inf"}), "all HTTP 503 Service Unavailable (stopped after 3"),
        (Fault(503, headers={"retry-after-ms": "1e400"}), "all HTTP 503 Service Unavailable (stopped after 3"),
    ],
    ids=["quota", "huge-retry-after", "infinite-retry-after", "overflowing-retry-after-ms"],
)
def test_the_error_of_a_search_with_no_answer_says_what_the_server_said(
    project: Project,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    reply: Reply,
    expected: str,
) -> None:
    project.write(
        budget={"rounds": 2, "samples": 2},
        generation={"retries": 1, "retry-backoff-s": 0.01, "max-consecutive-failures": 3, "max-concurrency": 1},
    )
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("COLUMNS", "300")
    with ChatServer([reply]) as server:
        monkeypatch.setenv("R1BUILD_BASE_URL", server.url)
        monkeypatch.setenv("DEEPSEEK_API_KEY", KEY)
        code = main(["generate", "vadd", "--manifest", str(project.root), "--cache-dir", str(project.cache_dir)])
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert code == 1 and "Traceback" not in err
    assert last.startswith(f"error: vadd/sm_90: no answer from {server.url}: ") and expected in last, last


@pytest.mark.parametrize(
    ("served", "warned"),
    [("deepseek-chat", True), ("deepseek-reasoner", False), ("deepseek-reasoner-0528", False)],
    ids=["another-model", "the-model", "a-version-of-it"],
)
def test_a_server_that_answers_as_another_model_is_named_once(project: Project, served: str, warned: bool) -> None:
    from r1build.events import Event, Note, sink

    manifest = project.write(budget={"rounds": 1, "samples": 3}, generation={"max-concurrency": 1})
    replies: list[Reply] = [Answer(answer(kernel_source(n))) for n in range(3)]
    events: list[Event] = []
    with ChatServer(replies, model=served) as server, project.cache() as cache, sink(events.append):
        outcome = search_vadd(manifest, cache, server.url)
        docs = [json.loads(cache.get_text(d) or "") for d in outcome.transcripts]
    notes = [e.message for e in events if isinstance(e, Note) and "answered as model" in e.message]
    expected = [f"{server.url} answered as model '{served}', not 'deepseek-reasoner' that was asked for"]
    assert [n.split(";")[0] for n in notes] == (expected if warned else [])
    assert {d["answer"]["model"] for d in docs} == {served} and len(outcome.candidates) == 3
