"""The noise of a timing: the p10-p90 spread of its samples and the standard error of their median.

One definition for the three places that need it: the GPU worker, which stops sampling a shape once its median is
known well enough (:data:`STOP_ERROR`); the evaluator, which records median and spread
(:func:`~r1build.evaluate.timing.stats.summarize`); and the selection, which compares two medians by their errors
(:func:`~r1build.selection.rules.beats`). Pure Python (the worker imports it; a locked build has no numpy).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["STOP_ERROR", "median_and_spread", "median_error", "settled"]

STOP_ERROR = 0.001
"""A shape's sampling stops once the standard error of its median is this small (relative; after the request's
least number of samples and a tenth of its time budget, in the worker): three of them, the noise of a comparison
(:func:`~r1build.selection.rules.beats`), are 0.3%, far under the 2% lead a winner needs anyway
(:data:`~r1build.selection.rules.MIN_LEAD`), so more samples could change no winner. A slow, steady kernel (a 5 ms
matmul, spread 0.2%) gets there at the least number; a 40 us one with single cold launches (spread 5%) takes every
sample its budget allows."""


def median_error(spread: float, samples: int) -> float:
    """Relative standard error of a median from its relative p10-p90 ``spread`` over ``samples`` samples (the
    p10-p90 width of a normal distribution is 2.56 standard deviations; a median's error is 1.25 times the
    mean's)."""
    return 1.2533 * (spread / 2.5631) / math.sqrt(max(1, samples))


def _percentile(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile of sorted values, interpolated linearly between the two nearest (numpy's default)."""
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def median_and_spread(samples: Sequence[float]) -> tuple[float, float]:
    """The median of ``samples`` and their relative spread, (p90 - p10) / median (0 for a median of 0)."""
    if not samples:
        raise ValueError("no samples")
    import statistics  # here: a run that reads its answers measures nothing

    ordered = sorted(samples)
    median = statistics.median(ordered)
    spread = (_percentile(ordered, 0.9) - _percentile(ordered, 0.1)) / median if median > 0 else 0.0
    return median, spread


def settled(samples: Sequence[float], least: int, error: float = STOP_ERROR) -> bool:
    """Whether ``samples`` (at least ``least`` of them) know their median to a relative standard error of
    ``error``."""
    if len(samples) < max(2, least):
        return False
    median, spread = median_and_spread(samples)
    return median > 0 and median_error(spread, len(samples)) <= error
