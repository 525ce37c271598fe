"""Timing requests for the worker and the statistics of what comes back.

The worker times each benchmark shape with CUDA events on the stream, L2 flushed before every launch, input sets
(made by :mod:`.bench_checks`) rotated, a CUDA graph of several calls when one call is shorter than
``graph_below_us``; here the samples become a median and a spread, and the first benchmark shape a
:class:`~r1build.records.Timing` with its floor and speedups.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ...convert import record, replace
from ...manifest.model import KernelSpec
from ...records import Timing, note_line
from ...selection.noise import STOP_ERROR, median_and_spread
from ..child.messages import (
    ArrayRequest,
    BenchShapeRequest,
    ReferenceShape,
    Regime,
    TimeReferenceRequest,
    TimeRequest,
)
from ..correctness.inputs import array_shape, numpy_dtype, scalar_values
from .floors import DeviceFloors, floor_us, shape_key

__all__ = [
    "FINALISTS",
    "IDLE_GAP_US",
    "LibraryTime",
    "SampleStats",
    "array_requests",
    "build_timing",
    "finalists",
    "library_time",
    "reference_request",
    "summarize",
    "time_request",
    "with_regimes",
]


IDLE_GAP_US = 1000.0
"""How long the GPU sits idle before each sample of the ``idle-gaps`` regime: long enough for the SMs' clocks and
caches to go cold between calls, as between the requests of a serving engine; short enough that 20 samples take
tens of milliseconds."""


FINALISTS = 3
"""How many of a job's timed candidates (the fastest back to back) are timed again with idle gaps."""


@record(frozen=True)
class SampleStats:
    """Median and spread of one shape's samples."""

    median_us: float
    """Median microseconds of one call."""
    spread: float
    """(p90 - p10) / median."""
    samples: int
    """How many samples."""


def summarize(samples: Sequence[float]) -> SampleStats:
    """Median and relative p10-p90 spread."""
    median, spread = median_and_spread(samples)
    return SampleStats(float(median), float(spread), len(samples))


def array_requests(spec: KernelSpec, sizes: Mapping[str, int]) -> list[ArrayRequest]:
    """How the worker allocates each array argument at ``sizes``: name, dtype, role, shape, count, item size."""
    out: list[ArrayRequest] = []
    for arg in spec.args:
        if not arg.is_array:
            continue
        shape = array_shape(arg, sizes)
        assert arg.role is not None  # every array argument has one (the manifest checks it)
        out.append(
            {
                "name": arg.name,
                "dtype": arg.dtype,
                "role": arg.role,
                "shape": list(shape),
                "count": int(np.prod(shape, dtype=np.int64)),
                "itemsize": numpy_dtype(arg.dtype).itemsize,
            }
        )
    return out


def time_request(
    lib: str,
    shapes: list[BenchShapeRequest],
    *,
    budget_s: float = 0.3,
    min_samples: int = 20,
    max_samples: int = 200,
    stop_error: float = STOP_ERROR,
    graph_below_us: float = 10.0,
    park: bool = False,
    regime: Regime = "back-to-back",
    idle_gap_us: float = IDLE_GAP_US,
) -> TimeRequest:
    """The worker request that times one library at every benchmark shape (``shapes`` from
    :func:`~.bench_checks.shape_requests`; see the worker's ``_time_shape`` for how a sample is made); with
    ``park``, what the timed calls left stays on the GPU for the comparer process (:mod:`.child.gpu_compare`). A shape
    takes at least ``min_samples`` samples, then more while its budget and ``max_samples`` allow and the standard
    error of its median is above ``stop_error`` (:data:`~r1build.selection.noise.STOP_ERROR`). ``regime``
    ``idle-gaps``: each sample is one call after ``idle_gap_us`` of an idle GPU and an L2 flush (no checks after)."""
    request: TimeRequest = {
        "park": park,
        "op": "time",
        "lib": lib,
        "budget_s": budget_s,
        "min_samples": min_samples,
        "max_samples": max_samples,
        "stop_error": stop_error,
        "graph_below_us": graph_below_us,
        "shapes": shapes,
    }
    if regime != "back-to-back":
        request["regime"] = regime
        request["idle_gap_us"] = idle_gap_us
    return request


def reference_request(spec: KernelSpec, root: str) -> TimeReferenceRequest:
    """The worker request that times the library at every benchmark shape: the kernel's ``gpu-reference`` called
    as it is where the manifest names one, else the numpy reference run on cupy arrays."""
    shapes: list[ReferenceShape] = []
    for sizes in spec.bench_shapes:
        arrays = [a for a in array_requests(spec, sizes) if a["role"] != "out"]
        shapes.append({"arrays": arrays, "scalars": scalar_values(spec, sizes)})
    if spec.gpu_reference is not None:
        return {
            "op": "time_reference",
            "root": root,
            "reference": spec.gpu_reference,
            "shapes": shapes,
            "rebind": False,
        }
    return {"op": "time_reference", "root": root, "reference": spec.reference, "shapes": shapes}


@record(frozen=True)
class LibraryTime:
    """The library's time at the first benchmark shape, or why there is none."""

    median_us: float | None
    """Median microseconds of one call; None when it could not be timed."""
    note: str | None = None
    """Why it could not be timed (the error the reference raised on cupy, or the worker's failure)."""


def library_time(spec: KernelSpec, reply: Mapping[str, object]) -> LibraryTime:
    """What the worker's reply to :func:`reference_request` says of the library's time: its median, or the reason
    it has none, worded for the lock and ``status`` (the fix where the reference does not run on cupy)."""
    shapes = reply.get("shapes")
    first = shapes[0] if isinstance(shapes, list) and shapes and isinstance(shapes[0], dict) else None
    if reply.get("ok") and first is not None and isinstance(first.get("samples_us"), list) and first["samples_us"]:
        return LibraryTime(summarize([float(x) for x in first["samples_us"]]).median_us)
    why = note_line(str((first or {}).get("error") or reply.get("error") or "no samples came back"), 300)
    if spec.gpu_reference is not None:
        return LibraryTime(None, note_line(f"the gpu-reference {spec.gpu_reference} failed on cupy ({why})"))
    return LibraryTime(
        None,
        note_line(
            f"the reference does not run on cupy ({why}); name a `gpu-reference` written for cupy to time the library"
        ),
    )


def build_timing(
    spec: KernelSpec,
    stats: Sequence[SampleStats],
    *,
    floors: DeviceFloors | None,
    baseline_us: float | None,
    library: LibraryTime | None,
) -> Timing:
    """The record of one candidate's timings; the first benchmark shape ranks."""
    first = stats[0]
    reference_us = library.median_us if library is not None else None
    floor = floor_us(spec, spec.bench_shapes[0], floors) if floors is not None else None
    return Timing(
        median_us=round(first.median_us, 4),
        spread=round(first.spread, 5),
        samples=first.samples,
        floor_us=round(floor, 4) if floor is not None else None,
        share_of_floor=round(floor / first.median_us, 4) if floor is not None and first.median_us > 0 else None,
        speedup_vs_baseline=round(baseline_us / first.median_us, 4) if baseline_us and first.median_us else None,
        speedup_vs_reference=round(reference_us / first.median_us, 4) if reference_us and first.median_us else None,
        library_note=library.note if library is not None and not reference_us else None,
        shapes={
            shape_key(spec, sizes): round(s.median_us, 4) for sizes, s in zip(spec.bench_shapes, stats, strict=False)
        },
    )


def finalists(medians: Mapping[str, float], n: int = FINALISTS) -> list[str]:
    """The ``n`` fastest of ``medians`` (library key → back-to-back median at the first benchmark shape), fastest
    first: the candidates timed again with idle gaps."""
    return sorted(medians, key=lambda k: (medians[k], k))[:n]


def with_regimes(timing: Timing, idle: SampleStats | None) -> Timing:
    """``timing`` with both regimes' medians recorded (``Timing.regimes``) where the finalist was timed with idle
    gaps; as it is otherwise."""
    if idle is None:
        return timing
    regimes = {"back-to-back": timing.median_us, "idle-gaps": round(idle.median_us, 4)}
    return replace(timing, regimes=regimes)
