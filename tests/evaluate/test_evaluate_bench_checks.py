"""The benchmark-shape checks from bytes built here (no GPU): input sets with reference outputs, the verdict on
the outputs the timed calls left, the memo probe, and times the hardware does not allow."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from r1build.evaluate.bench_checks import IMPLAUSIBLE, implausible, plan_bench, rotation_for
from r1build.evaluate.bench_checks import judge_bench as _judge_bench
from r1build.evaluate.bench_extra import place_set
from r1build.evaluate.child.judge import EXTRA_CALLS
from r1build.evaluate.floors import DeviceFloors, bytes_moved
from r1build.evaluate.judge_pool import JudgePool
from r1build.manifest import KernelSpec, Manifest, load_reference


def _silu(root_manifest: Manifest) -> KernelSpec:
    spec = root_manifest.kernel("silu_mul")
    return replace(spec, bench_shapes=[{"n": 4099}])


def _write(path: Path, array: NDArray[Any]) -> str:
    np.ascontiguousarray(array).tofile(path)
    return str(path)


def test_rotation_covers_three_times_the_l2() -> None:
    assert rotation_for(1 << 20, 50 << 20) == 4
    assert rotation_for(200 << 20, 50 << 20) == 2
    assert rotation_for(60 << 20, 50 << 20) == 3


@pytest.fixture(scope="module")
def pool() -> Iterator[JudgePool]:
    judges = JudgePool(1)
    yield judges
    judges.close()


@pytest.mark.parametrize("where", ["thread", "process"])
def test_outputs_of_the_timed_calls_and_the_memo_probe_are_judged(
    root_manifest: Manifest, tmp_path: Path, where: str, pool: JudgePool
) -> None:
    # in the evaluator's thread, or in a judging process that gets the plan without its arrays
    judge_bench: Callable[..., Any] = _judge_bench if where == "thread" else pool.judge
    spec = _silu(root_manifest)
    plan = plan_bench(spec, load_reference(root_manifest.root, spec.reference), 50 << 20, tmp_path / "in")
    shape = plan.shapes[0]
    assert len(shape.sets) == 4 and shape.key == "n=4099"
    assert (
        int((shape.tweak.inputs["gate"] != shape.sets[0].inputs["gate"]).sum())
        + int((shape.tweak.inputs["up"] != shape.sets[0].inputs["up"]).sum())
        == 1
    )
    out = tmp_path / "out"
    out.mkdir()

    def reply(outputs: list[NDArray[Any]], tweak: NDArray[Any], **changed: Any) -> Any:
        """The part of a worker's timed shape (:class:`~r1build.evaluate.child.messages.TimedShape`) the
        checks read."""
        return {
            "outputs": [[None, None, _write(out / f"s{k}.bin", o)] for k, o in enumerate(outputs)],
            "tweak_outputs": [None, None, _write(out / "t.bin", tweak)],
            # the lazy-output call and the replays (bench_extra.py), right
            "extra_outputs": [
                [
                    None,
                    None,
                    _write(
                        out / f"e{e}.bin", place_set(shape, len(shape.sets) + 1 + e).expected["out"].astype(np.float32)
                    ),
                ]
                for e in range(len(EXTRA_CALLS))
            ],
            "capture_error": None,
            "capture_rc": 0,
            "device_state": None,
            **changed,
        }

    good = [s.expected["out"].astype(np.float32) for s in shape.sets]
    tweak = shape.tweak.expected["out"].astype(np.float32)
    assert judge_bench(spec, plan, [reply(good, tweak)]) is None

    skipped = [*good[:2], np.zeros(4099, np.float32), good[3]]  # work skipped in one set
    verdict = judge_bench(spec, plan, [reply(skipped, tweak)])
    assert verdict is not None and "benchmark shape n=4099 (input set 3 of 4)" in verdict.detail

    memo = judge_bench(spec, plan, [reply(good, good[0])])  # the tweaked call returned set 1's result
    assert memo is not None and "depends on earlier calls" in memo.detail

    captured = judge_bench(spec, plan, [reply(good, tweak, capture_rc=901)])
    assert captured is not None and "outside the given stream" in captured.detail
    state = judge_bench(spec, plan, [reply(good, tweak, device_state="cudaLimitPersistingL2CacheSize")])
    assert state is not None and state.status == "rejected" and "device state" in state.detail


def test_times_below_the_memory_floor_are_implausible(root_manifest: Manifest) -> None:
    spec = root_manifest.kernel("silu_mul")
    floors = DeviceFloors("H200", bandwidth_bps=4.0e12, fp32_flops=6.0e13)
    floor_us = bytes_moved(spec, spec.bench_shapes[0]) / 4.0e12 * 1e6
    assert implausible(spec, [floor_us * 0.95], floors) is None  # a kernel near the floor
    verdict = implausible(spec, [0.0124], floors)
    assert verdict is not None and verdict.status == "rejected" and "implausible" in verdict.detail
    assert f"{floor_us / 0.0124:.1f}x faster" in verdict.detail
    just_over = floor_us / IMPLAUSIBLE * 0.99
    assert implausible(spec, [just_over], floors) is not None
    assert implausible(spec, [just_over], floors, [True]) is None  # timed warm: up to 4x allowed


def test_a_broken_judging_pool_costs_no_verdict(root_manifest: Manifest, tmp_path: Path) -> None:
    import os
    import signal

    spec = _silu(root_manifest)
    plan = plan_bench(spec, load_reference(root_manifest.root, spec.reference), 50 << 20, tmp_path / "in")
    shape = plan.shapes[0]
    light = plan.for_judging()
    assert not light.shapes[0].sets[0].expected and light.shapes[0].sets[0].expected_files
    out = tmp_path / "out"
    out.mkdir()
    outputs = [[None, None, _write(out / f"s{k}.bin", np.zeros(4099, np.float32))] for k in range(len(shape.sets))]
    tweak = [None, None, _write(out / "t.bin", shape.tweak.expected["out"].astype(np.float32))]
    reply: Any = {"outputs": outputs, "tweak_outputs": tweak, "capture_rc": 0}
    judges = JudgePool(1)
    try:
        first = judges.judge(spec, plan, [reply])
        assert first is not None and "input set 1 of 4" in first.detail
        for pid in list(judges._pool._processes) if judges._pool is not None else []:
            os.kill(pid, signal.SIGKILL)
        again = judges.judge(spec, plan, [reply])  # found broken: judged here instead, the same verdict
        assert again == first and judges._pool is None
        assert judges.judge(spec, plan, [reply]) == first and judges._pool is not None  # a fresh pool next time
    finally:
        judges.close()
    assert judges.judge(spec, plan, [reply]) == first  # closed: in the caller's thread


def _pool_in_a_daemon(answer: Any) -> None:
    """(In a daemonic process, as a Dask worker is.)"""
    judges = JudgePool()
    answer.put((judges.processes, judges._get() is None))
    judges.close()


def test_a_daemonic_process_judges_in_its_threads() -> None:
    import multiprocessing

    spawn = multiprocessing.get_context("spawn")
    answer = spawn.Queue()
    child = spawn.Process(target=_pool_in_a_daemon, args=(answer,), daemon=True)
    child.start()
    try:
        assert answer.get(timeout=60) == (0, True)  # it may not start processes of its own
    finally:
        child.join(30)


def test_a_judging_canceled_with_its_executor_is_an_error_not_a_wait(
    root_manifest: Manifest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool broke, and the executor its calls fall back to has shut down (the evaluator is closing): whoever
    waits for the verdict gets an error, never waits forever."""
    from concurrent.futures import CancelledError, Future
    from concurrent.futures.process import BrokenProcessPool

    spec = _silu(root_manifest)
    plan = plan_bench(spec, load_reference(root_manifest.root, spec.reference), 50 << 20, tmp_path / "in")

    def canceled(*_: object, **__: object) -> Future[Any]:
        f: Future[Any] = Future()
        f.cancel()
        return f

    class Broken:
        """A pool whose process died after the call was handed to it."""

        def submit(self, *_: object, **__: object) -> Future[Any]:
            f: Future[Any] = Future()
            f.set_exception(BrokenProcessPool("a judging process was killed"))
            return f

        def shutdown(self, **_: object) -> None:
            pass

    judges = JudgePool(1, submit=canceled)
    monkeypatch.setattr(judges, "_get", Broken)
    with pytest.raises(CancelledError):
        judges.submit(spec, plan, []).result(timeout=10)
