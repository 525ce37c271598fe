"""The correctness checks of one candidate on one GPU: every test shape's calls, and a diagnosis of a failure.

:func:`run_checks` sends the requests :mod:`.checks` plans to a :class:`~.slots.Slot`'s worker and judges the
replies there; a hang or a crash of the worker becomes the candidate's verdict.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, cast

from ...manifest.model import KernelSpec
from ..child.messages import CheckReply
from ..library import Library
from ..process import WorkerDied, WorkerTimedOut
from ..slots import Slot, library_key
from .plan import (
    CheckPart,
    ShapePlan,
    Verdict,
    check_request,
    diagnose,
    diagnosis_plan,
    needs_diagnosis,
    part_of,
    shape_verdict,
)

__all__ = ["run_checks"]


def _no_count(_name: str, _seconds: float) -> None:
    pass


def _count_calls(plan: ShapePlan, reply: CheckReply, count: Callable[[str, float], None]) -> None:
    """Each call's seconds in the worker under its check's name (``check_call_direct_s``, ``check_call_aligned_s``,
    ``check_call_precision_s`` ...) and the calls made (``check_calls_direct`` ...): where the checks' time goes
    (statistics only)."""
    records = reply.get("calls")
    if not isinstance(records, list):  # the reply shares the candidate's process: nothing in it is taken on trust
        return
    for call, record in zip(plan.calls, records, strict=False):
        seconds = record.get("seconds") if isinstance(record, dict) else None
        if isinstance(seconds, (int, float)) and 0 <= seconds < 1e6:
            check = "precision" if call.dist == "precision" else call.mode
            count(f"check_call_{check}_s", float(seconds))
            count(f"check_calls_{check}", 1.0)


def run_checks(
    slot: Slot,
    spec: KernelSpec,
    lib: Library,
    plans: list[ShapePlan],
    *,
    timeout_s: float,
    part: CheckPart = "all",
    count: Callable[[str, float], None] = _no_count,
    hold: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext,
) -> Verdict | None:
    """The first failure of ``lib`` over every shape's calls of ``part`` (each call within ``timeout_s``),
    explained by repeating the failing call where that can name the cause; None when every call passed. The
    ``alone`` part must run with no other work on the GPU (the caller holds the GPU's quiet lock); otherwise
    ``hold()`` is entered around each shape's work on the GPU (the quiet lock shared: the GPU can be taken for
    timing between two shapes, not only between two candidates). ``count`` gets the seconds spent building requests
    (``check_request_s``), waiting for ``hold`` (``check_hold_s``), loading the library (``check_load_s``), in the
    worker (``check_worker_s``, split by check in :func:`_count_calls`) and judging replies (``check_judge_s``)."""
    key = library_key(lib)
    where = "while loading"
    try:
        for whole in plans:
            plan = part_of(whole, part)
            if not plan.calls:
                continue
            t0 = time.perf_counter()
            header, buffers = check_request(spec, plan, key)
            built = time.perf_counter()
            count("check_request_s", built - t0)
            with hold():
                t1 = time.perf_counter()
                count("check_hold_s", t1 - built)
                failed = slot.load(spec, lib, timeout_s=timeout_s)  # again after a worker restart
                if failed is not None:
                    return Verdict("crashed", failed)
                where = f"at {plan.key}"
                t2 = time.perf_counter()
                reply, data = slot.request(header, buffers, timeout_s=timeout_s)
            t3 = time.perf_counter()
            verdict = shape_verdict(spec, plan, cast(CheckReply, reply), data)
            count("check_load_s", t2 - t1)
            count("check_worker_s", t3 - t2)
            count("check_judge_s", time.perf_counter() - t3)
            _count_calls(plan, cast(CheckReply, reply), count)
            if verdict is not None and needs_diagnosis(plan, verdict) and not reply.get("exiting"):
                verdict = _diagnosed(slot, spec, plan, verdict, key, timeout_s, hold)
            if verdict is not None:
                return verdict
    except WorkerTimedOut:
        return Verdict(
            "timed_out",
            f"a call did not return within {timeout_s:g} s {where}; the worker was killed "
            "(an endless loop, a deadlock between blocks, or a grid far larger than the "
            "data?)",
        )
    except WorkerDied as exc:
        tail = f"; its last output: {exc.log[-600:]}" if exc.log else ""
        return Verdict("crashed", f"the worker process died {where} ({exc}){tail}")
    return None


def _diagnosed(
    slot: Slot,
    spec: KernelSpec,
    plan: ShapePlan,
    verdict: Verdict,
    key: str,
    timeout_s: float,
    hold: Callable[[], AbstractContextManager[Any]],
) -> Verdict:
    """``verdict`` on ``plan``, explained by repeating its failing call (:func:`~.plan.diagnosis_plan`)."""
    assert verdict.call is not None
    repeat = diagnosis_plan(plan, verdict.call)
    header, buffers = check_request(spec, repeat, key)
    with hold():
        reply, data = slot.request(header, buffers, timeout_s=timeout_s)
    return diagnose(plan, verdict.call, verdict, repeat, cast(CheckReply, reply), data, spec.tolerance)
