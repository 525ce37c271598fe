"""Selection: fastest correct candidate whose lead exceeds the noise; ties to the earlier one."""

from __future__ import annotations

import pytest

from r1build.records import Candidate, Origin, Result, Status, Timing
from r1build.selection.rules import select_winner


def cand(i: int) -> Candidate:
    return Candidate(source=f"// {i}", origin=Origin("file", f"k{i}.cu"))


def res(c: Candidate, us: float | None, spread: float = 0.005, status: Status = "passed", samples: int = 50) -> Result:
    timing = Timing(median_us=us, spread=spread, samples=samples) if us is not None else None
    return Result(candidate=c.digest, arch="sm_90", status=status, stage="evaluate", timing=timing)


def test_fastest_wins_only_beyond_the_noise() -> None:
    cs = [cand(i) for i in range(4)]
    assert select_winner(cs, [res(cs[0], 100), res(cs[1], 90), res(cs[2], 99), res(cs[3], 95)]) is cs[1]
    # 1.5% faster is inside the 2% minimum lead: the earlier one keeps it
    assert select_winner(cs[:2], [res(cs[0], 100), res(cs[1], 98.5)]) is cs[0]
    # a noisy measurement of few samples widens the band (its median is uncertain)...
    assert select_winner(cs[:2], [res(cs[0], 100, spread=1.0), res(cs[1], 90)]) is cs[0]
    # ... but single launches that scatter by 5% over 200 samples give a median good to well under 1%: a 4% lead
    # counts
    assert (
        select_winner(cs[:2], [res(cs[0], 100, spread=0.05, samples=200), res(cs[1], 96, spread=0.05, samples=200)])
        is cs[1]
    )
    # the earliest candidate tied with the fastest wins, not the fastest itself
    assert select_winner(cs[:3], [res(cs[0], 100), res(cs[1], 95), res(cs[2], 94)]) is cs[1]


def test_failures_and_untimed() -> None:
    cs = [cand(i) for i in range(3)]
    assert select_winner(cs, [res(cs[0], 10, status="incorrect"), res(cs[1], 50), res(cs[2], None)]) is cs[1]
    assert select_winner(cs, [res(cs[0], None, status="crashed")] * 3) is None
    gated = [Result(candidate=c.digest, arch="sm_90", status="passed", stage="gate") for c in cs]
    assert select_winner(cs, gated) is cs[0]  # no GPU measured any: the first in preference order
    with pytest.raises(ValueError):
        select_winner(cs, [])


@pytest.mark.parametrize("us", [None, 0.0, -1.0, float("nan"), float("inf")])
def test_no_time_never_wins(us: float | None) -> None:
    """Issue 27: a candidate timed at 0.0 us won, and the resolve then refused its own decision (a winner validated
    on a GPU with no time). A result validated on a GPU wins only with a time above zero; one without never does,
    even alone (:func:`~r1build.selection.rules.decision_problem` would refuse it)."""
    cs = [cand(i) for i in range(2)]
    assert select_winner(cs, [res(cs[0], 6.63), res(cs[1], us)]) is cs[0]
    assert select_winner(cs[1:], [res(cs[1], us)]) is None
