"""The library verdict: is a winner faster than the library (the kernel's ``gpu-reference``, else the numpy
reference run on cupy arrays)? Never silent when it is not: a measured winner slower than the library is a
warning, and under ``must-beat = "library"`` a winner short of the ``margin`` fails its kernel × arch as when no
candidate may win (nothing is locked or emitted for it)."""

from __future__ import annotations

from ..manifest import Manifest
from ..records import CandidateOutcome, Unresolved
from .model import Resolved

__all__ = ["library_verdict", "verdict_words"]


def verdict_words(speedup: float | None, note: str | None = None) -> str:
    """The verdict in a few words: ``1.32x the library (faster)``, ``0.81x the library (slower)``, or why the
    library has no time."""
    if speedup is None:
        return f"no time of the library: {note}" if note else "no time of the library"
    return f"{speedup:.2f}x the library ({'faster' if speedup >= 1 else 'slower'})"


def library_verdict(manifest: Manifest, r: Resolved) -> Unresolved | None:
    """:class:`Unresolved` when the winner ``r`` must beat the library and does not (by the margin, or the
    library's time is unknown); else None, with a warning (on ``r``'s kernel × arch) when it is measured slower
    than the library. An unmeasured winner (the static gate alone) has no verdict yet."""
    if r.facts.time_us is None:
        return None
    speedup, margin = r.facts.speedup_vs_library, manifest.margin_of(r.spec)
    where = f"the {r.state} winner"
    if not manifest.must_beat_library(r.spec):
        if speedup is not None and speedup < 1.0:
            _note(r, f"{where} is slower than the library: {verdict_words(speedup)} on {r.facts.gpu or 'the GPU'}")
        return None
    need = 1.0 + margin
    if speedup is not None and speedup >= need:
        return None
    bar = f'must-beat = "library" with margin {margin:g} needs at least {need:.2f}x'
    reason = f"{verdict_words(speedup, r.facts.library_note)}; {bar}"
    c = r.candidate
    row = CandidateOutcome(
        candidate=c.digest,
        provenance=r.provenance,
        origin=c.origin.path or c.origin.model or c.origin.kind,
        validation="rejected",
        stage="evaluate",
        status="rejected",
        reason=reason,
    )
    fix = (
        'add or generate a faster candidate, lower `margin`, or set `must-beat = "none"` for this kernel'
        if speedup is not None
        else "name a `gpu-reference` written for cupy (the reference does not time on cupy) and resolve on a GPU, "
        'or set `must-beat = "none"` for this kernel'
    )
    return Unresolved(kernel=r.spec.name, arch=r.arch, outcomes=[row], fix=fix)


def _note(r: Resolved, message: str) -> None:
    from ..events import Note, emit

    emit(Note("warning", message, r.spec.name, r.arch))
