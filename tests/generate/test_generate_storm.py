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

from r1build.generate import search
from tests.generate.chat_server import Answer, ChatServer, Fault, Raw, Reply, Request, Stall
from tests.generate.gen_support import MarkerJudge, Project, answer, env_for, kernel_source

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
        outcome = search(
            manifest,
            manifest.kernel("vadd"),
            "sm_90",
            evaluator=MarkerJudge(),
            cache=cache,
            seeds=[],
            environ=env_for(server.url),
        )
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
