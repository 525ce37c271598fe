"""A real search for the report and dataset tests: ``r1build resolve`` against the local chat server, the real
static gate (nvcc), and the GPU stand-in of ``resolve_support`` for the verdicts and times a GPU would give."""

from __future__ import annotations

import re

import pytest

from r1build.cli.main import main
from r1build.generate.prompts import DEFAULT_DIRECTIONS
from r1build.records import Candidate
from tests.generate.chat_server import Answer, ChatServer, Request
from tests.generate.gen_support import KEY, Project, answer, kernel_source
from tests.resolve.resolve_support import install_gpu_double

__all__ = ["INJECTION", "PRICES", "run_search"]

INJECTION = '<img src=x onerror="console.error(1)">'
"""Markup in a compiler error (model-written code chooses it): the report must show it as text."""

PRICES = {"input-per-mtok": 0.55, "output-per-mtok": 2.19}


def _time_us(candidate: Candidate) -> float:
    marker = re.search(r"// time_us: ([0-9.]+)", candidate.source)
    return float(marker.group(1)) if marker else 40.0  # the baseline has no marker


def run_search(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two rounds of three samples: round 0 gives a kernel at 30 µs, one that does not compile (its ``#error``
    holds :data:`INJECTION`) and one the GPU finds wrong; round 1 gives kernels at 20 µs and 25 µs and an answer
    without code, in that order of samples. The baseline takes 40 µs."""
    project.write(
        baseline=True, generation={"prices": PRICES}, budget={"rounds": 2, "samples": 3, "candidates": 6, "patience": 2}
    )
    install_gpu_double(monkeypatch, reject=lambda c: "// WRONG" in c.source, time_us=_time_us)

    answers = [
        Answer(answer(kernel_source(1, time_us=30.0)), reasoning="Coalesced loads, one element each."),
        Answer(answer(kernel_source(5, extra=f"#error {INJECTION}\n")), reasoning="Markup in an error."),
        Answer(answer(kernel_source(2, extra="// WRONG\n")), reasoning="A wrong one."),
        Answer(answer(kernel_source(3, time_us=20.0)), reasoning="Grid-stride loop, wider blocks."),
        Answer(answer(kernel_source(4, time_us=25.0)), reasoning="Vectorized float4."),
        Answer("I would explain it in words instead.", reasoning="No code this time."),
    ]

    def reply(request: Request) -> Answer:
        # sample s of round r asks for direction r * 3 + s (the provider ignores temperature): requests arrive in
        # any order, and each sample still gets its own answer
        k = next(
            i
            for i, d in enumerate(DEFAULT_DIRECTIONS)
            if f"attempt: {d}." in request.prompt or f"focusing on {d}." in request.prompt
        )
        return answers[k]

    with ChatServer(reply) as server:
        monkeypatch.setenv("R1BUILD_BASE_URL", server.url)
        monkeypatch.setenv("DEEPSEEK_API_KEY", KEY)
        code = main(["resolve", "--manifest", str(project.root), "--cache-dir", str(project.cache_dir)])
    monkeypatch.delenv("R1BUILD_BASE_URL")
    monkeypatch.delenv("DEEPSEEK_API_KEY")
    assert code == 0
