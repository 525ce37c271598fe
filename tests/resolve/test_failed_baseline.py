"""A baseline that fails the static gate is said, never passed over in silence: with another of the user's sources
winning in its place, `r1build lock` warns naming the baseline and the compiler's words (a fuzzer's baseline that
was no CUDA at all, `/etc/passwd`, went unnoticed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from r1build.cli.main import main
from tests.gate.gate_support import NEEDS_NVCC
from tests.manifest.test_manifest_strict import BASE, BASELINE, write_project

pytestmark = NEEDS_NVCC


def test_lock_says_the_baseline_failed_and_what_wins_instead(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = BASE.replace('baseline = "scale.cu"', 'baseline = "scale.cu"\ncandidates = ["other.cu"]', 1)
    path = write_project(tmp_path / "p", text)
    (path.parent / "scale.cu").write_text("this is no CUDA\n", encoding="utf-8")
    (path.parent / "other.cu").write_text(BASELINE, encoding="utf-8")
    assert main(["lock", "-m", str(path), "--cache-dir", str(tmp_path / "cache")]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "scale/sm_90: the baseline scale.cu failed the static gate (compile_error: scale.cu(1): error:" in err, err
    assert "other.cu wins in its place" in err, err
