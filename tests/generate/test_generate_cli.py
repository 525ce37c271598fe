"""``r1build generate`` and ``r1build replay`` against a real local server and the real static gate."""

from __future__ import annotations

import json

import pytest

from r1build.cache.transcript_doc import LINKS_NAMESPACE
from r1build.cli.main import main
from r1build.keys import decision_key
from r1build.records import Candidate, CandidateRef, Decision, Origin
from tests.generate.chat_server import Answer, ChatServer, Fault
from tests.generate.gen_support import KEY, Project, answer, broken_source, kernel_source

pytestmark = pytest.mark.slow  # seconds a test: nvcc, resolves, processes or servers


@pytest.fixture
def endpoint_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("R1BUILD_BASE_URL", "DEEPSEEK_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", "200")  # tables one row per line


def cli(project: Project, *args: str) -> int:
    return main([*args, "--manifest", str(project.root), "--cache-dir", str(project.cache_dir)])


def test_generate_then_replay(
    project: Project, endpoint_env: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project.write(baseline=True, budget={"rounds": 1, "samples": 2})
    replies = [Answer(answer(broken_source("vadd_typo")), reasoning="r"), Answer(answer(kernel_source(1)))]
    with ChatServer(replies) as server:
        monkeypatch.setenv("R1BUILD_BASE_URL", server.url)
        monkeypatch.setenv("DEEPSEEK_API_KEY", KEY)
        assert cli(project, "generate", "vadd", "--arch", "90") == 0
    out, err = capsys.readouterr()
    assert "generate vadd sm_90" in out
    assert "compile_error" in out and '"vadd_typo" is undefined' in out
    assert "2 generated (1 passed the gate" in out and "stopped (passed_gate)" in out
    assert "generate vadd/sm_90:" in err and "round=1/1" in err and "spend=$" in err
    assert KEY.encode() not in project.cache_bytes()

    monkeypatch.delenv("R1BUILD_BASE_URL")  # replay needs no network
    assert cli(project, "replay", "vadd", "--arch", "sm_90", "--no-gpu") == 0
    out, _ = capsys.readouterr()
    assert "replay vadd sm_90" in out and "2 transcript(s), 2 generated candidate(s), 1 passed" in out
    assert "winner:" in out and "(baseline vadd.cu)" in out


def test_generate_and_replay_report_json(
    project: Project, endpoint_env: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project.write(baseline=True, budget={"rounds": 1, "samples": 2})
    replies = [Answer(answer(broken_source("vadd_typo"))), Answer(answer(kernel_source(1)))]
    with ChatServer(replies) as server:
        monkeypatch.setenv("R1BUILD_BASE_URL", server.url)
        assert cli(project, "generate", "vadd", "--arch", "90", "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    (arch,) = doc["archs"]
    assert doc["kernel"] == "vadd" and arch["arch"] == "sm_90"
    assert arch["generated"] == 2 and arch["passed"] == 1 and arch["usage"]["requests"] == 2
    statuses = sorted(c["status"] for c in arch["candidates"] if c["provenance"] == "generated")
    assert statuses == ["compile_error", "passed"]

    monkeypatch.delenv("R1BUILD_BASE_URL")
    assert cli(project, "replay", "vadd", "--no-gpu", "--json") == 0
    (arch,) = json.loads(capsys.readouterr().out)["archs"]
    assert len(arch["transcripts"]) == 2 and arch["generated"] == 2 and arch["passed"] == 1
    assert arch["winner"] is not None and arch["stored_winner"] is None


def test_replay_confirms_a_stored_decision(
    project: Project, endpoint_env: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = project.write(budget={"rounds": 1, "samples": 1})
    with ChatServer([Answer(answer(kernel_source(1)))]) as server:
        monkeypatch.setenv("R1BUILD_BASE_URL", server.url)
        assert cli(project, "generate", "vadd") == 0
    capsys.readouterr()
    spec = manifest.kernel("vadd")
    key = decision_key(manifest, spec, "sm_90")
    with project.cache() as cache:
        doc = cache.get_json(LINKS_NAMESPACE, key)
        assert isinstance(doc, dict)
        transcripts = doc["transcripts"]
        ref = CandidateRef.of(Candidate(kernel_source(1), Origin("generated")))
        cache.put_decision(
            Decision(
                key=key, kernel="vadd", arch="sm_90", winner=ref, candidates=[ref], results=[], transcripts=transcripts
            )
        )
        cache.put_json(LINKS_NAMESPACE, key, {})  # the decision's transcripts are the ones replayed
    assert cli(project, "replay", "vadd", "--no-gpu") == 0
    out, err = capsys.readouterr()
    # the gate alone never makes a generated candidate a winner: it can only say the stored one still passes it
    assert "winner: none" in out
    assert "the stored winner" in err and "passes the static gate; only a GPU of sm_90 can confirm it" in err

    with project.cache() as cache:
        other = CandidateRef.of(Candidate(kernel_source(2), Origin("generated")))
        cache.put_decision(
            Decision(
                key=key,
                kernel="vadd",
                arch="sm_90",
                winner=other,
                candidates=[other],
                results=[],
                transcripts=transcripts,
            )
        )
    assert cli(project, "replay", "vadd", "--no-gpu") == 1
    _, err = capsys.readouterr()
    assert "the replay does not" in err


def test_generate_without_endpoint(project: Project, endpoint_env: None, capsys: pytest.CaptureFixture[str]) -> None:
    project.write()
    assert cli(project, "generate", "vadd") == 2
    err = capsys.readouterr().err
    assert "no LLM endpoint configured" in err and "DEEPSEEK_API_KEY" in err and "Traceback" not in err


def test_generate_unknown_kernel(project: Project, endpoint_env: None, capsys: pytest.CaptureFixture[str]) -> None:
    project.write()
    assert cli(project, "generate", "vad") == 2
    assert "did you mean 'vadd'" in capsys.readouterr().err


@pytest.mark.parametrize(("status", "code"), [(401, 2), (402, 1)])
def test_generate_fatal_status(
    project: Project,
    endpoint_env: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    status: int,
    code: int,
) -> None:
    project.write(budget={"rounds": 1, "samples": 2})
    with ChatServer([Fault(status, message="go away")]) as server:
        monkeypatch.setenv("R1BUILD_BASE_URL", server.url)
        monkeypatch.setenv("DEEPSEEK_API_KEY", KEY)
        assert cli(project, "generate", "vadd") == code
    err = capsys.readouterr().err
    assert f"HTTP {status}" in err and "go away" in err and "Traceback" not in err and KEY not in err


def test_generate_with_nothing_passing(
    project: Project, endpoint_env: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project.write(budget={"rounds": 2, "samples": 2, "patience": 3})
    with ChatServer([Answer("no code today"), Answer("cut", finish_reason="length")]) as server:
        monkeypatch.setenv("R1BUILD_BASE_URL", server.url)
        assert cli(project, "generate", "vadd") == 1
    out, err = capsys.readouterr()
    assert "0 generated" in out and "no_code 1" in out and "truncated 3" in out
    assert "no generated candidate of vadd passed the gate on sm_90" in err


def test_replay_without_transcripts(project: Project, endpoint_env: None, capsys: pytest.CaptureFixture[str]) -> None:
    project.write()
    assert cli(project, "replay", "vadd") == 2
    assert "no stored transcripts for vadd on sm_90" in capsys.readouterr().err


def test_export_dataset_after_generate_says_why_nothing_was_exported(
    project: Project, endpoint_env: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``generate`` then ``export-dataset`` wrote 0 records without a word: say that the answers stored wait for
    a resolve to judge them."""
    project.write(baseline=True, budget={"rounds": 1, "samples": 1})
    with ChatServer([Answer(answer(kernel_source(1)))]) as server:
        monkeypatch.setenv("R1BUILD_BASE_URL", server.url)
        monkeypatch.setenv("DEEPSEEK_API_KEY", KEY)
        assert cli(project, "generate", "vadd", "--arch", "90") == 0
    capsys.readouterr()
    output = project.root / "out.jsonl"
    assert cli(project, "export-dataset", "--output", str(output)) == 0
    out, err = capsys.readouterr()
    said = out + err
    assert "0 records" in said and "vadd/sm_90: 1 stored answer(s)" in said and "r1build resolve" in said, said
