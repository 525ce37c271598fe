"""The continuous search against a server that answers like R1 (a long reasoning part, then the code; answers of
different lengths, scaled down to tenths of seconds): answers judged as they arrive, slots refilled at once, stops
acting at once. Everything is asserted on timestamps (the server's arrival and finish times, the events' times
taken by the sink on the same clock), never on sleeps."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from r1build.events import Event, Note, Progress, Stage, emit, sink
from r1build.gate.static import StaticGate
from r1build.generate import SearchJob, SearchOutcome, replay, search
from r1build.judge import Evaluator, Job
from r1build.manifest import Manifest
from r1build.records import Result
from tests.generate.chat_server import Answer, ChatServer, Reply, Request
from tests.generate.gen_support import MarkerJudge, Project, answer, env_for, kernel_source

Timed = list[tuple[float, Event]]


def numbered(replies: Callable[[int], Reply]) -> Callable[[Request], Reply]:
    """A script answering the n-th request to arrive (from 0) with ``replies(n)``."""
    counter, lock = itertools.count(), threading.Lock()

    def script(request: Request) -> Reply:
        with lock:
            n = next(counter)
        return replies(n)

    return script


def fast(source: str) -> Answer:
    return Answer(answer(source), reasoning="short " * 20, chunk_chars=40)


def slow(source: str, seconds: float) -> Answer:
    """R1's shape: reasoning for ``seconds``, then the code."""
    return Answer(answer(source), reasoning="think " * 400, chunk_chars=100, reasoning_s=seconds)


def run(project: Project, manifest: Manifest, server: ChatServer, evaluator: Evaluator, events: Timed) -> SearchOutcome:
    def record(event: Event) -> None:
        events.append((time.monotonic(), event))

    with project.cache() as cache, sink(record):
        return search(
            SearchJob(manifest, manifest.kernel("vadd"), "sm_90", evaluator=evaluator, cache=cache, seeds=[]),
            environ=env_for(server.url),
        )


def first_passed(events: Timed) -> float:
    """When the first event said a generated candidate passed."""
    return next(t for t, e in events if isinstance(e, Progress) and int(e.fields.get("passed", 0)) > 0)


def continuous(project: Project, *, generation: dict[str, Any] | None = None, **budget: Any) -> Manifest:
    return project.write(generation={"search": "continuous", **(generation or {})}, budget=budget)


@pytest.mark.slow
def test_a_free_slot_is_refilled_the_moment_an_answer_is_in(project: Project, judge: MarkerJudge) -> None:
    # 8 slots, 16 samples: answer 1 is fast (and does not compile), answers 2..8 think for a second
    manifest = continuous(
        project, generation={"max-concurrency": 8}, rounds=2, samples=8, candidates=16, **{"wall-time-s": 60}
    )
    script = numbered(
        lambda n: slow(kernel_source(n), 1.0) if 1 <= n <= 7 else fast(kernel_source(n, extra=f"#error typo{n}\n"))
    )
    events: Timed = []
    with ChatServer(script) as server:
        outcome = run(project, manifest, server, judge, events)
    requests = server.chat_requests()
    finished = {id(r): t for t, r in server.finished}
    # request 9 arrived before answer 2 was complete: its slot did not wait for the round
    assert requests[8].received < finished[id(requests[1])]
    # the first answer was judged (its compile error known) before the slow ones were in
    judged = next(
        t for t, e in events if isinstance(e, Progress) and e.fields.get("candidates", 0) and not e.fields["waiting"]
    )
    assert judged < min(finished[id(r)] for r in requests[1:8])
    # a later slot repairs it: its feedback holds the compiler's error
    assert any("error: typo" in r.prompt for r in requests[9:])
    assert len(requests) == 16 and outcome.stop_reason == "passed_gate"
    assert {(c.origin.round, c.origin.sample) for c in outcome.candidates} >= {(0, 0), (1, 0), (0, 1)}


@pytest.mark.slow
def test_the_first_gated_candidate_precedes_the_last_answer(project: Project) -> None:
    # the real static gate (nvcc): answer 1 is fast and valid, answers 2..4 think for seconds (answer 1 passes the
    # gate about 1 s after the start; 3.4 s on a CI machine loaded with the whole suite, so they think for 6)
    manifest = continuous(project, generation={"request-timeout-s": 60}, rounds=1, samples=4, candidates=4)
    script = numbered(lambda n: fast(kernel_source(n)) if n == 0 else slow(kernel_source(n), 6.0))
    events: Timed = []
    with ChatServer(script) as server, project.cache() as cache:
        outcome = run(project, manifest, server, StaticGate(cache, jobs=1), events)
    last = max(t for t, _ in server.finished)
    assert first_passed(events) < last
    # the stop (a pass, nothing to time) let the answers in flight finish: they are kept and judged
    assert outcome.stop_reason == "passed_gate" and outcome.usage.answers == 4
    assert sum(r.ok for r in outcome.results) == 4


def test_a_stop_met_by_an_early_answer_sends_fewer_requests_than_the_budget(
    project: Project, judge: MarkerJudge
) -> None:
    manifest = continuous(project, generation={"max-concurrency": 2}, rounds=1, samples=8, candidates=8)
    script = numbered(lambda n: fast(kernel_source(n)) if n == 0 else slow(kernel_source(n), 0.3))
    events: Timed = []
    with ChatServer(script) as server:
        outcome = run(project, manifest, server, judge, events)
    # answer 1 passed: slots that had not sent yet were cancelled; the one in flight finished and is kept
    assert len(server.chat_requests()) < 8
    assert outcome.stop_reason == "passed_gate"
    assert outcome.usage.requests == len(server.chat_requests()) == outcome.usage.answers
    assert len(outcome.transcripts) == len(server.chat_requests())


def test_where_the_profile_frees_a_closed_request_a_stop_cancels_those_in_flight(
    project: Project, judge: MarkerJudge
) -> None:
    manifest = continuous(
        project,
        generation={"provider": "vllm", "max-concurrency": 4},
        rounds=1,
        samples=4,
        candidates=4,
    )
    script = numbered(lambda n: fast(kernel_source(n)) if n == 0 else slow(kernel_source(n), 5.0))
    events: Timed = []
    started = time.monotonic()
    with ChatServer(script) as server:
        outcome = run(project, manifest, server, judge, events)
        took = time.monotonic() - started
    assert outcome.stop_reason == "passed_gate" and took < 4.0
    assert outcome.usage.answers == 1 and outcome.usage.failures.get("cancelled") == 3
    said = [e.message for _, e in events if isinstance(e, Note)]
    assert any("cancelled 3 request(s) in flight that can no longer matter" in m for m in said)


@pytest.mark.slow
def test_code_closed_in_the_stream_is_gated_before_the_answer_ends(project: Project, judge: MarkerJudge) -> None:
    # the code comes first in the content, then a long explanation streams for a second
    prose = "It launches on the given stream. " * 60
    reply = Answer(answer(kernel_source(1)) + prose, reasoning="think " * 50, chunk_chars=40, content_s=1.0)
    manifest = continuous(project, generation={"max-concurrency": 1}, rounds=1, samples=1, candidates=1)
    events: Timed = []
    with ChatServer([reply]) as server:
        outcome = run(project, manifest, server, judge, events)
    ((finished, _),) = server.finished
    assert first_passed(events) < finished - 0.3
    assert outcome.stop_reason == "passed_gate"
    ((candidate, result),) = outcome.generated()
    assert result.ok and candidate.origin.transcript == outcome.transcripts[0]


def test_progress_shows_requests_in_flight_and_the_judges_queue(project: Project) -> None:
    manifest = continuous(project, generation={"max-concurrency": 3}, rounds=1, samples=3, candidates=3)
    script = numbered(lambda n: slow(kernel_source(n), 0.2 * n))
    events: Timed = []
    with ChatServer(script) as server:
        run(project, manifest, server, MarkerJudge(delay_s=0.05), events)
    fields = [e.fields for _, e in events if isinstance(e, Progress)]
    assert max(int(f["in_flight"]) for f in fields) >= 2
    assert max(int(f["judging"]) for f in fields) >= 1
    assert all({"waiting", "judge_busy"} <= set(f) for f in fields)
    busy = str(fields[-1]["judge_busy"])
    assert float(busy.split("s", maxsplit=1)[0]) >= 0.05


class GateThenGpu(MarkerJudge):
    """A judge that measures: its gate (0.1 s) says how many passed with the gate's finished stage, as a GPU
    evaluator's gate does, then its GPU works (0.4 s)."""

    def evaluate(self, job: Job) -> list[Result]:
        time.sleep(0.1)
        results = super().evaluate(job)
        emit(Stage("gate", job.spec.name, job.arch, done=True, passed=sum(r.ok for r in results)))
        time.sleep(0.4)
        return results


def test_progress_splits_waiting_for_the_gate_from_waiting_for_the_gpu(project: Project) -> None:
    manifest = continuous(project, generation={"max-concurrency": 1}, rounds=1, samples=1, candidates=1)
    events: Timed = []
    with ChatServer([fast(kernel_source(1))]) as server:
        run(project, manifest, server, GateThenGpu(), events)
    fields = [e.fields for _, e in events if isinstance(e, Progress)]
    at_gate = next(i for i, f in enumerate(fields) if f["at_gate"] == 1 and f["judging"] == 1)
    for_gpu = next(i for i, f in enumerate(fields) if f["for_gpu"] == 1)
    assert at_gate < for_gpu and fields[for_gpu]["at_gate"] == 0 and fields[for_gpu]["judging"] == 1
    assert fields[-1]["for_gpu"] == fields[-1]["at_gate"] == 0
    assert 0.35 <= float(str(fields[-1]["gpu_busy"]).rstrip("s")) < float(str(fields[-1]["judge_busy"]).split("s")[0])


def test_replay_reproduces_a_continuous_search_that_gated_code_of_a_cut_answer(
    project: Project, judge: MarkerJudge
) -> None:
    manifest = continuous(project, generation={"max-concurrency": 2}, rounds=2, samples=3, patience=2)
    replies = [
        Answer(answer(kernel_source(1, time_us=40)), chunk_chars=40),
        Answer(answer(kernel_source(2, time_us=30)) + "\n" + "more " * 50, finish_reason="length", chunk_chars=40),
        Answer("no code"),
        Answer(answer(kernel_source(3, time_us=20))),
    ]
    counter = iter(range(100))
    events: Timed = []
    with ChatServer(lambda r: replies[min(next(counter), 3)]) as server:
        outcome = run(project, manifest, server, judge, events)
    with project.cache() as cache:
        again = replay(
            SearchJob(manifest, manifest.kernel("vadd"), "sm_90", evaluator=MarkerJudge(), cache=cache, seeds=[]),
            outcome.transcripts,
        )
    assert any("time_us: 30" in c.source for c in outcome.candidates)  # the cut answer's complete code
    assert [c.digest for c in again.candidates] == [c.digest for c in outcome.candidates]
    assert [c.origin for c in again.candidates] == [c.origin for c in outcome.candidates]
