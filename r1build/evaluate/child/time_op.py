"""The worker's ``time`` op: per benchmark shape, the candidate timed over the input sets the parent made (a CUDA
graph of back-to-back calls for short calls, else one launch per sample between events after an L2 flush, or the
``idle-gaps`` regime), then the checks of what the timed calls left (:func:`_bench_checks`); and the launch
overhead subtracted from event-timed samples (:func:`launch_overhead_us`).

Functions of the :class:`~.worker.Worker` that times a candidate; the outputs go to files or the parked allocation
(:mod:`.outputs`), the extra calls are :mod:`.extras`'.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, NoReturn

from ...selection.noise import settled
from .check_op import capture_only
from .extras import graph_replays, lazy_output_call
from .faults import CallFailed
from .guarded import PAST_THE_END
from .messages import BenchFill, BenchShapeRequest, CallRecord, TimedShape, TimeReply, TimeRequest
from .outputs import Parked, keep_outputs, reserve

if TYPE_CHECKING:
    from .worker import Worker

__all__ = ["launch_overhead_us", "op_time"]

_IDLE_HOLD_US = 30.0
"""How long a spin kernel (one thread) holds the stream after an idle gap while the host queues a sample's event,
call and event, so the host's launch latency is not in the sample."""


def _measure(
    worker: Worker,
    launch: Callable[[int], None],
    n: int,
    per_sample: int,
    flush: bool,
    batch: int,
    host_us: float,
    enough: Callable[[list[float]], bool] | None = None,
) -> list[float]:
    """Up to ``n`` samples of ``launch(k)``, each between two events; the stream is held by a spin kernel
    while a batch is queued, so host overhead never shows in the GPU timeline. After each batch, ``enough``
    (given the samples so far) may end the sampling early."""
    samples: list[float] = []
    done = 0
    while done < n and not (enough is not None and done and enough(samples)):
        b = min(batch, n - done)
        worker.spin(min(100_000.0, b * host_us))
        pairs = []
        for j in range(b):
            e0, e1 = worker.event_pair(j)
            if flush:
                worker.flush_l2()
            e0.record(worker.stream)
            launch(done + j)
            e1.record(worker.stream)
            pairs.append((e0, e1))
        worker.stream.synchronize()
        samples += [worker.cp.cuda.get_elapsed_time(e0, e1) * 1000.0 / per_sample for e0, e1 in pairs]
        done += b
        worker.tick(done)  # progress: the parent's deadline is per step, so a hang shows in seconds
    return samples


def launch_overhead_us(worker: Worker) -> float:
    """What the events of a sample add to the kernel's own duration: the median of the same sample (L2
    flush, event, launch, event) around a kernel that does nothing, less what such a kernel costs when it is
    one of many back to back in a CUDA graph (there no event and no host sits between launches, so that cost
    is the kernel's own: what a profiler reports as the duration of an empty kernel). Subtracted from
    event-timed samples, so a time is the kernel's duration on the GPU as Nsight Compute reports it.

    Measured three times at the worker's first timing and once more at each timing request after it (see
    :func:`op_time`), the least kept: another process's work on the GPU can only lengthen a measurement, and an
    overhead taken too long shortens every time it is subtracted from (one resolve on an H100 timed every
    honest ``sum_all`` at a third of its memory floor, and rejected them all as faster than the hardware)."""
    if not worker.overhead_fresh:
        for n in (60, 60, 60) if worker.overhead_us is None else (20,):
            overhead, own = _overhead_once(worker, n)
            if worker.overhead_us is None or overhead < worker.overhead_us:
                worker.overhead_us, worker.empty_us = overhead, own
        worker.overhead_fresh = True
    assert worker.overhead_us is not None
    return worker.overhead_us


def _overhead_once(worker: Worker, n: int) -> tuple[float, float]:
    """One measurement of :func:`launch_overhead_us` (median of ``n`` samples): the overhead and the empty
    kernel's own duration, in us."""
    kernel = worker.kernel("r1_spin")
    zero = (worker.cp.int64(0),)

    def empty(_k: int) -> None:
        with worker.stream:
            kernel((1,), (1,), zero)

    sample = statistics.median(_measure(worker, empty, n, 1, True, 20, 40.0))
    reps = 64
    graph = _graph_of(worker, empty, reps)
    own = statistics.median(_measure(worker, lambda _k: graph.launch(worker.stream), 20, reps, False, 10, 40.0))
    return max(sample - own, 0.0), own


def _graph_of(worker: Worker, call: Callable[[int], None], reps: int) -> Any:
    """A CUDA graph of ``call(0)`` ... ``call(reps - 1)`` back to back, captured on the stream (global mode) and
    launched once, so its first timed launch is not its first."""
    worker.stream.begin_capture(getattr(worker.rt, "streamCaptureModeGlobal", 0))
    try:
        for k in range(reps):
            call(k)
    finally:
        graph = worker.stream.end_capture()
    graph.launch(worker.stream)
    worker.stream.synchronize()
    return graph


def _set_for(worker: Worker, shape: BenchShapeRequest, fill: BenchFill) -> tuple[list[Any], list[Any]]:
    made = [worker.bench_empty(a["dtype"], int(a["count"])) for a in shape["arrays"]]
    arrays = [arr for arr, _ in made]
    worker.guarded_now = all(guarded for _, guarded in made)
    worker.fill(arrays, shape, fill)
    worker.stream.synchronize()
    return arrays, worker.args(shape["args"], [int(arr.data.ptr) for arr in arrays])


def _bench_checks(
    worker: Worker,
    fn: Any,
    shape: BenchShapeRequest,
    sets: list[tuple[list[Any], list[Any]]],
    tag: str,
    out: TimedShape,
    si: int = 0,
    parked: Parked | None = None,
) -> TimedShape:
    """After the timed calls of one benchmark shape (``si``): the outputs they left in every input set (for
    ``inout`` arrays, of one more call on fresh inputs), the ``lazy`` call (:mod:`.extras`), one call on set 0
    with one input element changed and the same pointers, a capture of the call on its stream, the replays of
    one captured graph (:mod:`.extras`), and the device state; added to ``out``. The outputs go to files, or
    with ``parked`` into the parked allocation (:mod:`.gpu_compare`)."""
    has_inout = any(a["role"] == "inout" for a in shape["arrays"])
    lap = _Laps(out["seconds"])

    def call(args: list[Any]) -> str | None:
        rc = int(fn(*args, worker.stream.ptr))
        return "returned " + worker.error_text(rc) if rc else None

    for k, (arrays, args) in enumerate(sets):
        if has_inout:
            worker.fill(arrays, shape, shape["sets"][k])
            worker.stream.synchronize()
            failed = call(args)
            if failed:
                out["check_error"] = failed
                return out
        kept = keep_outputs(worker, arrays, shape, f"{tag}-set{k}", (si, k), parked, shape["sets"][k])
        out["outputs"].append(kept)
    lap("check_outputs")
    failed = lazy_output_call(worker, fn, shape, sets[0], (tag, si, parked), out)
    lap("check_lazy")
    if failed:
        out["check_error"] = failed
        return out
    arrays, args = sets[0]
    worker.fill(arrays, shape, shape["tweak"])
    worker.stream.synchronize()
    failed = call(args)
    if failed:
        out["check_error"] = failed
        return out
    out["tweak_outputs"] = keep_outputs(worker, arrays, shape, f"{tag}-tweak", (si, len(sets)), parked, shape["tweak"])
    lap("check_tweak")
    _capture_and_replays(worker, fn, shape, sets[0], (tag, si, parked), out, lap)
    out["device_state"] = worker.restore_state()
    return out


def _capture_and_replays(
    worker: Worker,
    fn: Any,
    shape: BenchShapeRequest,
    first: tuple[list[Any], list[Any]],
    where: tuple[str, int, Parked | None],
    out: TimedShape,
    lap: _Laps,
) -> None:
    """The last of :func:`_bench_checks`: a capture of the call on set ``first``, then (where it captured) the
    replays of one captured graph (:mod:`.extras`); what they found added to ``out``."""
    record: CallRecord = {"rc": 0, "error": None, "capture_error": None}
    capture_only(worker, fn, first[1], record)
    lap("check_capture")
    out["capture_error"] = record["capture_error"]
    out["capture_rc"] = record["rc"]
    out["launch_error"] = record.get("launch_error")
    if not record["capture_error"] and not record["rc"]:
        failed = graph_replays(worker, fn, shape, first, where, out)
        lap("check_replays")
        if failed:
            out["extra_error"] = failed


def op_time(worker: Worker, h: TimeRequest, _bufs: list[bytes]) -> tuple[TimeReply, list[bytes]]:
    fn = worker.fn(str(h["lib"]))
    budget_us = float(h.get("budget_s", 0.3)) * 1e6
    min_n, max_n = int(h.get("min_samples", 20)), int(h.get("max_samples", 200))
    graph_below = float(h.get("graph_below_us", 10.0))
    stop_error = float(h.get("stop_error", 0.0))
    shapes_out = []
    worker.fresh_stream()
    worker.overhead_fresh = False
    parked, reply = reserve(worker, h), TimeReply(ok=True)
    idle_gap_us = float(h.get("idle_gap_us", 1000.0)) if h.get("regime") == "idle-gaps" else None
    for si, shape in enumerate(h["shapes"]):
        try:
            if idle_gap_us is not None:  # the back-to-back timing of this library checked its outputs
                shapes_out.append(_time_idle(worker, fn, shape, budget_us, (min_n, max_n, stop_error), idle_gap_us))
                continue
            timed, sets = _time_shape(worker, fn, shape, budget_us, (min_n, max_n, stop_error), graph_below)
            timed["guarded"] = worker.guarded_now
            start = time.perf_counter()
            tag = f"{h['lib'].replace(':', '-')}-s{si}"
            timed = _bench_checks(worker, fn, shape, sets, tag, timed, si, parked)
            if timed.get("check_error") and not worker.context_ok():
                raise CallFailed(str(timed["check_error"]))  # a fault the call's return code showed
            timed["seconds"]["checks"] = time.perf_counter() - start
            del sets
            shapes_out.append(timed)
        except (worker.rt.CUDARuntimeError, CallFailed) as exc:
            if isinstance(exc, CallFailed) and worker.context_ok():
                raise
            _timing_failed(worker, fn, si, exc)
        finally:
            worker.cp.get_default_memory_pool().free_all_blocks()
            if worker.guarded is not None and worker.context_ok():
                worker.guarded.recycle()
        worker.tick(si)
    if parked is not None and worker.parking is not None:
        try:
            worker.stream.synchronize()  # the comparer reads the parked copies from another process
        except worker.rt.CUDARuntimeError as exc:
            worker.settle("parking the outputs", exc)
        reply["parked"] = {"handle": worker.parking.handle, "size": worker.parking.size}
    reply["shapes"] = shapes_out
    return reply, []


def _timing_failed(worker: Worker, fn: Any, si: int, exc: BaseException) -> NoReturn:
    """Raise what a CUDA error while timing shape ``si`` means: a launch that failed in the library's own
    runtime while the call returned cudaSuccess (an invalid configuration only at the benchmark size spoils
    the capture of the timed graph, and the capture's error hid it); else the error, with where an illegal
    address at a benchmark shape points (past the end of an array)."""
    where = f"timing shape {si}"
    if worker.context_ok():
        launch = worker.launch_error(fn)
        if launch is not None:
            # worded as a return code is ("returned ..."): the parent judges it the call's fault, as the
            # checks' own launch-error verdict does (incorrect), not a crash of the harness
            raise CallFailed(f"returned cudaSuccess, though its launch failed: {launch} ({where}; then: {exc})")
    worker.settle(where + (f" ({PAST_THE_END})" if worker.guarded_now else ""), exc)


def _time_idle(
    worker: Worker, fn: Any, shape: BenchShapeRequest, budget_us: float, counts: tuple[int, int, float], gap_us: float
) -> TimedShape:
    """Samples of one benchmark shape in the ``idle-gaps`` regime: per sample the L2 is flushed, the GPU sits
    idle for ``gap_us`` (the host sleeps with nothing queued), then a short spin kernel holds the stream while
    the host queues an event, one call and an event: the call's own duration (less the launch overhead of
    such a sample, as in the events mode) from a cold L2 after an idle GPU, as a serving engine calls it.
    Stops as :func:`_time_shape` does, or when the samples' own time (the gaps not counted) is spent."""
    min_n, max_n, stop_error = counts
    started = time.perf_counter()
    sets = [_set_for(worker, shape, fill) for fill in shape["sets"]]
    sampling = time.perf_counter()
    rotation, stream_ptr = len(sets), worker.stream.ptr

    def call(k: int) -> None:
        rc = fn(*sets[k % rotation][1], stream_ptr)
        if rc:
            raise CallFailed(f"returned {worker.error_text(int(rc))}")

    call(0)
    worker.stream.synchronize()
    overhead = launch_overhead_us(worker)
    enough = _stop_rule(min_n, stop_error, 0.0, overhead)
    raw: list[float] = []
    e0, e1 = worker.event_pair(0)
    while len(raw) < max_n and not (len(raw) >= min_n and (sum(raw) >= budget_us or (enough and enough(raw)))):
        worker.flush_l2()
        worker.stream.synchronize()
        time.sleep(gap_us / 1e6)
        worker.spin(_IDLE_HOLD_US)
        e0.record(worker.stream)
        call(len(raw))
        e1.record(worker.stream)
        e1.synchronize()
        raw.append(worker.cp.cuda.get_elapsed_time(e0, e1) * 1000.0)
        if len(raw) % 10 == 0:
            worker.tick(len(raw))
    return {
        "samples_us": [max(t - overhead, 0.0) for t in raw],
        "mode": "events",
        "regime": "idle-gaps",
        "calls_per_sample": 1,
        "sets": rotation,
        "estimate_us": statistics.median(raw),
        "launch_overhead_us": overhead,
        "empty_kernel_us": worker.empty_us,
        "big_sets": False,
        "outputs": [],
        "seconds": {"sets": sampling - started, "samples": time.perf_counter() - sampling, "checks": 0.0},
    }


def _time_shape(
    worker: Worker,
    fn: Any,
    shape: BenchShapeRequest,
    budget_us: float,
    counts: tuple[int, int, float],
    graph_below: float,
) -> tuple[TimedShape, list[tuple[list[Any], list[Any]]]]:
    """Samples of one benchmark shape, over the input sets the parent made (rotated call by call):
    ``counts`` is the least and the most samples and the relative standard error of the median at which the
    sampling stops between the two (0: never; :func:`r1build.selection.noise.settled`), ``budget_us`` what the
    samples may take in all.

    A call shorter than ``graph_below`` us is timed as a CUDA graph of many back-to-back calls (no flush in
    between: the per-call time of a small kernel includes the gap between kernels, and its inputs may be
    in L2). Otherwise each sample is L2 flush, event, one launch, event, and the launch overhead of such a
    sample beyond an empty kernel's own duration (:func:`launch_overhead_us`) is subtracted, so the time is
    the kernel's own duration with a cold L2. The sampling may stop after any batch once it holds the least
    number of samples and took a tenth of the budget (a window long enough to see the clocks drift).
    """
    least_s = budget_us / 1e6 / 10
    set_bytes = max(1, sum(int(a["count"]) * int(a["itemsize"]) for a in shape["arrays"]))
    big = set_bytes >= 2 * worker.l2_bytes
    started = time.perf_counter()
    sets = [_set_for(worker, shape, fill) for fill in shape["sets"]]
    sampling = time.perf_counter()
    rotation = len(sets)
    stream_ptr = worker.stream.ptr

    def call(k: int) -> None:
        rc = fn(*sets[k % rotation][1], stream_ptr)
        if rc:
            raise CallFailed(f"returned {worker.error_text(int(rc))}")

    for k in range(3):
        call(k)
    worker.stream.synchronize()
    worker.tick(0)
    t_est = _estimate_us(worker, call)
    overhead = 0.0
    if t_est < graph_below:
        samples, reps = _sample_graph(worker, _Sampling(call, t_est, budget_us, counts, least_s))
        mode: Literal["graph", "events"] = "graph"
    else:
        # one launch per sample: back-to-back launches would add the gap between kernels to every call
        reps = 1
        samples, overhead = _sample_events(worker, _Sampling(call, t_est, budget_us, counts, least_s))
        mode = "events"
    return {
        "samples_us": samples,
        "mode": mode,
        "calls_per_sample": reps,
        "sets": rotation,
        "estimate_us": t_est,
        "launch_overhead_us": overhead,
        "empty_kernel_us": worker.empty_us,
        "big_sets": big,
        "outputs": [],
        "seconds": {"sets": sampling - started, "samples": time.perf_counter() - sampling},
    }, sets


def _estimate_us(worker: Worker, call: Callable[[int], None]) -> float:
    """The median of three calls timed by events, in us (at least 0.05)."""
    estimates: list[float] = []
    e0, e1 = worker.event_pair(0)
    for k in range(3):
        e0.record(worker.stream)
        call(k)
        e1.record(worker.stream)
        e1.synchronize()
        estimates.append(worker.cp.cuda.get_elapsed_time(e0, e1) * 1000.0)
    return max(statistics.median(estimates), 0.05)


class _Sampling(NamedTuple):
    """How one benchmark shape is sampled (see :func:`_time_shape`)."""

    call: Callable[[int], None]
    """Call ``k`` of the candidate (on input set ``k`` modulo the sets)."""
    t_est: float
    """One call's estimated time, in us."""
    budget_us: float
    """What the samples may take in all."""
    counts: tuple[int, int, float]
    """The least and the most samples, and the relative standard error of the median to stop at."""
    least_s: float
    """Seconds the sampling runs at least before it may stop early."""


def _sample_graph(worker: Worker, how: _Sampling) -> tuple[list[float], int]:
    """Samples of a CUDA graph of back-to-back calls (see :func:`_time_shape`), and the calls per sample."""
    call, t_est, budget_us, (min_n, max_n, stop_error), least_s = how
    reps = max(4, min(256, math.ceil(200.0 / t_est)))
    graph = _graph_of(worker, call, reps)
    n = max(min_n, min(max_n, int(budget_us / (reps * t_est))))
    enough = _stop_rule(min_n, stop_error, least_s)
    samples = _measure(worker, lambda _k: graph.launch(worker.stream), n, reps, False, max(1, min_n), _HOST_US, enough)
    return samples, reps


def _sample_events(worker: Worker, how: _Sampling) -> tuple[list[float], float]:
    """Samples of one launch each after an L2 flush, less the launch overhead (see :func:`_time_shape`), and
    that overhead."""
    call, t_est, budget_us, (min_n, max_n, stop_error), least_s = how
    flush_us = worker.flush_time_us()
    n = max(min_n, min(max_n, int(budget_us / (t_est + flush_us))))
    overhead = launch_overhead_us(worker)
    batch = max(1, min(min_n, int(1e6 / t_est)))  # a batch takes about a second at most
    raw = _measure(worker, call, n, 1, True, batch, _HOST_US, _stop_rule(min_n, stop_error, least_s, overhead))
    return [max(t - overhead, 0.0) for t in raw], overhead


_HOST_US = 40.0
"""Host time allowed per sample when sampling a shape (passed to :func:`_measure`)."""


class _Laps:
    """Seconds since the last lap added to ``seconds[name]`` at each call (where a worker's time went, for the
    evaluator's statistics)."""

    def __init__(self, seconds: dict[str, float]) -> None:
        self.seconds, self.last = seconds, time.perf_counter()

    def __call__(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = self.seconds.get(name, 0.0) + now - self.last
        self.last = now


def _stop_rule(least: int, error: float, least_s: float, overhead: float = 0.0) -> Callable[[list[float]], bool] | None:
    """When a shape's sampling, started now, may stop: once its samples (less ``overhead``, as they are recorded)
    number ``least`` and know their median to ``error`` (:func:`r1build.selection.noise.settled`), and ``least_s``
    seconds
    have passed; None for ``error`` 0 (never)."""
    if error <= 0:
        return None
    since = time.perf_counter()

    def enough(got: list[float]) -> bool:
        net = [max(t - overhead, 0.0) for t in got]
        return time.perf_counter() - since >= least_s and settled(net, least, error)

    return enough
