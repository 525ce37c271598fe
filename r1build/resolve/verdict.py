"""The library verdict: is a winner faster than the library (the kernel's ``gpu-reference``, else the numpy
reference run on cupy arrays), and than torch (the faster of eager and ``torch.compile`` of the kernel's
``torch-reference``, where it names one)? Never silent when it is not: a measured winner slower than either is a
warning, and under ``must-beat`` (``library``, ``torch``, ``library-and-torch``) a winner short of the
``margin`` fails its kernel × arch as when no candidate may win (nothing is locked or emitted for it)."""

from __future__ import annotations

from ..manifest import Manifest
from ..records import CandidateOutcome, Unresolved
from .model import Resolved

__all__ = ["library_verdict", "verdict_words"]


def verdict_words(speedup: float | None, note: str | None = None, bar: str = "library") -> str:
    """The verdict in a few words: ``1.32x the library (faster)``, ``0.81x torch (slower)``, or why the bar
    has no time."""
    name = "the library" if bar == "library" else bar
    if speedup is None:
        return f"no time of {name}: {note}" if note else f"no time of {name}"
    return f"{speedup:.2f}x {name} ({'faster' if speedup >= 1 else 'slower'})"


def library_verdict(manifest: Manifest, r: Resolved) -> Unresolved | None:
    """:class:`Unresolved` when the winner ``r`` must beat the library or torch (``must-beat``) and does not (by
    the margin, or the bar's time is unknown); else None, with a warning (on ``r``'s kernel × arch) for each bar
    it is measured slower than. An unmeasured winner (the static gate alone) has no verdict yet."""
    if r.facts.time_us is None:
        return None
    bars = [("library", r.facts.speedup_vs_library, r.facts.library_note, manifest.must_beat_library(r.spec))]
    if r.spec.torch_reference is not None:
        bars.append(("torch", r.facts.speedup_vs_torch, r.facts.torch_note, manifest.must_beat_torch(r.spec)))
    margin, where = manifest.margin_of(r.spec), f"the {r.state} winner"
    for bar, speedup, note, must in bars:
        if must and (speedup is None or speedup < 1.0 + margin):
            return _unresolved(r, bar, speedup, note, (r.spec.must_beat or manifest.settings.must_beat, margin))
    for bar, speedup, _, must in bars:
        if not must and speedup is not None and speedup < 1.0:
            _note(
                r,
                f"{where} is slower than {_name(bar)}: {verdict_words(speedup, bar=bar)} on {r.facts.gpu or 'the GPU'}",
            )
    return None


def _name(bar: str) -> str:
    return "the library" if bar == "library" else bar


def _unresolved(r: Resolved, bar: str, speedup: float | None, note: str | None, rule: tuple[str, float]) -> Unresolved:
    """The failed kernel × arch of a winner short of ``bar`` (``library`` or ``torch``) under ``rule`` (the
    ``must-beat`` value and the margin)."""
    must_beat, margin = rule
    need = 1.0 + margin
    rule_words = f'must-beat = "{must_beat}" with margin {margin:g} needs at least {need:.2f}x {_name(bar)}'
    reason = f"{verdict_words(speedup, note, bar)}; {rule_words}"
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
    if speedup is not None:
        fix = 'add or generate a faster candidate, lower `margin`, or set `must-beat = "none"` for this kernel'
    elif bar == "torch":
        fix = (
            "install torch in the GPU worker's environment (or fix the `torch-reference`) and resolve on a GPU, "
            'or set `must-beat = "none"` for this kernel'
        )
    else:
        fix = (
            "name a `gpu-reference` written for cupy (the reference does not time on cupy) and resolve on a GPU, "
            'or set `must-beat = "none"` for this kernel'
        )
    return Unresolved(kernel=r.spec.name, arch=r.arch, outcomes=[row], fix=fix)


def _note(r: Resolved, message: str) -> None:
    from ..events import Note, emit

    emit(Note("warning", message, r.spec.name, r.arch))
