"""What the resolving machine checks of everything a worker sends back, before it is cached or decided on.

A worker runs the same judges as this machine, but what arrives is only what it says: a worker with a bug, a
stale install that passed the survey, or one in the hands of someone else may send results for other candidates
or archs, gate verdicts under keys it was not asked about, or payloads no judge writes. Each check here holds for
every result a local judge returns; what fails one is refused with the worker named, and nothing of it is kept.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import get_args

from ..judge import Job
from ..manifest.archs import parse_arch
from ..records import JudgeStage, Result, Status, Timing, to_json
from .tasks import JobOutcome

__all__ = ["MAX_RESULT_BYTES", "gate_verdict_problem", "outcome_problem"]

MAX_RESULT_BYTES = 1 << 20
"""Largest result a worker may send (its JSON): far above what a judge writes (a detail is cut to 4000
characters, a compiler's output to its last 4000)."""

_STATUSES = frozenset(get_args(Status))
_STAGES = frozenset(get_args(JudgeStage))
_GATE_STATUSES = frozenset({"passed", "compile_error", "rejected"})


def _timing_problem(timing: Timing) -> str | None:
    if not isinstance(timing, Timing):
        return f"a timing that is a {type(timing).__name__}"
    if not (isinstance(timing.median_us, int | float) and math.isfinite(timing.median_us) and timing.median_us > 0):
        return f"a median time of {timing.median_us!r} us"
    if not (isinstance(timing.spread, int | float) and math.isfinite(timing.spread) and timing.spread >= 0):
        return f"a spread of {timing.spread!r}"
    if not (isinstance(timing.samples, int) and timing.samples > 0):
        return f"{timing.samples!r} samples"
    return None


def _result_problem(result: object, candidate: str, arch: str) -> str | None:
    """Why ``result`` is no result a judge gives for ``candidate`` on ``arch`` (canonical), or None."""
    if not isinstance(result, Result):
        return f"a {type(result).__name__} where a result belongs"
    if result.candidate != candidate:
        return f"a result for candidate {str(result.candidate)[:12]!r} where {candidate[:12]}'s belongs"
    try:
        judged_for = parse_arch(result.arch)
    except (ValueError, TypeError):
        judged_for = None
    if judged_for != arch:
        return f"a result of candidate {candidate[:12]} judged for {result.arch!r}, not {arch}"
    if result.status not in _STATUSES or result.stage not in _STAGES:
        return f"a result of candidate {candidate[:12]} with status {result.status!r} at stage {result.stage!r}"
    if result.stage == "evaluate" and result.ok and (result.timing is None or not result.device):
        return f"a result of candidate {candidate[:12]} passed on a GPU with no time measured or no GPU named"
    if result.timing is not None:
        problem = _timing_problem(result.timing)
        if problem is not None:
            return f"a result of candidate {candidate[:12]} with {problem}"
    try:
        size = len(to_json(result))
    except (TypeError, ValueError) as exc:
        return f"a result of candidate {candidate[:12]} that cannot be stored ({exc})"
    if size > MAX_RESULT_BYTES:
        return f"a result of candidate {candidate[:12]} of {size >> 10} KiB (at most {MAX_RESULT_BYTES >> 10} KiB)"
    return None


def gate_verdict_problem(verdict: object, candidate: str, arch: str, toolchain: str) -> str | None:
    """Why ``verdict`` is no static-gate verdict of ``candidate`` on ``arch`` compiled by ``toolchain`` (nvcc's
    identity here), as :class:`~r1build.gate.static.StaticGate` gives and caches it; None when it is one."""
    problem = _result_problem(verdict, candidate, arch)
    if problem is not None:
        return problem
    assert isinstance(verdict, Result)
    if verdict.stage != "gate" or verdict.status not in _GATE_STATUSES or verdict.timing is not None:
        return f"a gate verdict of candidate {candidate[:12]} with status {verdict.status!r} at stage {verdict.stage!r}"
    if verdict.toolchain != toolchain:
        return f"a gate verdict of candidate {candidate[:12]} compiled by nvcc {verdict.toolchain!r}, not {toolchain}"
    return None


def outcome_problem(job: Job, outcome: object, gate_keys: Sequence[str], toolchain: str) -> str | None:
    """Why ``outcome`` is not what the local GPU evaluator gives for ``job`` (one result per candidate, in order,
    each of its candidate and arch), with gate verdicts only under ``gate_keys`` (the keys of the job's candidates,
    in order) and each of its key's candidate; None when it is."""
    if not isinstance(outcome, JobOutcome):
        return f"a {type(outcome).__name__} where a job's outcome belongs"
    arch = parse_arch(job.arch)
    results = outcome.results
    if not isinstance(results, list) or len(results) != len(job.candidates):
        count = len(results) if isinstance(results, list) else type(results).__name__
        return f"{count} results for {len(job.candidates)} candidates"
    for candidate, result in zip(job.candidates, results, strict=True):
        problem = _result_problem(result, candidate.digest, arch)
        if problem is not None:
            return problem
    if not isinstance(outcome.gates, dict):
        return f"gate verdicts that are a {type(outcome.gates).__name__}"
    asked = dict(zip(gate_keys, job.candidates, strict=True))
    for key, verdict in outcome.gates.items():
        if key not in asked:
            return f"a gate verdict under key {str(key)[:16]!r}, which is none of the job's"
        problem = gate_verdict_problem(verdict, asked[key].digest, arch, toolchain)
        if problem is not None:
            return problem
    return None
