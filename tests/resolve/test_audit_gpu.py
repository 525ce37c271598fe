"""``r1build audit`` on a GPU of sm_90, through the real evaluator (:class:`~r1build.evaluate.GpuEvaluator`, made by
resolve's :class:`~r1build.resolve.judges.Judges`): the locked winner passes the current checks (its checks version
is brought up), then a staged checks-version bump with a test-only check that rejects every candidate demotes it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import r1build.evaluate.correctness.candidate as candidate_checks
from r1build.cache import Cache
from r1build.cli.main import main
from r1build.evaluate.correctness.plan import Verdict
from r1build.judge import CHECKS_VERSION
from r1build.lock import read_lock
from r1build.manifest import load_manifest
from r1build.resolve import audit as audit_module
from r1build.resolve import lookup
from r1build.resolve.audit import audit
from r1build.resolve.judges import Judges

TEST_ONLY = "a test-only check of the next checks version rejects every candidate"


def _audit(project: Path, cache_dir: Path) -> Any:
    m = load_manifest(project / "kernels.toml")
    with Cache(cache_dir) as cache:
        judges = Judges(cache, evaluate=None)
        try:
            return audit(m, cache, judges)
        finally:
            judges.close()


@pytest.mark.gpu
@pytest.mark.slow
def test_audit_passes_then_demotes_after_a_checks_version_bump(
    locked: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    first = _audit(locked, cache_dir)
    assert [r.verdict for r in first.rows] == ["passed"], first.rows
    entry = (read_lock(locked / "kernels.lock") or pytest.fail("no lock")).entry("silu_mul", "sm_90")
    assert entry is not None and entry.checks == CHECKS_VERSION and entry.demoted is None

    bumped = CHECKS_VERSION + 1
    for module in (audit_module, lookup):
        monkeypatch.setattr(module, "CHECKS_VERSION", bumped)

    def rejecting(*args: Any, **kwargs: Any) -> Verdict:
        return Verdict("rejected", TEST_ONLY)

    monkeypatch.setattr(candidate_checks, "shape_verdict", rejecting)
    second = _audit(locked, cache_dir)
    assert [r.verdict for r in second.rows] == ["demoted"] and second.lock_changed
    entry = (read_lock(locked / "kernels.lock") or pytest.fail("no lock")).entry("silu_mul", "sm_90")
    assert entry is not None and entry.demoted is not None
    assert f"GPU checks v{bumped}" in entry.demoted and TEST_ONLY in entry.demoted
    capsys.readouterr()
    assert main(["resolve", "-m", str(locked), "--locked", "--offline", "--cache-dir", str(cache_dir)]) == 2
    assert TEST_ONLY in capsys.readouterr().err
