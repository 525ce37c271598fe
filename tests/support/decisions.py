"""A measured decision: a GPU run's record of one winner and its time, planted in a cache as resolve finds it."""

from __future__ import annotations

from r1build.cache import Cache
from r1build.records import Candidate, CandidateRef, Decision, Result, Timing

GPU = "NVIDIA H200"
"""The device a planted decision says it was measured on, unless told."""


def measured_result(
    candidate: str,
    time_us: float,
    *,
    arch: str = "sm_90",
    device: str | None = GPU,
    samples: int = 50,
    spread: float = 0.01,
) -> Result:
    """The result of candidate digest ``candidate`` passing the GPU checks with a median of ``time_us``."""
    return Result(
        candidate=candidate,
        arch=arch,
        status="passed",
        stage="evaluate",
        timing=Timing(median_us=time_us, spread=spread, samples=samples),
        device=device,
    )


def measured_decision(
    winner: Candidate | CandidateRef,
    *,
    key: str,
    kernel: str,
    time_us: float = 1.0,
    arch: str = "sm_90",
    device: str | None = GPU,
    checks: int | None = None,
    toolchain: str = "",
    samples: int = 50,
    spread: float = 0.01,
    result: Result | None = None,
) -> Decision:
    """A measured decision whose one candidate and winner is ``winner``, timed at ``time_us`` (or judged by
    ``result``)."""
    ref = winner if isinstance(winner, CandidateRef) else CandidateRef.of(winner)
    if result is None:
        result = measured_result(ref.digest, time_us, arch=arch, device=device, samples=samples, spread=spread)
    return Decision(
        key=key,
        kernel=kernel,
        arch=arch,
        winner=ref,
        candidates=[ref],
        results=[result],
        measured=True,
        device=device,
        toolchain=toolchain,
        checks=checks,
    )


def plant_measured(
    cache: Cache,
    winner: Candidate,
    *,
    key: str,
    kernel: str,
    time_us: float = 1.0,
    arch: str = "sm_90",
    device: str | None = GPU,
    checks: int | None = None,
    toolchain: str = "",
    samples: int = 50,
    result: Result | None = None,
) -> Decision:
    """Store ``winner``'s source and the :func:`measured_decision` of it in ``cache``; the decision."""
    cache.put_text(winner.source)
    decision = measured_decision(
        winner,
        key=key,
        kernel=kernel,
        time_us=time_us,
        arch=arch,
        device=device,
        checks=checks,
        toolchain=toolchain,
        samples=samples,
        result=result,
    )
    cache.put_decision(decision)
    return decision
