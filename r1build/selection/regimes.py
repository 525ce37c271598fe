"""Two timing regimes, and which one ranks.

Every timed candidate has its back-to-back time (``Timing.median_us``: calls one after another, what the worker
measures today). A search's finalists are also timed with idle gaps between calls and a cold L2 (as a serving
engine calls a kernel now and then); both medians go into ``Timing.regimes``. The manifest's ``timing-regime``
picks the one that ranks (:func:`select_in_regime`): ranking by ``idle-gaps``, only the candidates timed in it (the
finalists) may win. A winner that the other regime would not pick is marked (``Timing.regime_note``,
:func:`mark_regimes`), so a winner that wins in one regime only is never shown as a plain win.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..convert import replace
from ..manifest.model import TimingRegime
from ..records import Result, note_line
from .rules import MIN_LEAD, C, select_winner

__all__ = ["BACK_TO_BACK", "IDLE_GAPS", "in_regime", "mark_regimes", "regime_time", "select_in_regime"]

BACK_TO_BACK: TimingRegime = "back-to-back"
IDLE_GAPS: TimingRegime = "idle-gaps"


def regime_time(result: Result, regime: TimingRegime) -> float | None:
    """``result``'s median in ``regime``: its recorded one, else (back to back) its median; None when not timed
    in it."""
    t = result.timing
    if t is None:
        return None
    if regime in t.regimes:
        return t.regimes[regime]
    return t.median_us if regime == BACK_TO_BACK else None


def in_regime(result: Result, regime: TimingRegime) -> Result:
    """``result`` with its median the one of ``regime`` (as it is where it has none)."""
    t, time = result.timing, regime_time(result, regime)
    if t is None or time is None or time == t.median_us:
        return result
    return replace(result, timing=replace(t, median_us=time))


def _timed_in(results: Sequence[Result], regime: TimingRegime) -> list[bool]:
    return [r.timing is None or regime_time(r, regime) is not None for r in results]


def select_in_regime(
    candidates: Sequence[C], results: Sequence[Result], regime: TimingRegime, *, min_lead: float = MIN_LEAD
) -> C | None:
    """The winner when ``regime`` ranks: :func:`~.rules.select_winner` over the times of that regime. Ranking by
    ``idle-gaps``, a timed candidate without an idle-gaps time (not a finalist) does not compete; where no
    candidate has one (no GPU timed finalists in it), the back-to-back times rank."""
    if regime == BACK_TO_BACK or not any(r.timing is not None and regime in r.timing.regimes for r in results):
        return select_winner(candidates, results, min_lead=min_lead)
    keep = _timed_in(results, regime)
    pairs = [(c, in_regime(r, regime)) for c, r, k in zip(candidates, results, keep, strict=True) if k]
    return select_winner([c for c, _ in pairs], [r for _, r in pairs], min_lead=min_lead)


def mark_regimes(
    candidates: Sequence[C], results: Sequence[Result], ranking: TimingRegime, *, min_lead: float = MIN_LEAD
) -> list[Result]:
    """``results`` with the winner's ``regime_note`` set when the other regime would pick another candidate
    (among those timed in both); unchanged otherwise."""
    out = list(results)
    other: TimingRegime = IDLE_GAPS if ranking == BACK_TO_BACK else BACK_TO_BACK
    if not any(r.timing is not None and IDLE_GAPS in r.timing.regimes for r in results):
        return out  # no finalist was timed with idle gaps: one regime only
    winner = select_in_regime(candidates, results, ranking, min_lead=min_lead)
    keep = [r.timing is not None and IDLE_GAPS in r.timing.regimes for r in results]
    both = [(c, r) for c, r, k in zip(candidates, results, keep, strict=True) if k]
    rival = select_in_regime([c for c, _ in both], [r for _, r in both], other, min_lead=min_lead)
    if winner is None or rival is None or rival is winner or winner not in [c for c, _ in both]:
        return out
    i, j = list(candidates).index(winner), list(candidates).index(rival)
    mine, theirs = regime_time(results[i], other), regime_time(results[j], other)
    timing = results[i].timing
    assert timing is not None and mine is not None and theirs is not None
    note = (
        f"wins {ranking} only: {other} ranks {_label(rival)} first ({theirs:.2f} us against this winner's "
        f"{mine:.2f} us)"
    )
    out[i] = replace(results[i], timing=replace(timing, regime_note=note_line(note)))
    return out


def _label(candidate: object) -> str:
    digest = getattr(candidate, "digest", None)
    return str(digest)[:12] if digest is not None else repr(candidate)
