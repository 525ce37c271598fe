"""One record of a winner's facts (time, GPU, checks, library and floor figures) for the resolver, the lock and
the status rows: each is copied from one :class:`~r1build.records.WinnerFacts`, never field by field."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from r1build.lock import LockEntry
from r1build.manifest import load_manifest
from r1build.records import Candidate, CandidateRef, Origin, WinnerFacts
from r1build.report.overview import StatusRow
from r1build.resolve import Resolved

FACTS = WinnerFacts(time_us=12.5, gpu="H100", checks=3, speedup_vs_library=1.25, share_of_floor=0.5, library_note=None)


def test_the_resolver_and_the_status_rows_hold_the_facts_as_one_record() -> None:
    names = {f.name for f in dataclasses.fields(WinnerFacts)}
    assert names == {
        "time_us",
        "gpu",
        "checks",
        "speedup_vs_library",
        "share_of_floor",
        "library_note",
        "speedup_vs_torch",
        "torch_note",
        "idle_gaps_us",
        "regime_note",
    }
    for record in (Resolved, StatusRow):
        fields = {f.name: f for f in dataclasses.fields(record)}
        assert "facts" in fields and not names & set(fields), record


def test_a_lock_entry_gives_back_the_facts_it_was_made_with() -> None:
    manifest = load_manifest(Path(__file__).resolve().parents[2] / "kernels.toml", check_references=False)
    spec = manifest.kernels[0]
    winner = CandidateRef.of(Candidate("__global__ void k() {}", Origin("baseline", path="k.cu")))
    entry = LockEntry.of_winner(
        manifest, spec, "sm_90", "a" * 64, winner, validation="validated", toolchain="nvcc 13.0", facts=FACTS
    )
    assert entry.facts == FACTS and entry.winner == winner.digest and entry.provenance == "baseline"
    assert (entry.time_us, entry.gpu, entry.checks) == (12.5, "H100", 3)


def test_the_library_figures_go_with_a_time_only() -> None:
    untimed = dataclasses.replace(FACTS, time_us=None).measured()
    assert (untimed.speedup_vs_library, untimed.share_of_floor, untimed.library_note) == (None, None, None)
    assert FACTS.measured() == FACTS
