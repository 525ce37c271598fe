"""Generation under faults, against the real local server: one shared pause that honours ``retry-after``, the
circuit breaker, a last line that names the real cause, budgets from reported usage with each request's
``max_tokens`` held, compiler messages in the feedback, patience over timed rounds only, every configured key
redacted, and transcripts linked however a search ends."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from r1build.cli.main import main
from r1build.errors import ConfigError, GenerationError
from r1build.events import Event, Note, sink
from r1build.generate import SearchJob, SearchOutcome, replay, search
from r1build.generate.transcripts import LINKS_NAMESPACE
from r1build.keys import decision_key
from r1build.manifest import Manifest
from tests.generate.chat_server import Answer, ChatServer, Events, Fault, Reply, Request, Stall, chunk
from tests.generate.gen_support import KEY, MarkerJudge, Project, answer, broken_source, env_for, kernel_source

pytestmark = pytest.mark.slow  # seconds a test: nvcc, resolves, processes or servers

FAST = {"retry-backoff-s": 0.01, "request-timeout-s": 5}


def run(
    project: Project,
    manifest: Manifest,
    server: ChatServer,
    judge: Any = None,
    *,
    environ: dict[str, str] | None = None,
    events: list[Event] | None = None,
) -> SearchOutcome:
    spec = manifest.kernel("vadd")
    with project.cache() as cache, sink((events if events is not None else []).append):
        return search(
            SearchJob(manifest, spec, "sm_90", evaluator=judge or MarkerJudge(), cache=cache, seeds=[]),
            environ=environ or env_for(server.url),
        )


def counting(make: Any) -> Any:
    """A script calling ``make(n, request)`` with the request's number (thread-safe)."""
    lock = threading.Lock()
    seen = [0]

    def script(request: Request) -> Reply:
        with lock:
            n = seen[0]
            seen[0] += 1
        reply: Reply = make(n, request)
        return reply

    return script


def link(project: Project, manifest: Manifest) -> dict[str, Any]:
    with project.cache() as cache:
        doc = cache.get_json(LINKS_NAMESPACE, decision_key(manifest, manifest.kernel("vadd"), "sm_90"))
    assert isinstance(doc, dict)
    return doc


# -- one pause for every sample, retry-after honoured -----------------------------------------------------------
def test_retry_after_pauses_every_sample(project: Project) -> None:
    """A 429 with ``retry-after: 0.6`` to one sample holds back the requests of the others too."""
    manifest = project.write(budget={"rounds": 1, "samples": 4}, generation={**FAST, "max-concurrency": 2})

    def make(n: int, request: Request) -> Reply:
        if n == 0:
            return Fault(429, headers={"retry-after": "0.6"})
        return Answer(answer(kernel_source(n)), delay=0.05)

    with ChatServer(counting(make)) as server:
        outcome = run(project, manifest, server)
    requests = server.chat_requests()
    first = requests[0].received
    assert len(outcome.candidates) == 4 and len(requests) == 5
    # the one in flight with the 429 aside, no request left before the pause was over
    late = [r.received - first for r in requests[2:]]
    assert min(late) >= 0.55, late


def test_retry_after_as_an_http_date(project: Project) -> None:
    manifest = project.write(budget={"rounds": 1, "samples": 1}, generation=FAST)
    with ChatServer([Fault(503, retry_after_date_s=2), Answer(answer(kernel_source(1)))]) as server:
        outcome = run(project, manifest, server)
    first, second = server.chat_requests()
    assert len(outcome.candidates) == 1
    assert second.received - first.received >= 0.9  # an HTTP date has whole seconds: between 1 and 2 s


def test_a_pause_longer_than_the_wall_time_left_stops_the_search(project: Project, stopwatch: Any) -> None:
    manifest = project.write(
        budget={"rounds": 2, "samples": 3, "wall-time-s": 20}, generation={**FAST, "max-concurrency": 1}
    )
    replies: list[Reply] = [Answer(answer(kernel_source(1))), Fault(429, headers={"retry-after": "300"})]
    with ChatServer(replies) as server:
        outcome = run(project, manifest, server)
    assert stopwatch() < 5 and len(server.chat_requests()) == 2
    assert outcome.stop_reason == "wall_time"
    assert "asked to wait 300 s" in outcome.cause and "wall-time budget" in outcome.cause
    assert len(outcome.candidates) == 1


def test_backoff_is_shared_and_does_not_restart_each_round(project: Project) -> None:
    """Without retry-after, the pause doubles with each failure in a row whichever sample or round it is in."""
    manifest = project.write(
        budget={"rounds": 4, "samples": 1, "patience": 9},
        generation={"retry-backoff-s": 0.1, "retries": 0, "max-concurrency": 1, "max-consecutive-failures": 20},
    )
    replies: list[Reply] = [
        Answer(answer(kernel_source(1, time_us=50))),
        Fault(500),
        Fault(500),
        Answer(answer(kernel_source(2, time_us=40))),
    ]
    with ChatServer(replies) as server:
        outcome = run(project, manifest, server)
    times = [r.received for r in server.chat_requests()]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert len(times) == 4 and len(outcome.candidates) == 2  # one sample a round; rounds 1 and 2 failed
    assert gaps[1] >= 0.075  # the first failure's pause held round 2 back ...
    assert gaps[2] >= 0.15  # ... and the second failure's doubled it: no restart per round


# -- the circuit breaker and the last line ----------------------------------------------------------------------
def test_circuit_breaker_names_the_cause(project: Project, stopwatch: Any) -> None:
    manifest = project.write(
        budget={"rounds": 4, "samples": 4},
        generation={**FAST, "retries": 3, "max-concurrency": 2, "max-consecutive-failures": 5},
    )
    with ChatServer([Fault(503)]) as server, pytest.raises(GenerationError) as caught:
        run(project, manifest, server)
    message = str(caught.value)
    assert message.startswith(f"vadd/sm_90: no answer from {server.url}: ")
    assert "requests, all HTTP 503 Service Unavailable" in message
    assert "stopped after 5 failed requests in a row" in message
    assert 5 <= len(server.chat_requests()) <= 6  # the breaker, and at most one more already in flight
    assert stopwatch() < 5


@pytest.mark.parametrize(
    ("reply", "settings", "cause"),
    [
        (Answer("cut " * 50, chunk_chars=20, cut_after=3), {}, "every stream was cut"),
        (Stall(), {"request-timeout-s": 0.3}, "all timed out after 0.3 s"),
    ],
    ids=["streams-cut", "timeouts"],
)
def test_the_last_line_names_the_real_cause(
    project: Project,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    reply: Reply,
    settings: dict[str, Any],
    cause: str,
) -> None:
    project.write(
        baseline=True,
        budget={"rounds": 2, "samples": 2},
        generation={**FAST, "retries": 1, "max-consecutive-failures": 4, **settings},
    )
    for name in ("OPENAI_API_KEY",):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", "200")
    with ChatServer([reply]) as server:
        monkeypatch.setenv("R1BUILD_BASE_URL", server.url)
        monkeypatch.setenv("DEEPSEEK_API_KEY", KEY)
        code = main(["generate", "vadd", "--manifest", str(project.root), "--cache-dir", str(project.cache_dir)])
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert code == 1 and cause in last and "no answer from" in last, last
    assert "passed the gate" not in last and "Traceback" not in err


def test_resolve_surfaces_the_cause(
    project: Project, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project.write(
        baseline=True,
        budget={"rounds": 2, "samples": 2},
        generation={**FAST, "retries": 1, "max-consecutive-failures": 3},
    )
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with ChatServer([Fault(503)]) as server:
        monkeypatch.setenv("R1BUILD_BASE_URL", server.url)
        monkeypatch.setenv("DEEPSEEK_API_KEY", KEY)
        code = main(["resolve", "--no-gpu", "--manifest", str(project.root), "--cache-dir", str(project.cache_dir)])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 1 and "HTTP 503 Service Unavailable" in last and "3 failed requests in a row" in last, last


def test_an_answer_resets_the_breaker(project: Project) -> None:
    """Failures interleaved with answers never trip the breaker."""
    manifest = project.write(
        budget={"rounds": 1, "samples": 6, "candidates": 6},
        generation={**FAST, "retries": 2, "max-concurrency": 1, "max-consecutive-failures": 2},
    )
    with ChatServer(counting(lambda n, r: Fault(502) if n % 2 == 0 else Answer(answer(kernel_source(n))))) as server:
        outcome = run(project, manifest, server)
    assert outcome.stop_reason == "passed_gate" and len(outcome.candidates) == 6
    assert outcome.usage.failures["server_error"] == 6


# -- tokens and money -------------------------------------------------------------------------------------------
def large(n: int, request: Request, *, tokens: int = 3000, usage: bool = True) -> Answer:
    """A large answer (about ``tokens`` tokens of reasoning) cut at max_tokens like a real server."""
    return Answer(
        answer(kernel_source(n, time_us=50.0)),
        reasoning="step " * tokens,
        completion_tokens=tokens + 150 if usage else None,
        usage=usage,
        honour_max_tokens=True,
        chunk_chars=2000,
    )


def test_token_budget_holds_and_answers_in_flight_are_kept(project: Project) -> None:
    manifest = project.write(
        budget={"tokens": 10000, "rounds": 3, "samples": 4, "candidates": 12, "patience": 9},
        generation={**FAST, "max-concurrency": 4, "max-tokens": 4096},
    )
    with ChatServer(counting(lambda n, r: large(n, r, tokens=2000))) as server:
        outcome = run(project, manifest, server)
    u = outcome.usage
    sent = [int((r.body or {})["max_tokens"]) for r in server.chat_requests()]
    assert outcome.stop_reason == "tokens" and "of 10,000 completion tokens" in outcome.cause
    assert u.completion_tokens <= 10000 and sum(sent) > 10000  # what was held came back when unused
    assert "cancelled" not in u.failures and u.answers == len(sent)
    with project.cache() as cache:
        docs = [json.loads(cache.get_text(d) or "") for d in outcome.transcripts]
    assert [d["answer"]["completion_tokens"] for d in docs if d["answer"]] and all(d["answer"] for d in docs)
    # every complete answer is a candidate: paid for, kept
    complete = sum(1 for d in docs if d["answer"]["finish_reason"] == "stop")
    assert complete >= 3 and len(outcome.candidates) == complete
    # once answers showed their size, no request was sent too small to hold one
    assert all(m >= 2150 for m in sent[3:])


def test_tokens_without_reported_usage_count_text_not_chunks(project: Project) -> None:
    manifest = project.write(budget={"rounds": 1, "samples": 2}, generation=FAST)
    reply = Answer(answer(kernel_source(1)), reasoning="x" * 8000, usage=False, chunk_chars=10)
    with ChatServer(
        counting(lambda n, r: Answer(answer(kernel_source(n)), reasoning="x" * 8000, usage=False, chunk_chars=10))
    ) as server:
        outcome = run(project, manifest, server)
    text = len(reply.content) + len(reply.reasoning)
    assert outcome.usage.estimated
    assert abs(outcome.usage.completion_tokens - 2 * (text // 4)) <= 2  # ~2,100, not ~1,600 chunks


def test_money_budget_is_never_exceeded_by_more_than_one_request(project: Project) -> None:
    prices = {"input-per-mtok": 1.0, "output-per-mtok": 2.0}
    manifest = project.write(
        budget={"money-usd": 0.02, "rounds": 4, "samples": 4, "candidates": 16, "patience": 9},
        generation={**FAST, "max-concurrency": 4, "max-tokens": 4096, "prices": prices},
    )
    with ChatServer(counting(lambda n, r: large(n, r, tokens=5000))) as server:
        outcome = run(project, manifest, server)
    u = outcome.usage
    assert outcome.stop_reason == "money" and "$0.02" in outcome.cause
    one_request = (4096 * 2.0 + 3000 * 1.0) / 1e6
    assert u.cost_usd <= 0.02 + one_request
    assert "cancelled" not in u.failures and u.answers == len(server.chat_requests())


# -- feedback and patience --------------------------------------------------------------------------------------
def test_compiler_messages_reach_the_feedback_without_local_noise(project: Project) -> None:
    """Two answers that do not compile (real nvcc); the next round's prompts quote both compiler messages, and
    neither the command line, the return code nor a local absolute path."""
    from r1build.gate.static import StaticGate

    manifest = project.write(budget={"rounds": 2, "samples": 2, "patience": 2}, generation=FAST)

    def make(n: int, request: Request) -> Reply:
        return Answer(answer(broken_source(f"typo_{n}")))

    with ChatServer(counting(make)) as server, project.cache() as cache:
        search(
            SearchJob(manifest, manifest.kernel("vadd"), "sm_90", evaluator=StaticGate(cache), cache=cache, seeds=[]),
            environ=env_for(server.url),
        )
    later = "\n".join(json.dumps(r.messages) for r in server.chat_requests()[2:])
    assert 'identifier \\"typo_0\\" is undefined' in later and 'identifier \\"typo_1\\" is undefined' in later
    for noise in ("command:", "return code", "bin/nvcc", "-o vadd.o", "/tmp/", "/usr/", str(Path.cwd())):
        assert noise not in later, noise


def test_patience_counts_only_rounds_that_could_be_timed(project: Project) -> None:
    """Without a GPU nothing is timed: rounds of failures do not use up patience."""
    manifest = project.write(budget={"rounds": 3, "samples": 1, "patience": 1}, generation=FAST)
    with ChatServer(counting(lambda n, r: Answer(answer(kernel_source(n, extra=f"#error nope {n}\n"))))) as server:
        outcome = run(project, manifest, server)
    assert outcome.stop_reason == "rounds" and outcome.rounds == 3 and len(server.chat_requests()) == 3


# -- keys -------------------------------------------------------------------------------------------------------
def test_a_short_key_echoed_back_is_redacted_and_nothing_else(project: Project) -> None:
    short = "k3y"
    manifest = project.write(budget={"rounds": 1, "samples": 2}, generation={**FAST, "api-key-env": "SHORT_KEY"})
    source = kernel_source(1, extra="// k3yboard and monk3y stay as they are\n")
    replies: list[Reply] = [
        Fault(500, echo_key=True),
        Answer(answer(source), reasoning="thinking", echo_key=True),
        Answer(answer(kernel_source(2)), echo_key=True),
    ]
    environ = {"R1BUILD_BASE_URL": "", "SHORT_KEY": short}
    with ChatServer(replies) as server:
        environ["R1BUILD_BASE_URL"] = server.url
        outcome = run(project, manifest, server, environ=environ)
    assert server.chat_requests()[0].headers["authorization"] == f"Bearer {short}"
    stored = project.cache_bytes()
    assert b"You sent the key [redacted]." in stored and b"(key [redacted])" in stored
    assert not re.search(rb"(?<![\w-])k3y(?![\w-])", stored)
    assert b"k3yboard and monk3y" in stored
    with project.cache() as cache:
        again = replay(
            SearchJob(manifest, manifest.kernel("vadd"), "sm_90", evaluator=MarkerJudge(), cache=cache),
            outcome.transcripts,
        )
    assert sorted(c.source for c in again.candidates) == sorted(c.source for c in outcome.candidates)


# -- transcripts linked on every exit path ----------------------------------------------------------------------
def test_transcripts_are_linked_after_a_fatal_error(
    project: Project, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = project.write(budget={"rounds": 2, "samples": 2}, generation={**FAST, "max-concurrency": 1})
    with (
        ChatServer([Answer(answer(kernel_source(1))), Fault(402, message="no credit")]) as server,
        pytest.raises(GenerationError, match="HTTP 402"),
    ):
        run(project, manifest, server)
    doc = link(project, manifest)
    assert doc["stop_reason"] == "fatal" and "HTTP 402" in doc["cause"] and len(doc["transcripts"]) == 2
    monkeypatch.delenv("R1BUILD_BASE_URL", raising=False)
    monkeypatch.setenv("COLUMNS", "200")
    code = main(["replay", "vadd", "--no-gpu", "--manifest", str(project.root), "--cache-dir", str(project.cache_dir)])
    out = capsys.readouterr().out
    assert code == 0 and "2 transcript(s), 1 generated candidate(s), 1 passed" in out


def test_transcripts_are_linked_after_ctrl_c(project: Project) -> None:
    manifest = project.write(budget={"rounds": 2, "samples": 2}, generation={**FAST, "max-concurrency": 2})

    def make(n: int, request: Request) -> Reply:
        if n == 1:
            threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
            return Stall()
        return Answer(answer(kernel_source(n)))

    with ChatServer(counting(make)) as server, pytest.raises(KeyboardInterrupt):
        run(project, manifest, server)
    doc = link(project, manifest)
    assert doc["stop_reason"] == "interrupted" and len(doc["transcripts"]) == 2
    with project.cache() as cache:
        docs = [json.loads(cache.get_text(d) or "") for d in doc["transcripts"]]
    assert sorted(str(d["failure"]) for d in docs) == ["None", "cancelled"]


def test_transcripts_are_linked_after_a_budget_stop(project: Project) -> None:
    manifest = project.write(
        budget={"tokens": 5000, "rounds": 3, "samples": 2, "patience": 9},
        generation={**FAST, "max-concurrency": 2, "max-tokens": 4096},
    )
    with ChatServer(counting(large)) as server:
        outcome = run(project, manifest, server)
    doc = link(project, manifest)
    assert outcome.stop_reason == doc["stop_reason"] == "tokens"
    assert doc["transcripts"] == outcome.transcripts and doc["cause"] == outcome.cause


def test_http_date_is_parsed_into_seconds_from_now() -> None:
    import email.utils

    from r1build.generate.client import parse_retry_after

    wait = parse_retry_after({"retry-after": email.utils.formatdate(time.time() + 30, usegmt=True)})
    assert wait is not None and 28 <= wait <= 30


@pytest.mark.parametrize("complete", [True, False], ids=["code-complete", "code-unfinished"])
def test_an_answer_cut_off_after_complete_code_is_kept(project: Project, stopwatch: Any, complete: bool) -> None:
    """The wall-time deadline cuts a stream that had already delivered the whole kernel (paid for): the
    candidate is kept, and replay finds the same one; a stream cut inside the code keeps nothing."""
    manifest = project.write(
        budget={"rounds": 1, "samples": 1, "wall-time-s": 1.0}, generation={**FAST, "request-timeout-s": 30}
    )
    text = answer(kernel_source(1)) + " More prose follows, and it never ends."
    events = text.index("```", text.index("```") + 3) + 3  # characters up to the closing fence
    cut = events // 40 + 2 if complete else events // 80  # chunks of 40 characters (plus the role chunk)
    with ChatServer([Answer(text, chunk_chars=40, stall_after=cut)]) as server:
        if complete:
            outcome = run(project, manifest, server)
        else:
            with pytest.raises(GenerationError, match="timed out"):
                run(project, manifest, server)
    assert stopwatch() < 4
    if not complete:
        return
    assert [c.source for c in outcome.candidates] == [kernel_source(1)]
    assert outcome.usage.failures.get("kept_partial") == 1 and outcome.stop_reason == "wall_time"
    with project.cache() as cache:
        doc = json.loads(cache.get_text(outcome.transcripts[0]) or "")
        again = replay(
            SearchJob(manifest, manifest.kernel("vadd"), "sm_90", evaluator=MarkerJudge(), cache=cache),
            outcome.transcripts,
        )
    assert doc["answer"]["finish_reason"] == "partial" and doc["failure"] == "timeout"
    assert [c.digest for c in again.candidates] == [c.digest for c in outcome.candidates]


# -- the stop in words (issue 31) ---------------------------------------------------------------------------------
def test_a_backoff_past_the_wall_time_is_named_as_r1builds_own(project: Project) -> None:
    """The stop cause said 'the server needs a pause of 60.0 s after timed out after 5 s': the pause is r1build's
    backoff, not the server's."""
    manifest = project.write(
        budget={"rounds": 1, "samples": 1, "wall-time-s": 5},
        generation={"retry-backoff-s": 60, "request-timeout-s": 0.3, "retries": 2, "max-concurrency": 1},
    )
    with ChatServer([Stall()]) as server, pytest.raises(GenerationError) as caught:
        run(project, manifest, server)
    message = str(caught.value)
    assert "r1build backs off" in message and "after a request that timed out after 0.3 s" in message, message
    assert "the server needs a pause" not in message, message


def test_the_stop_counts_only_requests_really_in_flight(project: Project) -> None:
    """One request on the wire, three samples failed and waiting: 'letting 1 request(s) in flight finish'."""
    manifest = project.write(
        budget={"rounds": 1, "samples": 4, "wall-time-s": 5},
        generation={"retry-backoff-s": 1.5, "request-timeout-s": 1, "retries": 3, "max-consecutive-failures": 3},
    )
    events: list[Event] = []
    script = counting(lambda n, r: Stall() if n == 0 else Fault(500))
    with ChatServer(script) as server, pytest.raises(GenerationError):
        run(project, manifest, server, events=events)
    stops = [e.message for e in events if isinstance(e, Note) and "in flight finish" in e.message]
    assert stops == ["stopping (endpoint failing): letting 1 request(s) in flight finish"], stops


def test_temperatures_outside_r1s_range_are_warned_once(project: Project) -> None:
    """R1's recommended temperatures are 0.5-0.7: 0.2 and 1.0 were sent without a word. One warning a run (two
    searches here) naming the setting; none where the provider ignores temperature or the schedule is in range."""
    manifest = project.write(
        budget={"rounds": 1, "samples": 2},
        generation={**FAST, "provider": "vllm", "model": "deepseek-reasoner", "temperatures": [0.2, 0.6, 1.0]},
    )
    events: list[Event] = []
    with ChatServer([Answer(answer(kernel_source(1)))]) as server:
        run(project, manifest, server, events=events)
        run(project, manifest, server, events=events)
        temperatures = [r.body["temperature"] for r in server.chat_requests() if r.body]
    warned = [e.message for e in events if isinstance(e, Note) and "temperatures" in e.message]
    assert 0.2 in temperatures and len(warned) == 1, warned
    assert "generation.temperatures" in warned[0] and "0.2, 1" in warned[0] and "0.5-0.7" in warned[0], warned
    for settings in ({"provider": "vllm", "temperatures": [0.5, 0.7]}, {"temperatures": [1.5]}):
        quiet = project.write(budget={"rounds": 1, "samples": 1}, generation={**FAST, **settings})
        events.clear()
        with ChatServer([Answer(answer(kernel_source(2)))]) as server:
            run(project, quiet, server, events=events)
        assert not [e for e in events if isinstance(e, Note) and "temperatures" in e.message]


def test_a_money_budget_too_small_for_one_request_says_what_it_costs(project: Project) -> None:
    """``money-usd = 0.01`` with a 32k ``max-tokens`` sent nothing and said 'the money budget is spent: $0.0000 of
    $0.01': the cause names what the least request costs and which settings to change."""
    manifest = project.write(
        budget={"rounds": 1, "samples": 2, "money-usd": 0.01},
        generation={**FAST, "max-tokens": 32768, "prices": {"input-per-mtok": 0.55, "output-per-mtok": 2.19}},
    )
    with ChatServer([Answer(answer(kernel_source(1)))]) as server:
        try:
            cause = run(project, manifest, server).cause
        except GenerationError as exc:
            cause = str(exc)
        assert server.chat_requests() == []
    assert "$0.0000 of" not in cause, cause
    assert "the least request" in cause and "8,192 completion tokens" in cause and "$0.0179" in cause, cause
    assert "budget.money-usd" in cause and "generation.max-tokens" in cause, cause


@pytest.mark.parametrize("status", [401, 402, 403, 404])
def test_a_fatal_status_costs_one_request_not_a_wave(project: Project, status: int) -> None:
    """A key the server refuses cost the whole first wave (8 requests within milliseconds): the first request on
    a new endpoint and key goes alone, the rest once it answered."""
    manifest = project.write(budget={"rounds": 1, "samples": 8}, generation={**FAST, "max-concurrency": 8})
    with ChatServer([Fault(status, delay=0.2)]) as server, pytest.raises((GenerationError, ConfigError)):
        run(project, manifest, server)
    assert len(server.chat_requests()) == 1


def test_the_rest_of_the_wave_goes_once_the_first_answered(project: Project) -> None:
    manifest = project.write(budget={"rounds": 1, "samples": 4}, generation={**FAST, "max-concurrency": 4})
    script = counting(lambda n, r: Answer(answer(kernel_source(n, time_us=50)), delay=0.3 if n == 0 else 0.2))
    with ChatServer(script) as server:
        outcome = run(project, manifest, server)
    first, *rest = [r.received for r in server.chat_requests()]
    assert len(outcome.candidates) == 4 and server.max_in_flight == 3
    assert min(rest) - first >= 0.25, [t - first for t in rest]


def test_a_stream_lets_the_rest_go_once_its_headers_arrived(project: Project) -> None:
    """The first request opens the rest when its status arrives, not when R1 finished thinking."""
    manifest = project.write(budget={"rounds": 1, "samples": 3}, generation={**FAST, "max-concurrency": 3})
    slow = Answer(answer(kernel_source(0, time_us=50)), reasoning="think " * 40, chunk_chars=10, chunk_delay=0.02)
    script = counting(lambda n, r: slow if n == 0 else Answer(answer(kernel_source(n, time_us=50))))
    with ChatServer(script) as server:
        outcome = run(project, manifest, server)
    first, *rest = [r.received for r in server.chat_requests()]
    assert len(outcome.candidates) == 3 and max(rest) - first < 0.5, [t - first for t in rest]


def test_an_attempt_that_fails_after_complete_code_is_not_asked_again(project: Project) -> None:
    """A bad event after the whole kernel arrived (paid for): the code is the sample's answer, and nothing is asked
    again (a retry paid a second time and dropped the first answer's code, found by a fuzzing pass)."""
    manifest = project.write(budget={"rounds": 1, "samples": 1}, generation={**FAST, "retries": 2})
    first = Events([chunk(answer(kernel_source(1))), b"data: {bad\n\n", chunk(finish="stop")])
    with ChatServer([first, Answer(answer(kernel_source(2)))]) as server:
        outcome = run(project, manifest, server)
        asked = len(server.chat_requests())
    assert asked == 1 and [c.source for c in outcome.candidates] == [kernel_source(1)]
    assert outcome.usage.failures.get("kept_partial") == 1


def test_generate_json_says_the_error_on_stdout(
    project: Project, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A script reading `generate --json` gets a document when the search ends in an error too (it got nothing)."""
    project.write(budget={"rounds": 1, "samples": 2}, generation={**FAST, "retries": 0, "max-consecutive-failures": 2})
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with ChatServer([Fault(503)]) as server:
        monkeypatch.setenv("R1BUILD_BASE_URL", server.url)
        monkeypatch.setenv("DEEPSEEK_API_KEY", KEY)
        code = main(
            ["generate", "vadd", "--json", "--manifest", str(project.root), "--cache-dir", str(project.cache_dir)]
        )
    out = capsys.readouterr().out
    doc = json.loads(out)
    assert code == 1 and doc["kernel"] == "vadd" and doc["archs"] == []
    assert "no answer from" in doc["error"] and "HTTP 503" in doc["error"], doc
