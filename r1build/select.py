"""Select stage: the winner per arch from typed results, noise-aware.

Rules:
- only candidates whose result passed are eligible;
- with timings, the fastest wins only if its lead over an earlier eligible candidate is larger than the noise
  (the larger relative spread of the two, and at least ``min_lead``); otherwise the earlier one keeps it.
  Candidates are given in preference order (baseline, hand-written files, tuned variants, generated in order),
  so ties go to the simpler or earlier one;
- without timings (static gate only), the first eligible candidate in preference order wins.
"""

from __future__ import annotations

from collections.abc import Sequence

from .records import Candidate, Result

__all__ = ["MIN_LEAD", "select_winner"]

MIN_LEAD = 0.02
"""Smallest relative lead that counts as faster, whatever the measured spread."""


def _beats(challenger: Result, holder: Result, min_lead: float) -> bool:
    assert challenger.timing is not None and holder.timing is not None
    noise = max(challenger.timing.spread, holder.timing.spread, min_lead)
    return challenger.timing.median_us * (1.0 + noise) < holder.timing.median_us


def select_winner(candidates: Sequence[Candidate], results: Sequence[Result], *,
                  min_lead: float = MIN_LEAD) -> Candidate | None:
    """The winning candidate, or None when none passed. ``results[i]`` judges ``candidates[i]``."""
    if len(candidates) != len(results):
        raise ValueError("one result per candidate is needed")
    eligible = [(c, r) for c, r in zip(candidates, results, strict=True) if r.ok]
    if not eligible:
        return None
    timed = [(c, r) for c, r in eligible if r.timing is not None]
    if not timed:
        return eligible[0][0]
    best_c, best_r = timed[0]
    for c, r in timed[1:]:
        if _beats(r, best_r, min_lead):
            best_c, best_r = c, r
    return best_c
