"""The controller end to end against a real local server: rounds, feedback, budgets, faults, transcripts, replay."""

from __future__ import annotations

import json
import re
import threading
from typing import Any

import pytest

from r1build.convert import FrozenInstanceError
from r1build.errors import ConfigError, GenerationError
from r1build.evaluate.variants import expand_variants
from r1build.events import Event, Note, Progress, sink
from r1build.generate import SearchJob, SearchOutcome, replay, search
from r1build.manifest import Manifest
from r1build.records import Candidate, Origin
from tests.generate.chat_server import Answer, ChatServer, Fault, Reply, Request, Stall
from tests.generate.gen_support import KEY, MarkerJudge, Project, answer, broken_source, env_for, kernel_source


def run(
    project: Project,
    manifest: Manifest,
    server: ChatServer,
    judge: Any,
    *,
    seeds: list[Candidate] | None = None,
    events: list[Event] | None = None,
) -> SearchOutcome:
    spec = manifest.kernel("vadd")
    with project.cache() as cache, sink((events if events is not None else []).append):
        return search(
            SearchJob(
                manifest,
                spec,
                "sm_90",
                evaluator=judge,
                cache=cache,
                seeds=seeds if seeds is not None else expand_variants(manifest, spec),
            ),
            environ=env_for(server.url),
        )


def by_round(server: ChatServer) -> list[Request]:
    return server.chat_requests()


def test_valid_kernels(project: Project, judge: MarkerJudge) -> None:
    manifest = project.write(baseline=True, budget={"rounds": 1, "samples": 3})
    replies = [Answer(answer(kernel_source(i)), reasoning=f"reasoning {i}") for i in range(3)]
    with ChatServer(replies) as server:
        outcome = run(project, manifest, server, judge)
    assert [c.origin.kind for c in outcome.candidates] == ["baseline", "generated", "generated", "generated"]
    assert [(c.origin.round, c.origin.sample) for c in outcome.candidates[1:]] == [(0, 0), (0, 1), (0, 2)]
    assert len({c.digest for c in outcome.candidates}) == 4
    assert [r.candidate for r in outcome.results] == [c.digest for c in outcome.candidates]
    assert all(r.ok for r in outcome.results)
    assert outcome.stop_reason == "passed_gate" and outcome.rounds == 1
    assert len(outcome.transcripts) == 3
    u = outcome.usage
    assert (u.samples, u.requests, u.answers, u.prompt_tokens) == (3, 3, 3, 300)
    assert u.cost_usd == 0.0 and not u.failures
    assert {c.origin.transcript for c in outcome.candidates[1:]} == set(outcome.transcripts)


def test_transcripts_hold_everything_but_the_key(project: Project, judge: MarkerJudge) -> None:
    manifest = project.write(budget={"rounds": 1, "samples": 2})
    replies: list[Reply] = [
        Fault(500, message=f"upstream echoed Bearer {KEY}"),
        Answer(answer(kernel_source(1)), reasoning="deep thought", completion_tokens=77),
    ]
    with ChatServer(replies) as server:
        outcome = run(project, manifest, server, judge)
    with project.cache() as cache:
        docs = [json.loads(cache.get_text(d) or "") for d in outcome.transcripts]
    ok = next(d for d in docs if d["answer"])
    assert ok["answer"]["reasoning"] == "deep thought" and ok["answer"]["finish_reason"] == "stop"
    assert ok["answer"]["completion_tokens"] == 77 and ok["answer"]["latency_s"] > 0
    assert ok["request"]["messages"][0]["role"] == "user" and "vadd" in ok["request"]["messages"][0]["content"]
    assert ok["request"]["params"]["model"] == "deepseek-reasoner"
    assert ok["kernel"] == "vadd" and ok["arch"] == "sm_90" and ok["endpoint"] == server.url
    retried = [d for d in docs if any(a["outcome"] == "server_error" for a in d["attempts"])]
    assert retried and "[redacted]" in retried[0]["attempts"][0]["message"]
    assert KEY.encode() not in project.cache_bytes()


@pytest.mark.slow
def test_compile_errors_flow_back_through_the_real_gate(project: Project) -> None:
    """Round 0's answer does not compile (real nvcc); round 1's prompt carries the compiler's error and the
    earlier answer's content without its reasoning, and the fixed kernel passes."""
    from r1build.gate.static import StaticGate

    manifest = project.write(budget={"rounds": 2, "samples": 1, "patience": 2})
    secret_reasoning = "SECRET-REASONING-TOKEN I will misspell a variable"

    def script(request: Request) -> Answer:
        if len(request.messages) == 1:
            return Answer(answer(broken_source("vadd_typo")), reasoning=secret_reasoning)
        return Answer(answer(kernel_source(1)), reasoning="fixed it")

    with ChatServer(script) as server, project.cache() as cache:
        spec = manifest.kernel("vadd")
        outcome = search(
            SearchJob(manifest, spec, "sm_90", evaluator=StaticGate(cache), cache=cache, seeds=[]),
            environ=env_for(server.url),
        )
    assert [r.status for r in outcome.results] == ["compile_error", "passed"]
    second = server.chat_requests()[1]
    roles = [m["role"] for m in second.messages]
    assert roles == ["user", "assistant", "user"]
    assert broken_source("vadd_typo").strip() in second.messages[1]["content"]
    assert all(secret_reasoning not in json.dumps(m) for m in second.messages)
    assert not any(k in m for m in second.messages for k in ("reasoning_content", "reasoning"))
    assert '"vadd_typo" is undefined' in second.prompt
    assert outcome.stop_reason == "passed_gate"


def test_feedback_carries_time_share_and_mismatches(project: Project, judge: MarkerJudge) -> None:
    manifest = project.write(baseline=True, budget={"rounds": 2, "samples": 2, "target-share": 0.99, "patience": 3})
    first = [Answer(answer(kernel_source(1, time_us=20.0))), Answer(answer(kernel_source(2) + "// WRONG\n"))]

    def script(request: Request) -> Answer:
        index = len(server.chat_requests()) - 1
        return first[index] if index < 2 else Answer(answer(kernel_source(10 + index, time_us=15.0)))

    with ChatServer(script) as server:
        outcome = run(project, manifest, server, judge, seeds=[])
    later = server.chat_requests()[2:]
    assert len(later) == 2
    prompts = "\n".join(r.prompt for r in later)
    assert "20.00 us" in prompts and "50% of the hardware floor (10.00 us)" in prompts
    assert "max abs error 0.5 at index 3" in prompts
    assert outcome.stop_reason == "rounds" and outcome.rounds == 2


def test_answers_that_are_not_candidates(project: Project, judge: MarkerJudge) -> None:
    manifest = project.write(budget={"rounds": 1, "samples": 4})
    replies = [
        Answer("I would use shared memory, but here is no code."),
        Answer(answer(kernel_source(1)), finish_reason="length"),
        Answer("<think>thinking until the limit ```cuda\n" + kernel_source(2) + "```", finish_reason="stop"),
        Answer(answer(kernel_source(3))),
    ]
    events: list[Event] = []
    with ChatServer(replies) as server:
        outcome = run(project, manifest, server, judge, events=events)
    # an answer cut off at max_tokens after its complete code keeps that code (counted as truncated all the same);
    # the four samples are sent at once and the server answers them in the order they arrive: any order
    assert sorted(c.source for c in outcome.candidates) == sorted([kernel_source(1), kernel_source(3)])
    assert outcome.usage.failures == {"no_code": 2, "truncated": 1}
    notes = [e.message for e in events if isinstance(e, Note)]
    assert any("cut off at max_tokens" in n for n in notes)
    assert sum("no CUDA code block" in n for n in notes) == 2


def test_identical_candidates_are_judged_once(project: Project, judge: MarkerJudge) -> None:
    manifest = project.write(baseline=True, budget={"rounds": 1, "samples": 4})
    same = kernel_source(1)
    relaid = same.replace("    ", "\t") + "// a comment\n"
    replies = [Answer(answer(same)), Answer(answer(relaid)), Answer(answer(same)), Answer(answer(kernel_source(99)))]
    with ChatServer(replies) as server:
        outcome = run(project, manifest, server, judge)
    generated = outcome.generated()
    assert len(generated) == 1 and generated[0][0].source in (same, relaid)
    assert outcome.usage.duplicates == 3  # two copies of the first, one copy of the baseline
    assert len(set(judge.judged)) == len(judge.judged)
    # the baseline, and the first kernel once (twice at most: once more when an earlier sample's re-laid copy
    # arrived after a later sample's, so that the earliest sample's text is the one kept)
    assert 2 <= len(judge.judged) <= 3


def test_tunables_of_generated_sources(project: Project, judge: MarkerJudge) -> None:
    manifest = project.write(budget={"rounds": 1, "samples": 1}, tunables={"BLOCK": [128, 256]})
    extra = (
        "#ifndef BLOCK\n#define BLOCK 256\n#endif\n// @tunable UNROLL: 1, 4\n#ifndef UNROLL\n#define UNROLL 1\n#endif\n"
    )
    with ChatServer([Answer(answer(kernel_source(1, extra=extra)))]) as server:
        outcome = run(project, manifest, server, judge, seeds=[])
    assert [c.defines for c in outcome.candidates] == [
        {"BLOCK": 128, "UNROLL": 1},
        {"BLOCK": 128, "UNROLL": 4},
        {"BLOCK": 256, "UNROLL": 1},
        {"BLOCK": 256, "UNROLL": 4},
    ]


def test_faults_are_reported_and_retried_only_where_they_should(project: Project, judge: MarkerJudge) -> None:
    plan: dict[int, list[Any]] = {
        0: [Fault(429, headers={"retry-after": "0.05"}), Answer(answer(kernel_source(0)))],
        1: [Fault(500), Fault(502)],
        2: [Answer("cut short", cut_after=1), Answer(answer(kernel_source(2)))],
        3: [Answer(answer(kernel_source(3)), finish_reason="length")],
    }
    seen: dict[int, int] = {}
    lock = threading.Lock()

    def script(request: Request) -> Any:
        sample = int(re.search(r"SAMPLE=(\d)", json.dumps(request.body)).group(1))  # type: ignore[union-attr]
        with lock:
            n = seen.get(sample, 0)
            seen[sample] = n + 1
        return plan[sample][min(n, len(plan[sample]) - 1)]

    events: list[Event] = []
    directions = [f"SAMPLE={i}" for i in range(4)]  # each sample's prompt names it, so the script can tell them apart
    manifest = project.write(budget={"rounds": 1, "samples": 4}, generation={"retries": 1, "directions": directions})
    with ChatServer(script) as server:
        outcome = run(project, manifest, server, judge, seeds=[], events=events)
    assert seen == {0: 2, 1: 2, 2: 2, 3: 1}  # truncation is final, 5xx gives up after the retries
    assert sorted(c.origin.sample or 0 for c in outcome.candidates) == [0, 2, 3]  # 3: complete code, then cut
    assert outcome.usage.failures == {
        "rate_limited": 1,
        "server_error": 2,
        "stream_cut": 1,
        "gave_up": 1,
        "truncated": 1,
    }
    assert outcome.usage.requests == 7 and outcome.usage.retries == 3
    warnings = [e.message for e in events if isinstance(e, Note) and e.level == "warning"]
    assert any("HTTP 429" in w and "retrying" in w for w in warnings)
    assert any("HTTP 502" in w and "giving up" in w for w in warnings)


@pytest.mark.parametrize(
    ("status", "error"), [(401, ConfigError), (402, GenerationError), (400, GenerationError), (422, GenerationError)]
)
def test_fatal_status_ends_the_search(
    project: Project, judge: MarkerJudge, status: int, error: type[Exception]
) -> None:
    manifest = project.write(budget={"rounds": 2, "samples": 3}, generation={"max-concurrency": 1})
    with (
        ChatServer([Fault(status, message="refused"), Answer(answer(kernel_source(1)))]) as server,
        pytest.raises(error, match=f"HTTP {status}"),
    ):
        run(project, manifest, server, judge)
    assert len(server.chat_requests()) == 1
    assert KEY.encode() not in project.cache_bytes()


def test_unreachable_endpoint_is_an_error(project: Project, judge: MarkerJudge) -> None:
    manifest = project.write(budget={"rounds": 2, "samples": 2}, generation={"retries": 0})
    with ChatServer([Answer("x")]) as server:
        pass
    with pytest.raises(GenerationError, match="no request reached"):
        run(project, manifest, server, judge)


def test_candidate_and_round_budgets(project: Project, judge: MarkerJudge) -> None:
    manifest = project.write(budget={"candidates": 5, "rounds": 3, "samples": 2, "patience": 9})
    counter = iter(range(1000))
    with ChatServer(lambda r: Answer(answer(kernel_source(next(counter), time_us=50.0)))) as server:
        outcome = run(project, manifest, server, judge, seeds=[])
    assert len(server.chat_requests()) == 5 and outcome.usage.samples == 5
    assert outcome.stop_reason == "rounds" and outcome.rounds == 3
    manifest = project.write(budget={"candidates": 4, "rounds": 3, "samples": 2, "patience": 9})
    with ChatServer(lambda r: Answer(answer(kernel_source(next(counter), time_us=50.0)))) as server:
        outcome = run(project, manifest, server, judge, seeds=[])
    assert len(server.chat_requests()) == 4 and outcome.stop_reason == "candidates"


def test_token_budget(project: Project, judge: MarkerJudge) -> None:
    manifest = project.write(
        budget={"tokens": 2500, "rounds": 5, "samples": 2, "patience": 9}, generation={"max-concurrency": 1}
    )
    counter = iter(range(1000))

    def script(request: Request) -> Answer:
        """Like a real server: 1000 tokens per answer unless max_tokens cuts it first."""
        limit = int((request.body or {})["max_tokens"])
        return Answer(
            answer(kernel_source(next(counter), time_us=50.0)),
            completion_tokens=min(1000, limit),
            finish_reason="stop" if limit >= 1000 else "length",
        )

    with ChatServer(script) as server:
        outcome = run(project, manifest, server, judge, seeds=[])
    assert outcome.stop_reason == "tokens"
    assert outcome.usage.completion_tokens == 2000
    bodies = [r.body for r in server.chat_requests()]
    # each request asks for what remains; the 500 left after two answers of 1000 would only buy a cut-off answer
    assert [b["max_tokens"] for b in bodies if b] == [2500, 1500]
    assert not outcome.usage.failures and len(outcome.candidates) == 2


def test_money_budget(project: Project, judge: MarkerJudge) -> None:
    prices = {"input-per-mtok": 1000.0, "output-per-mtok": 1000.0}  # $0.001 per token
    manifest = project.write(
        budget={"money-usd": 2.5, "rounds": 4, "samples": 2, "patience": 9},
        generation={"max-concurrency": 1, "prices": prices},
    )
    counter = iter(range(1000))
    with ChatServer(
        lambda r: Answer(answer(kernel_source(next(counter), time_us=50.0)), prompt_tokens=500, completion_tokens=500)
    ) as server:
        outcome = run(project, manifest, server, judge, seeds=[])
    # two answers cost $2.00; a third would not fit with its prompt alone (~$0.8 by the prompt's length)
    assert outcome.stop_reason == "money"
    assert len(server.chat_requests()) == 2 and outcome.usage.cost_usd == pytest.approx(2.0)


def test_wall_time_budget(project: Project, judge: MarkerJudge, stopwatch: Any) -> None:
    manifest = project.write(
        budget={"wall-time-s": 1.0, "rounds": 3, "samples": 2}, generation={"request-timeout-s": 30}
    )
    with ChatServer([Answer(answer(kernel_source(1, time_us=50.0))), Stall()]) as server:
        outcome = run(project, manifest, server, judge, seeds=[])
    assert stopwatch() < 2.5
    assert outcome.stop_reason == "wall_time" and len(server.chat_requests()) == 2
    assert outcome.usage.failures == {"timeout": 1, "gave_up": 1}
    assert len(outcome.candidates) == 1
    assert outcome.cause == "the wall-time budget (1 s) is spent", outcome.cause


def test_a_request_cut_by_the_wall_time_blames_the_wall_time(project: Project, judge: MarkerJudge) -> None:
    """Requests timed out by the search's deadline ended the search with a cause that blamed a pause: 'the
    server needs a pause of 0.0 s after timed out after 0.455 s, longer than the 0.0 s left of the wall-time
    budget' (the backoff after the timeout, set when no time was left anyway), and counted them apart by what each
    had left of the deadline ('3 timed out after 0.456 s, 1 timed out after 0.455 s')."""
    manifest = project.write(budget={"wall-time-s": 0.5}, generation={"request-timeout-s": 30})
    with ChatServer([Stall()]) as server, pytest.raises(GenerationError) as caught:
        run(project, manifest, server, judge, seeds=[])
    message = str(caught.value)
    assert "needs a pause" not in message and "then the wall-time budget (0.5 s) is spent" in message, message
    assert "requests, all timed out at the wall-time deadline; then" in message, message


def test_concurrency_cap(project: Project, judge: MarkerJudge) -> None:
    manifest = project.write(budget={"rounds": 1, "samples": 12, "candidates": 12}, generation={"max-concurrency": 3})
    counter = iter(range(1000))
    with ChatServer(lambda r: Answer(answer(kernel_source(next(counter))), delay=0.05)) as server:
        outcome = run(project, manifest, server, judge, seeds=[])
    assert server.max_in_flight == 3 and len(outcome.candidates) == 12


def test_judging_overlaps_with_requests(project: Project) -> None:
    """Candidates are judged (in a worker thread) while other answers are still streaming."""
    judge = MarkerJudge(delay_s=0.05)
    manifest = project.write(budget={"rounds": 1, "samples": 3})
    replies = {
        0: Answer(answer(kernel_source(0))),
        1: Answer(answer(kernel_source(1)), delay=0.5),
        2: Answer(answer(kernel_source(2)), delay=0.5),
    }
    counter = iter(range(3))
    with ChatServer(lambda r: replies[next(counter)]) as server:
        run(project, manifest, server, judge, seeds=[])
    assert len(judge.jobs) >= 2 and len(judge.jobs[0]) == 1
    assert threading.main_thread().name not in judge.threads


def test_target_share_stops_early(project: Project, judge: MarkerJudge) -> None:
    manifest = project.write(budget={"rounds": 3, "samples": 2, "target-share": 0.8})
    counter = iter(range(1000))
    with ChatServer(lambda r: Answer(answer(kernel_source(next(counter), time_us=12.0)))) as server:
        outcome = run(project, manifest, server, judge, seeds=[])
    assert outcome.stop_reason == "target" and len(server.chat_requests()) == 2


def test_seeds_at_the_target_need_no_request(project: Project, judge: MarkerJudge) -> None:
    manifest = project.write(budget={"target-share": 0.5})
    seed = Candidate(kernel_source(7, time_us=15.0), Origin("baseline", "vadd.cu"))
    with ChatServer([Answer(answer(kernel_source(1)))]) as server:
        outcome = run(project, manifest, server, judge, seeds=[seed])
    assert outcome.stop_reason == "target" and not server.chat_requests() and outcome.candidates == [seed]


def test_patience(project: Project, judge: MarkerJudge) -> None:
    manifest = project.write(baseline=True, budget={"rounds": 5, "samples": 2, "patience": 2, "candidates": 20})
    counter = iter(range(1000))
    times = [30.0, 40.0, 20.0, 25.0, 21.0, 22.0, 20.5, 19.9]

    def script(request: Request) -> Answer:
        i = next(counter)
        return Answer(answer(kernel_source(i, time_us=times[i])))

    with ChatServer(script) as server:
        outcome = run(project, manifest, server, judge, seeds=[])
    # round 0: 30 (first timing), round 1: 20 (better), rounds 2 and 3: no gain > 2 %
    assert outcome.stop_reason == "patience" and outcome.rounds == 4 and len(server.chat_requests()) == 8


def test_progress_events(project: Project, judge: MarkerJudge) -> None:
    manifest = project.write(
        budget={"rounds": 1, "samples": 2}, generation={"prices": {"input-per-mtok": 1.0, "output-per-mtok": 2.0}}
    )
    events: list[Event] = []
    with ChatServer([Answer(answer(kernel_source(1)), completion_tokens=500)]) as server:
        run(project, manifest, server, judge, seeds=[], events=events)
    progress = [e for e in events if isinstance(e, Progress)]
    last = progress[-1]
    assert last.fields["round"] == "1/1" and last.fields["tokens"] == 1000 and last.fields["spend"] == "$0.0022"
    assert last.completed == 2 and last.total == 2
    # counted as entries come and go, not by a scan: both samples gave the same kernel, one candidate, passed
    assert (last.fields["candidates"], last.fields["passed"]) == (1, 1), last.fields


def test_replay_reproduces_without_network(project: Project, judge: MarkerJudge) -> None:
    manifest = project.write(
        baseline=True, budget={"rounds": 2, "samples": 3, "patience": 2}, tunables={"BLOCK": [64, 128]}
    )
    extra = "#ifndef BLOCK\n#define BLOCK 64\n#endif\n"
    replies = [
        Answer(answer(kernel_source(1, time_us=40, extra=extra))),
        Answer("no code"),
        Answer(answer(kernel_source(2, time_us=30)) + "\n", finish_reason="length"),
        Answer(answer(kernel_source(3, time_us=20))),
        Answer(answer(kernel_source(3, time_us=20).replace("    ", "  ") + "// same kernel, other layout\n")),
        Answer(answer(broken_source())),
    ]
    counter = iter(range(100))
    with ChatServer(lambda r: replies[next(counter)]) as server:
        outcome = run(project, manifest, server, judge)
    spec = manifest.kernel("vadd")
    seeds = expand_variants(manifest, spec)
    with project.cache() as cache:
        again = replay(
            SearchJob(manifest, spec, "sm_90", evaluator=MarkerJudge(), cache=cache, seeds=seeds),
            list(reversed(outcome.transcripts)),
        )
    assert [c.digest for c in again.candidates] == [c.digest for c in outcome.candidates]
    assert [c.origin for c in again.candidates] == [c.origin for c in outcome.candidates]
    assert [r.status for r in again.results] == [r.status for r in outcome.results]
    assert again.transcripts == outcome.transcripts and again.stop_reason == "replay"
    assert again.usage.completion_tokens == outcome.usage.completion_tokens


def test_replay_skips_missing_transcripts(project: Project, judge: MarkerJudge) -> None:
    manifest = project.write()
    spec = manifest.kernel("vadd")
    events: list[Event] = []
    with project.cache() as cache, sink(events.append):
        outcome = replay(SearchJob(manifest, spec, "sm_90", evaluator=judge, cache=cache), ["0" * 64])
    assert outcome.usage.failures == {"missing_transcript": 1} and not outcome.candidates
    assert any("missing" in e.message for e in events if isinstance(e, Note))


def test_search_from_a_running_event_loop(project: Project, judge: MarkerJudge) -> None:
    """search() is synchronous; called from inside a running loop it runs in a helper thread and events still
    reach the caller's sink."""
    import asyncio

    manifest = project.write(budget={"rounds": 1, "samples": 1})
    events: list[Event] = []

    async def caller() -> SearchOutcome:
        return run(project, manifest, server, judge, seeds=[], events=events)

    with ChatServer([Answer(answer(kernel_source(1)))]) as server:
        outcome = asyncio.run(caller())
    assert len(outcome.candidates) == 1 and any(isinstance(e, Progress) for e in events)


def test_temperature_schedule_and_directions(project: Project, judge: MarkerJudge) -> None:
    """Where the provider honours temperature, the schedule is cycled over samples and no direction is added;
    where it does not (DeepSeek's API), temperature is not sent and each sample gets its own direction."""
    from r1build.generate.prompts import DEFAULT_DIRECTIONS

    counter = iter(range(1000))

    def script(request: Request) -> Answer:
        return Answer(answer(kernel_source(next(counter))))

    manifest = project.write(
        budget={"rounds": 1, "samples": 4}, generation={"provider": "vllm", "temperatures": [0.5, 0.7]}
    )
    with ChatServer(script) as server:
        run(project, manifest, server, judge, seeds=[])
    bodies = [r.body or {} for r in server.chat_requests()]
    assert sorted(b["temperature"] for b in bodies) == [0.5, 0.5, 0.7, 0.7]
    assert not any("Optimization direction" in r.prompt for r in server.chat_requests())

    manifest = project.write(budget={"rounds": 1, "samples": 4}, generation={"provider": "deepseek"})
    with ChatServer(script) as server:
        run(project, manifest, server, judge, seeds=[])
    bodies = [r.body or {} for r in server.chat_requests()]
    assert not any("temperature" in b or "top_p" in b or "n" in b for b in bodies)
    found = {d for r in server.chat_requests() for d in DEFAULT_DIRECTIONS if f"attempt: {d}." in r.prompt}
    assert found == set(DEFAULT_DIRECTIONS[:4])


def test_plain_answers(project: Project, judge: MarkerJudge) -> None:
    manifest = project.write(budget={"rounds": 1, "samples": 2}, generation={"stream": False})
    replies = [
        Answer(answer(kernel_source(1)), reasoning="plain reasoning", reasoning_field="reasoning"),
        Answer(answer(kernel_source(2)), reasoning="plain reasoning"),
    ]
    with ChatServer(replies) as server:
        outcome = run(project, manifest, server, judge, seeds=[])
    assert len(outcome.candidates) == 2 and all((r.body or {})["stream"] is False for r in server.chat_requests())
    with project.cache() as cache:
        docs = [json.loads(cache.get_text(d) or "") for d in outcome.transcripts]
    assert {d["answer"]["reasoning"] for d in docs} == {"plain reasoning"}


def test_key_echoed_in_an_answer_is_scrubbed_and_placeholders_are_not(project: Project, judge: MarkerJudge) -> None:
    manifest = project.write(budget={"rounds": 1, "samples": 1})
    with ChatServer([Answer(answer(kernel_source(1)) + f"\nYour key is {KEY}.", reasoning=f"the key {KEY}")]) as server:
        run(project, manifest, server, judge, seeds=[])
    assert KEY.encode() not in project.cache_bytes()

    # no key at all: the placeholder sent to a keyless server is not a secret, and an answer that happens to
    # contain the word survives intact, so replay extracts the very same candidate
    keyless = kernel_source(2, extra="// EMPTY slots are skipped\n")
    spec = manifest.kernel("vadd")
    with ChatServer([Answer(answer(keyless))]) as server, project.cache() as cache:
        outcome = search(
            SearchJob(manifest, spec, "sm_90", evaluator=judge, cache=cache, seeds=[]),
            environ={"R1BUILD_BASE_URL": server.url},
        )
        again = replay(SearchJob(manifest, spec, "sm_90", evaluator=judge, cache=cache), outcome.transcripts)
    assert server.chat_requests()[0].headers["authorization"] == "Bearer EMPTY"
    assert [c.source for c in again.candidates] == [keyless] == [c.source for c in outcome.candidates]


def test_search_job_parses_its_arch_and_is_frozen(project: Project, judge: MarkerJudge) -> None:
    """A :class:`SearchJob` is one record for the whole search: its arch canonical once made, and it cannot
    change under the layers it is passed down through."""
    manifest = project.write()
    with project.cache() as cache:
        job = SearchJob(manifest, manifest.kernel("vadd"), "90", evaluator=judge, cache=cache)
    assert job.arch == "sm_90" and job.seeds == () and job.profiler is None and job.perf_model is None
    with pytest.raises(FrozenInstanceError):
        job.arch = "sm_80"  # type: ignore[misc]
    with pytest.raises(ValueError):
        SearchJob(manifest, manifest.kernel("vadd"), "not-an-arch", evaluator=judge, cache=cache)


@pytest.mark.parametrize("finish", ["insufficient_system_resource", "abort"])
def test_an_answer_the_server_ended_early_keeps_only_its_complete_code(
    project: Project, judge: MarkerJudge, finish: str
) -> None:
    """DeepSeek ends answers with ``insufficient_system_resource`` when busy, vLLM and SGLang with ``abort``: read as
    ``stop``, the half-written last block went to the gate and its compile error back to the model as its own.
    Now only complete code is kept (as for an answer cut off at max_tokens), counted as interrupted, said in a
    note, and not fed back as the model's fault."""
    manifest = project.write(budget={"rounds": 1, "samples": 2})
    half = answer(kernel_source(2))
    replies = [
        Answer(answer(kernel_source(1)) + "\n\nA faster one:\n```cuda\n__global__ void k(", finish_reason=finish),
        Answer(half[: len(half) // 2], finish_reason=finish),
    ]
    events: list[Event] = []
    with ChatServer(replies) as server:
        outcome = run(project, manifest, server, judge, events=events)
    assert [c.source for c in outcome.candidates] == [kernel_source(1)]
    assert outcome.usage.failures == {"interrupted": 2}
    notes = [e.message for e in events if isinstance(e, Note)]
    assert sum(f"the server ended the answer early (finish_reason {finish})" in n for n in notes) == 2


def test_a_stream_without_end_fails_its_attempt_at_the_answer_size_limit(
    project: Project, judge: MarkerJudge, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that streams without end filled this process's memory until the request's deadline: past
    ANSWER_CHARS (here lowered) the attempt fails as a bad response, and so do its retries: the endpoint gave no
    answer (EndpointSilentError, which a build goes on from), saying why."""
    from r1build.errors import EndpointSilentError
    from r1build.generate import responses

    monkeypatch.setattr(responses, "ANSWER_CHARS", 200_000)
    manifest = project.write(budget={"rounds": 1, "samples": 1})
    endless = Answer("x" * 400_000, chunk_chars=100_000)
    with ChatServer([endless] * 5) as server, pytest.raises(EndpointSilentError) as silent:
        run(project, manifest, server, judge, seeds=[])
    assert server.chat_requests() and all((r.body or {}).get("stream") for r in server.chat_requests())
    assert "all an answer without end" in str(silent.value) and "passed 200000 characters" in str(silent.value)
