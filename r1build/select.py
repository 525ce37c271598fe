"""Select stage: the winner per arch from typed results, noise-aware.

Rules:
- only candidates whose result passed are eligible;
- with timings, find the fastest; the winner is the *earliest* eligible candidate (in preference order) that the
  fastest does not beat by more than the noise, where the noise of a comparison is the larger relative spread of
  the two and at least ``min_lead``. So the fastest wins only when its lead over every earlier candidate is
  larger than the noise, and a tie goes to the simpler or earlier one. Candidates are given in preference order
  (baseline, hand-written files, tuned variants, generated in order);
- candidates that passed without a timing (no GPU measured them) only win when none was timed;
- without timings (static gate only), the first eligible candidate in preference order wins.
"""

from __future__ import annotations

from collections.abc import Sequence

from .records import Candidate, Result

__all__ = ["MIN_LEAD", "beats", "select_winner"]

MIN_LEAD = 0.02
"""Smallest relative lead that counts as faster, whatever the measured spread."""


def beats(challenger: Result, holder: Result, min_lead: float = MIN_LEAD) -> bool:
    """Whether ``challenger`` is faster than ``holder`` by more than the noise of the two measurements."""
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
    fastest = min(timed, key=lambda cr: cr[1].timing.median_us if cr[1].timing else float("inf"))[1]
    for c, r in timed:
        if r is fastest or not beats(fastest, r, min_lead):
            return c
    return None  # unreachable: the fastest does not beat itself
