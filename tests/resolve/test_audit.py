"""``r1build audit``: every locked winner judged again on a GPU by the current checks; a winner they reject is
demoted (the lock entry keeps the reason, ``status`` shows it, ``--locked`` fails on it with exit 2), and without a
GPU nothing is audited (exit 2, never a pass). No GPU here: the demoted entry is planted as an audit writes it, and
the audit's own logic runs with a stand-in for the GPU evaluator (:class:`_Gpu`); tests/evaluate/test_audit_gpu.py
runs the real evaluator on a GPU."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from r1build.cache import Cache
from r1build.cli.main import main
from r1build.judge import CHECKS_VERSION, Evaluator, Job
from r1build.lock import Lock, read_lock, write_lock
from r1build.records import Result, Status, Timing
from r1build.resolve.audit import audit
from r1build.resolve.judges import Judges

from ..conftest import gpu_count

REASON = "GPU checks v3 on NVIDIA H200 rejected it (wrong-output: output 'y' differs at 3 of 4096 elements)"
CACHE = ["--cache-dir"]


def _demote(project: Path) -> None:
    """The lock's silu_mul/sm_90 entry demoted, as ``r1build audit`` writes it."""
    path = project / "kernels.lock"
    lock = read_lock(path) or pytest.fail("no lock")
    kernel = [dataclasses.replace(e, demoted=REASON) if e.name == "silu_mul" else e for e in lock.kernel]
    write_lock(path, Lock(version=lock.version, manifest=lock.manifest, kernel=kernel))


@pytest.mark.slow
def test_a_demoted_entry_round_trips_shows_in_status_and_fails_locked(
    locked: Path, cache_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _demote(locked)
    entry = (read_lock(locked / "kernels.lock") or pytest.fail("no lock")).entry("silu_mul", "sm_90")
    assert entry is not None and entry.demoted == REASON
    assert f'demoted = "{REASON}"' in (locked / "kernels.lock").read_text(encoding="utf-8")
    capsys.readouterr()
    assert main(["status", "-m", str(locked), *CACHE, str(cache_dir), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["kernels"][0]
    assert row["state"] == "locked, refused" and row["demoted"] == REASON
    assert f"`r1build audit` demoted it: {REASON}" in row["note"]
    for command in (["resolve", "--offline", "--no-gpu"], ["check"]):
        code = main([*command[:1], "-m", str(locked), "--locked", *command[1:], *CACHE, str(cache_dir)])
        err = capsys.readouterr().err
        assert code == 2, (command, err)
        assert "silu_mul/sm_90" in err and REASON in err and "Traceback" not in err, err


@pytest.mark.slow
@pytest.mark.skipif(gpu_count() > 0, reason="a GPU is visible: the audit would run")
def test_audit_without_a_gpu_says_so_and_exits_2(
    locked: Path, cache_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = (locked / "kernels.lock").read_bytes()
    assert main(["audit", "-m", str(locked), *CACHE, str(cache_dir)]) == 2
    err = capsys.readouterr().err
    assert "nothing was audited" in err and "sm_90" in err and "Traceback" not in err, err
    assert (locked / "kernels.lock").read_bytes() == before  # no pass recorded, no checks version moved


class _Gpu:
    """Stands in for the GPU evaluator of sm_90 where there is none: every candidate gets ``status``."""

    def __init__(self, status: Status) -> None:
        self.status = status
        self.jobs: list[Job] = []

    def evaluate(self, job: Job) -> list[Result]:
        self.jobs.append(job)
        timing = Timing(median_us=40.0, spread=0.01, samples=50) if self.status == "passed" else None
        detail = "" if self.status == "passed" else "output 'y' differs at 3 of 4096 elements\nmore"
        return [
            Result(
                candidate=c.digest,
                arch=job.arch,
                status=self.status,
                stage="evaluate",
                detail=detail,
                timing=timing,
                device="NVIDIA H200",
            )
            for c in job.candidates
        ]


class _Judges(Judges):
    def __init__(self, cache: Cache, gpu: _Gpu) -> None:
        super().__init__(cache, evaluate=None)
        self.gpu = gpu

    def gpu_for(self, arch: str) -> Evaluator | None:
        return self.gpu if arch == "sm_90" else None

    def prepare(self, jobs: Sequence[Job]) -> None:
        pass


@pytest.mark.slow
def test_audit_demotes_a_winner_the_checks_reject_and_records_it_in_the_cache(
    locked: Path, cache_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from r1build.manifest import load_manifest

    m = load_manifest(locked / "kernels.toml")
    gpu = _Gpu("incorrect")
    with Cache(cache_dir) as cache:
        found = audit(m, cache, _Judges(cache, gpu))
        entry = (read_lock(locked / "kernels.lock") or pytest.fail("no lock")).entry("silu_mul", "sm_90")
        assert entry is not None
        decision = cache.get_decision(entry.key)
    assert found.lock_changed and [r.verdict for r in found.rows] == ["demoted"]
    assert [c.digest for c in gpu.jobs[0].candidates] == [entry.winner]  # the locked winner itself, judged
    assert entry.demoted is not None and entry.demoted.startswith(f"GPU checks v{CHECKS_VERSION} on NVIDIA H200")
    assert "incorrect: output 'y' differs" in entry.demoted and "more" not in entry.demoted
    assert decision is not None and decision.validation(decision.candidates[0]) == "rejected"
    # a second audit judges nothing again: the demotion stands until resolve decides again
    capsys.readouterr()
    with Cache(cache_dir) as cache:
        again = audit(m, cache, _Judges(cache, _Gpu("passed")))
    assert [r.verdict for r in again.rows] == ["demoted"] and not again.lock_changed


@pytest.mark.slow
def test_audit_of_a_winner_that_passes_brings_its_checks_version_up(locked: Path, cache_dir: Path) -> None:
    from r1build.manifest import load_manifest

    m = load_manifest(locked / "kernels.toml")
    with Cache(cache_dir) as cache:
        found = audit(m, cache, _Judges(cache, _Gpu("passed")))
    entry = (read_lock(locked / "kernels.lock") or pytest.fail("no lock")).entry("silu_mul", "sm_90")
    assert entry is not None and entry.checks == CHECKS_VERSION and entry.demoted is None
    assert [(r.verdict, r.time_us, r.checks) for r in found.rows] == [("passed", 40.0, 0)]
