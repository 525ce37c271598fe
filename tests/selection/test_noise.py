"""r1build.selection.noise: median, spread and the median's standard error, the numbers that decide both when the GPU
worker
stops sampling a shape and whether one candidate beats another."""

from __future__ import annotations

import random

import numpy as np
import pytest

from r1build.selection.noise import STOP_ERROR, median_and_spread, median_error, settled


@pytest.mark.parametrize("n", [1, 2, 3, 10, 20, 21, 199, 200])
def test_median_and_spread_are_numpys(n: int) -> None:
    rng = random.Random(n)
    samples = [rng.lognormvariate(3.0, 0.2) for _ in range(n)]
    median, spread = median_and_spread(samples)
    p10, p90 = np.percentile(samples, [10, 90])
    assert median == pytest.approx(float(np.median(samples)), rel=1e-12)
    assert spread == pytest.approx(float((p90 - p10) / np.median(samples)), rel=1e-9, abs=1e-15)


def test_no_samples_and_a_zero_median() -> None:
    with pytest.raises(ValueError, match="no samples"):
        median_and_spread([])
    assert median_and_spread([0.0, 0.0, 1.0]) == (0.0, 0.0)
    assert not settled([0.0] * 40, 20)  # a median of zero is never known to a relative error


def test_a_steady_slow_kernel_settles_at_the_least_number_a_noisy_fast_one_does_not() -> None:
    rng = random.Random(7)
    steady = [5800.0 * (1 + rng.gauss(0, 0.001)) for _ in range(20)]  # a 5.8 ms matmul, 0.1% jitter
    noisy = [45.0 * (1 + abs(rng.gauss(0, 0.03))) for _ in range(200)]  # single cold launches of a 45 us kernel
    assert settled(steady, 20)
    assert not settled(steady[:19], 20)  # never before the least number
    assert not settled(noisy, 20)
    _, spread = median_and_spread(noisy)
    assert median_error(spread, len(noisy)) > STOP_ERROR
    assert settled(noisy, 20, error=0.01)  # a looser target is met


def test_the_error_shrinks_with_the_root_of_the_samples() -> None:
    assert median_error(0.05, 100) == pytest.approx(median_error(0.05, 25) / 2)
    assert median_error(0.05, 0) == median_error(0.05, 1)
