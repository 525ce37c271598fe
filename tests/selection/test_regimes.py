"""Two timing regimes: the manifest's ``timing-regime`` picks the one that ranks (ranking by ``idle-gaps``, only the
finalists timed in it compete), and a winner that the other regime would not pick is marked so. Results are made
as the GPU evaluator records them (no GPU here); ``timing-regime`` loads project-wide and per kernel and enters the
decision key only when it is not the default."""

from __future__ import annotations

from pathlib import Path

import pytest

from r1build.errors import ManifestError
from r1build.keys import decision_key
from r1build.manifest import load_manifest
from r1build.records import Candidate, Origin, Result, Timing
from r1build.selection.regimes import mark_regimes, select_in_regime
from r1build.selection.rules import select_winner


def _candidate(name: str) -> Candidate:
    return Candidate(f"// {name}\n", Origin("file", f"{name}.cu"))


def _timed(c: Candidate, back_to_back: float, idle: float | None = None) -> Result:
    regimes = {"back-to-back": back_to_back, **({"idle-gaps": idle} if idle is not None else {})}
    timing = Timing(median_us=back_to_back, spread=0.01, samples=200, regimes=regimes if idle else {})
    return Result(candidate=c.digest, arch="sm_90", status="passed", stage="evaluate", timing=timing, device="H200")


A, B, C = _candidate("a"), _candidate("b"), _candidate("c")


def test_back_to_back_ranks_as_before_and_marks_a_winner_idle_gaps_would_not_pick() -> None:
    results = [_timed(A, 10.0, 20.0), _timed(B, 12.0, 15.0)]
    assert select_in_regime([A, B], results, "back-to-back") is A is select_winner([A, B], results)
    marked = mark_regimes([A, B], results, "back-to-back")
    note = marked[0].timing.regime_note if marked[0].timing else None
    assert (
        note
        == f"wins back-to-back only: idle-gaps ranks {B.digest[:12]} first (15.00 us against this winner's 20.00 us)"
    )
    assert marked[1] == results[1]


def test_idle_gaps_ranks_the_finalists_by_their_idle_gaps_times() -> None:
    results = [_timed(A, 10.0, 20.0), _timed(B, 12.0, 15.0), _timed(C, 9.0)]  # C: no idle time, not a finalist
    assert select_in_regime([A, B, C], results, "idle-gaps") is B
    marked = mark_regimes([A, B, C], results, "idle-gaps")
    assert marked[1].timing is not None and marked[1].timing.regime_note is not None
    assert marked[1].timing.regime_note.startswith(f"wins idle-gaps only: back-to-back ranks {A.digest[:12]} first")
    assert marked[1].timing.median_us == 12.0  # the recorded time stays the back-to-back one


def test_one_winner_in_both_regimes_is_not_marked() -> None:
    results = [_timed(A, 10.0, 14.0), _timed(B, 12.0, 15.0)]
    assert mark_regimes([A, B], results, "back-to-back") == results
    assert mark_regimes([A, B], results, "idle-gaps") == results


def test_without_idle_gaps_times_the_back_to_back_times_rank_and_nothing_is_marked() -> None:
    results = [_timed(A, 12.0), _timed(B, 10.0)]
    assert select_in_regime([A, B], results, "idle-gaps") is B
    assert mark_regimes([A, B], results, "idle-gaps") == results


def test_a_lead_within_the_noise_is_no_win_in_either_regime() -> None:
    results = [_timed(A, 10.0, 15.1), _timed(B, 10.1, 15.0)]  # within MIN_LEAD: the first in preference order
    assert select_in_regime([A, B], results, "idle-gaps") is A
    assert mark_regimes([A, B], results, "back-to-back") == results


def test_timing_regime_loads_per_kernel_and_project_wide_and_keys_only_when_not_the_default(root_copy: Path) -> None:
    path = root_copy / "kernels.toml"
    before = load_manifest(path)
    text = path.read_text(encoding="utf-8")
    path.write_text(
        text.replace('target = "r1build::kernels"', 'target = "r1build::kernels"\ntiming-regime = "back-to-back"', 1),
        encoding="utf-8",
    )
    same = load_manifest(path)
    assert decision_key(same, same.kernel("rmsnorm"), "sm_90") == decision_key(
        before, before.kernel("rmsnorm"), "sm_90"
    )
    path.write_text(
        text.replace(
            'reference = "kernels.reference:rmsnorm"',
            'reference = "kernels.reference:rmsnorm"\ntiming-regime = "idle-gaps"',
            1,
        ),
        encoding="utf-8",
    )
    m = load_manifest(path)
    rms, silu = m.kernel("rmsnorm"), m.kernel("silu_mul")
    assert (m.timing_regime_of(rms), m.timing_regime_of(silu)) == ("idle-gaps", "back-to-back")
    assert decision_key(m, rms, "sm_90") != decision_key(before, before.kernel("rmsnorm"), "sm_90")
    assert decision_key(m, silu, "sm_90") == decision_key(before, before.kernel("silu_mul"), "sm_90")
    path.write_text(
        text.replace('target = "r1build::kernels"', 'target = "r1build::kernels"\ntiming-regime = "idle"', 1),
        encoding="utf-8",
    )
    with pytest.raises(ManifestError, match="timing-regime"):
        load_manifest(path)
