"""The report's content as plain rows, from :func:`r1build.report.overview.project_records`: no HTML, no plotting.

- :func:`winner_row`: a kernel × arch's winner against its baseline, the cupy reference and the hardware floor;
- :func:`search_points`: every candidate of its decision in search order (seeds, then generated ones by round and
  sample) with its verdict, time and the best time so far;
- :func:`failure_groups`: failures of every decision grouped by status and reason;
- :func:`spend_row`: what a search spent (tokens, money at the manifest's prices, wall time) and why it stopped;
- :func:`provenance_row`: where a locked winner came from.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Sequence
from typing import Literal

from ..convert import field, record
from ..manifest.model import Prices
from ..profile.summary import profile_summary
from ..records import CandidateRef, Result, Status
from .overview import KernelRecords

__all__ = [
    "FailureGroup",
    "ProvenanceRow",
    "ReportVerdict",
    "SearchPoint",
    "SpendRow",
    "WinnerRow",
    "candidate_label",
    "failure_groups",
    "first_line",
    "provenance_row",
    "search_points",
    "spend_row",
    "verdict_of",
    "winner_row",
]

ReportVerdict = Literal["not judged", "passed on GPU", "passed gate"] | Status
"""How a result reads in the report: ``not judged``, ``passed on GPU``, ``passed gate``, or a failed
:data:`~r1build.records.Status` (``compile_error`` ...)."""


def verdict_of(result: Result | None) -> ReportVerdict:
    """One word for a result: how far it passed, or how it failed."""
    if result is None:
        return "not judged"
    if result.ok:
        return "passed on GPU" if result.stage == "evaluate" else "passed gate"
    return result.status


def first_line(detail: str, limit: int = 200) -> str:
    """A failed result's reason in one line of at most ``limit`` characters: its first error line (else its first
    line), from what the compiler or the checks said, without the command line, the return code or this
    machine's absolute paths (:func:`~r1build.generate.prompts.compiler_message`)."""
    from ..generate.prompts import compiler_message

    lines = [x.strip() for x in compiler_message(detail).splitlines() if x.strip()]
    line = next((x for x in lines if "error" in x.lower()), lines[0] if lines else "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def candidate_label(ref: CandidateRef) -> str:
    """``r1 s3`` for a generated candidate, ``baseline`` or the file's path for the user's own, with values."""
    o = ref.origin
    label = f"r{o.round} s{o.sample}" if o.kind == "generated" else (o.path or o.kind)
    if ref.defines:
        label += " " + ",".join(f"{k}={v}" for k, v in sorted(ref.defines.items()))
    return label


@record(frozen=True, kw_only=True)
class WinnerRow:
    """A kernel × arch's winner against its baseline, the cupy reference and the floor."""

    kernel: str
    arch: str
    state: str
    """The ``r1build status`` state."""
    provenance: str
    validation: str
    label: str
    """The winner as :func:`candidate_label` writes it (or the lock's words when the decision is gone)."""
    time_us: float | None
    baseline_us: float | None
    speedup_vs_baseline: float | None
    speedup_vs_cupy: float | None
    """The library's time over the winner's (the evaluator's ``speedup_vs_reference``; the lock's
    ``speedup-vs-library`` when no decision is cached)."""
    library_note: str | None = None
    """Why the winner has no speedup over the library (the library could not be timed on cupy)."""
    floor_us: float | None
    share_of_floor: float | None
    gpu: str | None
    device_bytes: int | None = None
    """The device code the winner adds for its arch (``r1build status``'s), where known."""


def winner_row(records: KernelRecords) -> WinnerRow:
    """The winner row of one kernel × arch."""
    status = records.status
    result = records.winner_result()
    timing = result.timing if result else None
    base = records.baseline_result()
    base_us = base.timing.median_us if base and base.timing else None
    time_us = timing.median_us if timing else status.facts.time_us
    speedup = timing.speedup_vs_baseline if timing else None
    if speedup is None and base_us and time_us:
        speedup = base_us / time_us
    ref = records.ref_of(result.candidate) if result else None
    entry = records.entry if records.current else None
    if ref is not None:
        label = candidate_label(ref)
    elif entry is not None:  # the lock's words, when no decision is cached
        label = f"r{entry.round} s{entry.sample}" if entry.provenance == "generated" else entry.origin or "-"
        label += "".join(f" {k}={v}" for k, v in sorted(entry.defines.items()))
    else:
        label = status.provenance or "-"
    return WinnerRow(
        kernel=status.kernel,
        arch=status.arch,
        state=status.state,
        provenance=status.provenance or "-",
        validation=status.validation or "-",
        label=label,
        time_us=time_us,
        baseline_us=base_us,
        speedup_vs_baseline=speedup,
        speedup_vs_cupy=timing.speedup_vs_reference if timing else status.facts.speedup_vs_library,
        library_note=timing.library_note if timing else status.facts.library_note,
        floor_us=timing.floor_us if timing else None,
        share_of_floor=timing.share_of_floor if timing else status.facts.share_of_floor,
        gpu=(result.device if result and result.device else None) or status.facts.gpu,
        device_bytes=status.device_bytes,
    )


@record(frozen=True, kw_only=True)
class SearchPoint:
    """One candidate of a decision, in search order."""

    index: int
    """Position in search order (0 is the first judged)."""
    label: str
    round: int | None
    """Generation round; None for the user's own sources (the seeds)."""
    sample: int | None
    variant: int
    """Index of this value set among the same answer's (0 for the first)."""
    provenance: str
    verdict: ReportVerdict
    time_us: float | None
    best_us: float | None
    """The fastest time among candidates that passed, up to and including this one."""
    share_of_floor: float | None
    reason: str
    """Why it failed, in one line; empty when it passed."""
    winner: bool
    profile: str = ""
    """Nsight Compute's findings in one line, for a profiled finalist."""


def search_points(records: KernelRecords) -> list[SearchPoint]:
    """Every candidate of the kernel × arch's decision in search order, with its verdict and the best so far."""
    decision = records.decision
    if decision is None:
        return []
    winner = records.winner_result()
    points = []
    best: float | None = None
    seen: dict[tuple[int | None, int | None], int] = {}
    for i, ref in enumerate(decision.candidates):
        result = decision.result_of(ref.digest)
        timing = result.timing if result and result.ok else None
        if timing is not None:
            best = timing.median_us if best is None else min(best, timing.median_us)
        o = ref.origin
        slot = (o.round, o.sample) if o.kind == "generated" else (None, None)
        variant = seen.get(slot, 0) if o.kind == "generated" else 0
        seen[slot] = variant + 1
        points.append(
            SearchPoint(
                index=i,
                label=candidate_label(ref),
                round=o.round if o.kind == "generated" else None,
                sample=o.sample if o.kind == "generated" else None,
                variant=variant,
                provenance=ref.provenance(),
                verdict=verdict_of(result),
                time_us=timing.median_us if timing else None,
                best_us=best,
                share_of_floor=timing.share_of_floor if timing else None,
                reason=first_line(result.detail) if result and not result.ok else "",
                winner=winner is not None and winner.candidate == ref.digest,
                profile=profile_summary(result.profile) if result and result.profile else "",
            )
        )
    return points


@record(frozen=True, kw_only=True)
class FailureGroup:
    """Failures that share a status and a reason."""

    status: str
    reason: str
    """The reason with numbers and file positions blanked, so alike failures group."""
    example: str
    """One failure's reason as it was."""
    count: int
    where: list[str] = field(default_factory=list)
    """``kernel/arch`` of each failure, distinct, in order."""


_POSITION = re.compile(r"^\S+?(?:\(\d+\)|:\d+(?::\d+)?): ")
_NUMBER = re.compile(r"(?<![A-Za-z_])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _reason_key(line: str) -> str:
    return _NUMBER.sub("#", _POSITION.sub("", line))


def failure_groups(all_records: Sequence[KernelRecords]) -> list[FailureGroup]:
    """Every failed result of every decision, grouped by status and reason, the largest groups first."""
    groups: dict[tuple[str, str], FailureGroup] = {}
    for records in all_records:
        if records.decision is None:
            continue
        where = f"{records.spec.name}/{records.arch}"
        for result in records.decision.results:
            if result.ok:
                continue
            line = first_line(result.detail) or "(no detail)"
            key = (result.status, _reason_key(line))
            group = groups.get(key)
            if group is None:
                groups[key] = FailureGroup(status=result.status, reason=key[1], example=line, count=1, where=[where])
                continue
            groups[key] = FailureGroup(
                status=group.status,
                reason=group.reason,
                example=group.example,
                count=group.count + 1,
                where=group.where if where in group.where else [*group.where, where],
            )
    return sorted(groups.values(), key=lambda g: (-g.count, g.status, g.reason))


@record(frozen=True, kw_only=True)
class SpendRow:
    """What one search spent."""

    kernel: str
    arch: str
    model: str
    samples: int
    requests: int
    prompt_tokens: int
    completion_tokens: int
    reasoning_tokens: int
    cost_usd: float
    """At the manifest's current ``[generation.prices]``."""
    wall_s: float
    """From the first sample's start to the last sample's end."""
    stop_reason: str
    cause: str


def _time(iso: str) -> float | None:
    try:
        return datetime.datetime.fromisoformat(iso).timestamp()
    except ValueError:
        return None


def spend_row(records: KernelRecords, prices: Prices) -> SpendRow | None:
    """The spend of the kernel × arch's search; None when no search is recorded."""
    search = records.search
    if search is None:
        return None
    samples = search.samples
    prompt = sum(s.prompt_tokens for s in samples)
    completion = sum(s.completion_tokens for s in samples)
    spans = [(t, t + s.elapsed_s) for s in samples if (t := _time(s.started)) is not None]
    wall = max(e for _, e in spans) - min(b for b, _ in spans) if spans else 0.0
    return SpendRow(
        kernel=records.spec.name,
        arch=records.arch,
        model=", ".join(sorted({s.model for s in samples if s.model})) or "-",
        samples=len(samples),
        requests=sum(s.requests for s in samples),
        prompt_tokens=prompt,
        completion_tokens=completion,
        reasoning_tokens=sum(s.reasoning_tokens for s in samples),
        cost_usd=(prompt * prices.input_per_mtok + completion * prices.output_per_mtok) / 1e6,
        wall_s=wall,
        stop_reason=search.stop_reason,
        cause=search.cause,
    )


@record(frozen=True, kw_only=True)
class ProvenanceRow:
    """Where a locked winner came from."""

    kernel: str
    arch: str
    current: bool
    """Whether the entry answers the manifest's current question (else the lock is stale there)."""
    provenance: str
    origin: str
    """The manifest path, or the model, round and sample."""
    defines: str
    validation: str
    time_us: float | None
    gpu: str | None
    checks: int | None
    toolchain: str | None
    winner: str
    """Variant digest."""
    key: str
    """Decision key."""


def provenance_row(records: KernelRecords) -> ProvenanceRow | None:
    """The provenance of the kernel × arch's lock entry; None when it has none."""
    e = records.entry
    if e is None:
        return None
    origin = f"{e.model} round {e.round} sample {e.sample}" if e.provenance == "generated" else (e.origin or "-")
    return ProvenanceRow(
        kernel=e.name,
        arch=e.arch,
        current=records.current,
        provenance=e.provenance,
        origin=origin,
        defines=",".join(f"{k}={v}" for k, v in sorted(e.defines.items())),
        validation=e.validation,
        time_us=e.time_us,
        gpu=e.gpu,
        checks=e.checks,
        toolchain=e.toolchain,
        winner=e.winner,
        key=e.key,
    )
