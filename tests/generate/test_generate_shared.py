"""Generation is paid once: concurrent resolves of one manifest send the requests of one (the others wait for its
decision and use it), and a resolve judges what ``r1build generate`` already produced instead of asking again.
Real local chat server counting requests, real nvcc, real processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from r1build.cache.transcript_doc import LINKS_NAMESPACE
from r1build.cli.main import main
from r1build.keys import decision_key
from tests.generate.chat_server import Answer, ChatServer
from tests.generate.gen_support import KEY, Project, answer, kernel_source

pytestmark = pytest.mark.slow  # seconds a test: nvcc, resolves, processes or servers

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("R1BUILD_BASE_URL", "DEEPSEEK_API_KEY", "OPENAI_API_KEY", "R1BUILD_OFFLINE"):
        monkeypatch.delenv(name, raising=False)


def test_four_concurrent_resolves_send_the_requests_of_one(project: Project, clean_env: None) -> None:
    manifest = project.write(baseline=True, budget={"rounds": 1, "samples": 2})
    # slow answers: every process has started and missed before the first one's decision is stored (the four
    # reach the lock within ~0.1 s of each other; the deciding one's answers, one after the other, and its judging
    # take some 4 s at this delay)
    replies = [Answer(answer(kernel_source(1)), delay=1.0), Answer(answer(kernel_source(2)), delay=1.0)]
    with ChatServer(replies) as server:
        env = {
            **os.environ,
            "R1BUILD_BASE_URL": server.url,
            "DEEPSEEK_API_KEY": KEY,
            "PYTHONPATH": str(ROOT),
            "COLUMNS": "200",
        }
        argv = [
            sys.executable,
            "-m",
            "r1build.cli.main",
            "resolve",
            "--no-gpu",
            "-m",
            str(project.root),
            "--cache-dir",
            str(project.cache_dir),
        ]
        procs = [
            subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)
        ]
        outputs = [p.communicate(timeout=300) for p in procs]
        requests = len(server.chat_requests())
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, out + err
    assert requests == 2, f"4 resolves sent {requests} requests; one resolve sends 2"
    waited = sum("another r1build process is deciding vadd/sm_90" in err for _, err in outputs)
    assert waited >= 1, [err for _, err in outputs]
    locks = {(project.root / "kernels.lock").read_text()}
    assert len(locks) == 1
    with project.cache() as cache:
        decision = cache.get_decision(decision_key(manifest, manifest.kernel("vadd"), "sm_90"))
    assert decision is not None and len(decision.transcripts) == 2


def test_a_resolve_judges_what_generate_produced(
    project: Project, clean_env: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = project.write(baseline=True, budget={"rounds": 1, "samples": 2})
    common = ["--manifest", str(project.root), "--cache-dir", str(project.cache_dir)]
    with ChatServer([Answer(answer(kernel_source(1))), Answer(answer(kernel_source(2)))]) as server:
        monkeypatch.setenv("R1BUILD_BASE_URL", server.url)
        monkeypatch.setenv("DEEPSEEK_API_KEY", KEY)
        assert main(["generate", "vadd", *common]) == 0
        assert len(server.chat_requests()) == 2
        capsys.readouterr()
        assert main(["resolve", "--no-gpu", *common]) == 0
        assert len(server.chat_requests()) == 2, "the resolve asked the model again"
    err = capsys.readouterr().err
    assert "judging 2 stored generated candidate(s) again (no new requests)" in err
    key = decision_key(manifest, manifest.kernel("vadd"), "sm_90")
    with project.cache() as cache:
        record = cache.get_json(LINKS_NAMESPACE, key)
        decision = cache.get_decision(key)
    assert isinstance(record, dict) and decision is not None
    assert decision.transcripts == record["transcripts"]
    generated = {c["digest"] for c in record["candidates"] if c["origin"]["kind"] == "generated"}
    assert len(generated) == 2 and generated <= {c.digest for c in decision.candidates}
