"""A search that Ctrl-C or a fatal error cut short, run again: the answers it received are kept and judged, what
it spent counts against the budget, and only the samples it never got an answer for are asked again (against
the real local server)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from r1build.cache.transcript_doc import read_links
from r1build.cli.main import main
from r1build.errors import ConfigError, GenerationError
from r1build.generate import SearchOutcome
from r1build.keys import decision_key
from r1build.manifest import Manifest
from tests.generate.chat_server import Answer, ChatServer, Fault, Reply, Request, Stall
from tests.generate.gen_support import KEY, Project, answer, env_for, kernel_source, search_vadd

pytestmark = pytest.mark.slow  # servers and searches, twice each


def run(project: Project, manifest: Manifest, server: ChatServer) -> SearchOutcome:
    with project.cache() as cache:
        return search_vadd(manifest, cache, server.url)


def answers(first: int, tokens: int = 1000) -> Any:
    """A script answering distinct kernels ``first``, ``first + 1`` ..., each reported as ``tokens`` tokens."""
    lock = threading.Lock()
    seen = [first]

    def script(request: Request) -> Reply:
        with lock:
            n = seen[0]
            seen[0] += 1
        return Answer(answer(kernel_source(n)), completion_tokens=tokens)

    return script


def test_a_search_cut_short_by_a_fatal_error_goes_on_from_its_answers(project: Project) -> None:
    manifest = project.write(budget={"rounds": 1, "samples": 4, "candidates": 4}, generation={"max-concurrency": 1})
    first: list[Reply] = [
        Answer(answer(kernel_source(0)), completion_tokens=1000),
        Answer(answer(kernel_source(1)), completion_tokens=1000),
        Fault(402, message="no credit"),
    ]
    with ChatServer(first) as server, pytest.raises(GenerationError, match="HTTP 402"):
        run(project, manifest, server)
    assert len(server.chat_requests()) == 3

    with ChatServer(answers(2)) as server:
        outcome = run(project, manifest, server)
    # samples 0 and 1 were answered and paid for: only 2 (refused) and 3 (never sent) are asked
    assert len(server.chat_requests()) == 2
    assert sorted(c.source for c in outcome.candidates) == sorted(kernel_source(n) for n in range(4))
    assert sorted(c.origin.sample or 0 for c in outcome.candidates) == [0, 1, 2, 3]
    u = outcome.usage
    assert (u.samples, u.answers, u.completion_tokens) == (4, 4, 4000)
    assert len(outcome.transcripts) == 5  # the refused sample's transcript too


def test_ctrl_c_then_a_rerun_asks_only_what_was_in_flight(project: Project) -> None:
    manifest = project.write(
        budget={"rounds": 1, "samples": 3, "candidates": 3},
        generation={"max-concurrency": 3, "directions": ["SAMPLE=0", "SAMPLE=1", "SAMPLE=2"]},
    )
    key = decision_key(manifest, manifest.kernel("vadd"), "sm_90")

    def interrupt_once_two_are_stored() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with project.cache() as cache:
                links = read_links(cache, key)
            if links is not None and len(links.transcripts) >= 2:
                break
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    def make(request: Request) -> Reply:
        if "SAMPLE=2" in request.prompt:
            threading.Thread(target=interrupt_once_two_are_stored, daemon=True).start()
            return Stall()
        return Answer(answer(kernel_source(0 if "SAMPLE=0" in request.prompt else 1)), completion_tokens=500)

    with ChatServer(make) as server, pytest.raises(KeyboardInterrupt):
        run(project, manifest, server)
    assert len(server.chat_requests()) == 3

    with ChatServer(answers(2, tokens=700)) as server:
        outcome = run(project, manifest, server)
    asked = server.chat_requests()
    assert len(asked) == 1 and "SAMPLE=2" in asked[0].prompt
    assert sorted(c.source for c in outcome.candidates) == sorted(kernel_source(n) for n in range(3))
    assert (outcome.usage.answers, outcome.usage.completion_tokens) == (3, 1700)


def test_what_the_cut_search_spent_counts_against_the_budget(project: Project) -> None:
    manifest = project.write(
        budget={"rounds": 2, "samples": 4, "candidates": 8, "tokens": 6500, "patience": 9},
        generation={"max-concurrency": 1, "max-tokens": 4096},
    )
    first: list[Reply] = [
        Answer(answer(kernel_source(0, time_us=50)), completion_tokens=2000),
        Answer(answer(kernel_source(1, time_us=40)), completion_tokens=2000),
        Fault(401, message="key revoked"),
    ]
    with ChatServer(first) as server, pytest.raises(ConfigError, match="HTTP 401"):
        run(project, manifest, server)
    assert len(server.chat_requests()) == 3

    with ChatServer(answers(2, tokens=2000)) as server:
        outcome = run(project, manifest, server)
    # 4,000 of 6,500 tokens were spent: room for one more typical (2,000-token) answer, not three
    assert len(server.chat_requests()) == 1
    assert outcome.stop_reason == "tokens" and outcome.usage.completion_tokens == 6000
    assert "6,000 of 6,500 completion tokens" in outcome.cause
    assert len(outcome.candidates) == 3


def test_a_search_that_got_no_answer_is_asked_anew(project: Project) -> None:
    manifest = project.write(
        budget={"rounds": 1, "samples": 2}, generation={"retries": 0, "max-consecutive-failures": 2}
    )
    with ChatServer([Fault(503)]) as server, pytest.raises(GenerationError, match="no answer from"):
        run(project, manifest, server)
    with ChatServer(answers(0)) as server:
        outcome = run(project, manifest, server)
    assert len(server.chat_requests()) == 2 and len(outcome.candidates) == 2
    assert outcome.usage.samples == 2


def test_resolve_after_a_fatal_error_keeps_what_was_received(
    project: Project, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = project.write(
        baseline=True, budget={"rounds": 1, "samples": 2}, generation={"retries": 0, "max-concurrency": 1}
    )
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("DEEPSEEK_API_KEY", KEY)
    argv = ["resolve", "--no-gpu", "--manifest", str(project.root), "--cache-dir", str(project.cache_dir)]
    with ChatServer([Answer(answer(kernel_source(1))), Fault(402, message="no credit")]) as server:
        monkeypatch.setenv("R1BUILD_BASE_URL", server.url)
        assert main(argv) == 1
    with ChatServer(answers(2)) as server:
        monkeypatch.setenv("R1BUILD_BASE_URL", server.url)
        assert main(argv) == 0
        assert len(server.chat_requests()) == 1
    err = capsys.readouterr().err
    assert "1 answer(s) of 1 sample(s) already received are kept, not asked again" in err
    with project.cache() as cache:
        decision = cache.get_decision(decision_key(manifest, manifest.kernel("vadd"), "sm_90"))
        assert decision is not None
        sources = {cache.get_text(ref.source) for ref in decision.candidates if ref.origin.kind == "generated"}
    assert sources == {kernel_source(1), kernel_source(2)}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_killed_process_leaves_its_answers_to_the_next_run(project: Project, sig: signal.Signals) -> None:
    """A search links its transcripts as it stores them, so a process ended without a word (SIGTERM from CI or
    docker stop, SIGKILL, the OOM killer) leaves what it received to the next run, which does not pay again."""
    manifest = project.write(
        budget={"rounds": 1, "samples": 2, "candidates": 2},
        generation={"max-concurrency": 2, "directions": ["SAMPLE=0", "SAMPLE=1"]},
    )
    key = decision_key(manifest, manifest.kernel("vadd"), "sm_90")

    def make(request: Request) -> Reply:
        if "SAMPLE=1" in request.prompt:
            return Stall()
        return Answer(answer(kernel_source(0)), completion_tokens=600)

    argv = [sys.executable, "-m", "r1build.cli.main", "generate", "vadd", "-m", str(project.root)]
    with ChatServer(make) as server:
        env = {**os.environ, **env_for(server.url), "R1BUILD_CACHE_DIR": str(project.cache_dir)}
        env.pop("OPENAI_API_KEY", None)
        process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and process.poll() is None:
                with project.cache() as cache:
                    links = read_links(cache, key)
                if links is not None and links.transcripts:
                    break
                time.sleep(0.1)
            assert process.poll() is None, "the search ended before it could be killed"
        finally:
            process.send_signal(sig)
            process.wait(30)
    assert links is not None and len(links.transcripts) == 1

    with ChatServer(answers(1)) as server:
        outcome = run(project, manifest, server)
    asked = server.chat_requests()
    assert len(asked) == 1 and "SAMPLE=1" in asked[0].prompt
    assert sorted(c.source for c in outcome.candidates) == [kernel_source(0), kernel_source(1)]
    assert outcome.usage.completion_tokens == 600 + 1000
