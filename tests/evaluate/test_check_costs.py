"""Where the checks' time goes: each call's seconds in the worker counted under its check's name (statistics only,
so a reply a candidate tampered with is counted no further than its sane parts)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from r1build.evaluate.child.time_op import _Laps
from r1build.evaluate.correctness.candidate import _count_calls


def _plan(*checks: tuple[str, str]) -> Any:
    return SimpleNamespace(calls=[SimpleNamespace(mode=mode, dist=dist) for mode, dist in checks])


def _counted(plan: Any, reply: Any) -> dict[str, float]:
    got: dict[str, float] = {}

    def count(name: str, value: float) -> None:
        got[name] = got.get(name, 0.0) + value

    _count_calls(plan, cast(Any, reply), count)
    return got


def test_calls_are_counted_by_check() -> None:
    plan = _plan(("capture", "signed"), ("direct", "signed"), ("direct", "precision"), ("aligned", "large"))
    reply = {"ok": True, "calls": [{"seconds": 0.5}, {"seconds": 0.25}, {"seconds": 0.125}, {"seconds": 1.0}]}
    assert _counted(plan, reply) == {
        "check_call_capture_s": 0.5,
        "check_calls_capture": 1.0,
        "check_call_direct_s": 0.25,
        "check_calls_direct": 1.0,
        "check_call_precision_s": 0.125,
        "check_calls_precision": 1.0,
        "check_call_aligned_s": 1.0,
        "check_calls_aligned": 1.0,
    }


def test_a_reply_that_stopped_early_counts_the_calls_made() -> None:
    plan = _plan(("capture", "signed"), ("direct", "signed"), ("direct", "large"))
    got = _counted(plan, {"ok": True, "calls": [{"seconds": 0.5}, {"seconds": 0.25}]})
    assert got["check_calls_direct"] == 1.0 and got["check_call_direct_s"] == 0.25


def test_nonsense_in_a_reply_counts_nothing() -> None:
    plan = _plan(("direct", "signed"), ("direct", "large"), ("direct", "ties"), ("direct", "denormal"))
    assert _counted(plan, {"ok": True, "calls": {"seconds": 1}}) == {}
    assert _counted(plan, {"ok": True}) == {}
    records = [{"seconds": -1.0}, {"seconds": "1"}, "call", {"seconds": 1e9}]
    assert _counted(plan, {"ok": True, "calls": records}) == {}


def test_laps_add_up_per_name() -> None:
    seconds: dict[str, float] = {}
    lap = _Laps(seconds)
    lap("check_outputs")
    lap("check_lazy")
    lap("check_outputs")
    assert set(seconds) == {"check_outputs", "check_lazy"}
    assert all(v >= 0 for v in seconds.values())
