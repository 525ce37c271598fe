"""``r1build resolve`` with an endpoint: a miss generates, the gate judges, the decision keeps everything, and
``--refresh`` re-judges the stored candidates without asking the model again. Real server, real nvcc."""

from __future__ import annotations

import json

import pytest

from r1build.cli.main import main
from r1build.judge import CHECKS_VERSION
from r1build.keys import decision_key
from r1build.lock import read_lock
from tests.generate.chat_server import Answer, ChatServer, Fault
from tests.generate.gen_support import KEY, Project, answer, broken_source, kernel_source
from tests.resolve.resolve_support import install_gpu_double

pytestmark = pytest.mark.slow  # seconds a test: nvcc, resolves, processes or servers


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("R1BUILD_BASE_URL", "DEEPSEEK_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def test_resolve_generates_on_a_miss_and_refresh_rejudges_without_the_model(
    project: Project, clean_env: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = project.write(baseline=True, budget={"rounds": 1, "samples": 3})
    replies: list[Answer | Fault] = [
        Fault(429, headers={"retry-after": "0"}),
        Answer(answer(kernel_source(1)), reasoning="first try"),
        Answer(answer(broken_source("vadd_typo")), reasoning="second"),
        Answer("I would rather explain the idea in words.", reasoning="third"),
    ]
    argv = ["resolve", "--manifest", str(project.root), "--cache-dir", str(project.cache_dir), "--no-gpu"]
    with ChatServer(replies) as server:
        monkeypatch.setenv("R1BUILD_BASE_URL", server.url)
        monkeypatch.setenv("DEEPSEEK_API_KEY", KEY)
        assert main(argv) == 0
        requests = len(server.requests)
    out = capsys.readouterr()
    assert requests == 4  # three samples, one retried after the 429
    # said as on the path without generation (issue 31): the baseline won on the gate alone, the generated one waits
    assert (
        "GPU measuring is off (--no-gpu, or a build without R1BUILD_EVALUATE=1): the baseline vadd.cu is chosen by "
        "the static gate alone, unvalidated; 1 generated candidate(s) that passed the gate stay pending until a GPU "
        "of sm_90 judges them"
    ) in out.err, out.err
    assert "rate_limited" in out.err or "429" in out.err
    key = decision_key(manifest, manifest.kernel("vadd"), "sm_90")
    with project.cache() as cache:
        decision = cache.get_decision(key)
    assert decision is not None and len(decision.transcripts) >= 3
    kinds = sorted((ref.origin.kind, r.status) for ref, r in zip(decision.candidates, decision.results, strict=True))
    assert ("generated", "passed") in kinds and ("generated", "compile_error") in kinds
    # without a GPU a generated candidate never wins: the baseline wins by the gate, unvalidated
    entry = read_lock(project.root / "kernels.lock").entry("vadd", "sm_90")  # type: ignore[union-attr]
    assert entry is not None and entry.provenance == "baseline" and entry.time_us is None
    assert entry.validation == "unvalidated"
    assert KEY.encode() not in project.cache_bytes()
    capsys.readouterr()
    assert main(["status", "--manifest", str(project.root), "--cache-dir", str(project.cache_dir), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["kernels"]
    assert (row["state"], row["validation"], row["pending"]) == ("locked", "unvalidated", 1)
    assert "1 generated pending a GPU of sm_90" in row["note"]

    # --refresh with the endpoint gone: the stored candidates are judged again, no request is made
    monkeypatch.setenv("R1BUILD_BASE_URL", "http://127.0.0.1:9/v1")
    capsys.readouterr()
    assert main([*argv, "--refresh"]) == 0
    refreshed = capsys.readouterr().err
    assert "stored generated candidate(s) again (no new requests)" in refreshed
    assert "chosen by the static gate alone, unvalidated; 1 generated candidate(s)" in refreshed
    with project.cache() as cache:
        again = cache.get_decision(key)
    assert again is not None and again.transcripts == decision.transcripts
    generated = {c.digest for c in decision.candidates if c.origin.kind == "generated"}
    assert generated and {c.digest for c in again.candidates} >= generated


def test_without_a_gpu_a_generated_candidate_is_pending_until_a_gpu_judges_it(
    project: Project, clean_env: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No baseline, no GPU, and the model answers with a kernel that passes the gate: it is never chosen on the
    gate alone. The resolve fails with the table, nothing is locked, the candidate waits in the cache as pending;
    a refresh where a GPU of the arch is (a stand-in for the GPU evaluator here) judges it and locks it."""
    manifest = project.write(budget={"rounds": 1, "samples": 1})
    argv = ["resolve", "--manifest", str(project.root), "--cache-dir", str(project.cache_dir)]
    with ChatServer([Answer(answer(kernel_source(1)), reasoning="try")]) as server:
        monkeypatch.setenv("R1BUILD_BASE_URL", server.url)
        monkeypatch.setenv("DEEPSEEK_API_KEY", KEY)
        assert main([*argv, "--no-gpu"]) == 1
    err = capsys.readouterr().err
    assert "vadd/sm_90: no candidate may win; nothing is emitted or locked for it" in err
    row = next(line for line in err.splitlines() if "deepseek-reasoner round 0 sample 0" in line)
    assert "generated" in row and "pending" in row and "passed" in row
    lock = read_lock(project.root / "kernels.lock")
    assert lock is None or lock.entry("vadd", "sm_90") is None
    key = decision_key(manifest, manifest.kernel("vadd"), "sm_90")
    with project.cache() as cache:
        decision = cache.get_decision(key)
    assert decision is not None and decision.winner is None and not decision.measured
    assert [decision.validation(c) for c in decision.candidates] == ["pending"]
    # the cached decision answers the next resolve: the same table, no new request
    monkeypatch.setenv("R1BUILD_BASE_URL", "http://127.0.0.1:9/v1")
    assert main([*argv, "--no-gpu"]) == 1
    assert "pending" in capsys.readouterr().err
    assert main(["status", "--manifest", str(project.root), "--cache-dir", str(project.cache_dir), "--json"]) == 0
    (status,) = json.loads(capsys.readouterr().out)["kernels"]
    assert (status["state"], status["pending"]) == ("no winner", 1)
    # a GPU of sm_90 judges the stored candidate on --refresh (no request to the model)
    install_gpu_double(monkeypatch, reject=lambda c: False)
    assert main([*argv, "--refresh"]) == 0
    entry = read_lock(project.root / "kernels.lock").entry("vadd", "sm_90")  # type: ignore[union-attr]
    assert entry is not None
    assert (entry.provenance, entry.validation, entry.checks, entry.model) == (
        "generated",
        "validated",
        CHECKS_VERSION,
        "deepseek-reasoner",
    )


@pytest.mark.gpu
def test_resolve_generates_and_measures_on_the_gpu(
    project: Project, clean_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The closed loop on a real GPU: generated candidates are validated and timed, the second round's prompt
    carries the measured times, and the decision is a measured one."""
    # target share 1.5, the implausibility bound: no early stop (a kernel can beat the copy-measured floor, so a
    # share of 1.0 can be reached), so the second round (with feedback) runs; the test project's 30 s of wall time
    # do not hold a real GPU's checks, sanitizer runs and timing of the baseline and the first round
    manifest = project.write(
        baseline=True,
        budget={"rounds": 2, "samples": 2, "patience": 2, "target-share": 1.5, "wall-time-s": 600},
    )
    replies = [Answer(answer(kernel_source(i + 1)), reasoning=f"try {i}") for i in range(4)]
    with ChatServer(replies) as server:
        monkeypatch.setenv("R1BUILD_BASE_URL", server.url)
        monkeypatch.setenv("DEEPSEEK_API_KEY", KEY)
        assert main(["resolve", "--manifest", str(project.root), "--cache-dir", str(project.cache_dir)]) == 0
        prompts = [r.prompt for r in server.requests]
    key = decision_key(manifest, manifest.kernel("vadd"), "sm_90")
    with project.cache() as cache:
        decision = cache.get_decision(key)
    assert decision is not None and decision.measured and decision.device
    generated = [
        r for ref, r in zip(decision.candidates, decision.results, strict=True) if ref.origin.kind == "generated"
    ]
    assert generated and all(r.status == "passed" and r.timing is not None for r in generated)
    assert len(prompts) == 4 and any("It is correct and takes " in p and " us on " in p for p in prompts[2:])
    entry = read_lock(project.root / "kernels.lock").entry("vadd", "sm_90")  # type: ignore[union-attr]
    assert entry is not None and entry.time_us is not None and entry.gpu
