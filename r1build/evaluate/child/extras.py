"""The calls at a benchmark shape after the timed ones whose outputs are judged too (:data:`.gpu_compare.EXTRA_CALLS`).

Functions of the :class:`~.worker.Worker` that times a candidate (its ``time`` op), after the outputs of the timed
calls were kept:

* :func:`lazy_output_call`: set 0's inputs unchanged, its outputs holding finite values (what the timed calls
  left, one element in :data:`.gpu_compare.DECOY_STRIDE` changed), one more call: a kernel that skips its work when the
  output already holds finite values and its inputs look the same (a fingerprint, a memo) leaves the changed
  elements as they were. Every timed call is then known to do the whole job whatever its buffers hold.
* :func:`graph_replays`: the call captured once into a CUDA graph on the stream (set 0's buffers), then replayed
  three times, fresh inputs written in place before each: work on an implicit stream (legacy or per-thread)
  never reaches the outputs at the benchmark shape, and a result that depends on how often one graph is replayed
  shows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .gpu_compare import DECOY_STRIDE, EXTRA_CALLS, extra_source
from .messages import BenchShapeRequest, TimedShape
from .outputs import Parked, keep_outputs

if TYPE_CHECKING:
    from .worker import Worker

__all__ = ["change_outputs", "graph_replays", "lazy_output_call"]

Where = tuple[str, int, "Parked | None"]
"""The file tag, the shape's index and the parked places of :func:`~.outputs.keep_outputs`."""


def change_outputs(worker: Worker, arrays: list[Any], shape: BenchShapeRequest) -> None:
    """Change one element in :data:`~.gpu_compare.DECOY_STRIDE` of every ``out`` array, keeping finite values finite
    (floats ``-2x + 1.5``, bfloat16 a mantissa bit, integers the lowest bit, booleans negated), on the stream."""
    cp = worker.cp
    with worker.stream:
        for arr, a in zip(arrays, shape["arrays"], strict=True):
            if a["role"] != "out" or not int(a["count"]):
                continue
            some = arr.reshape(-1)[: int(a["count"])][::DECOY_STRIDE]
            if a["dtype"] in ("float16", "float32", "float64"):
                some *= -2
                some += 1.5
            elif a["dtype"] == "bool":
                cp.logical_not(some, out=some)
            else:
                some ^= some.dtype.type(0x0040 if a["dtype"] == "bfloat16" else 1)


def lazy_output_call(
    worker: Worker,
    fn: Any,
    shape: BenchShapeRequest,
    set0: tuple[list[Any], list[Any]],
    where: Where,
    out: TimedShape,
) -> str | None:
    """The ``lazy`` call (see the module docstring) into set 0's buffers; its outputs kept at their place and
    added to ``out["extra_outputs"]``. For
    ``inout`` arrays set 0 is filled and called once first, and its ``inout`` arrays filled again after the
    change. Why the call failed, or None."""
    tag, si, parked = where
    arrays, args = set0
    fill = shape["sets"][0]
    if any(a["role"] == "inout" for a in shape["arrays"]):
        worker.fill(arrays, shape, fill)
        worker.stream.synchronize()
        rc = int(fn(*args, worker.stream.ptr))
        if rc:
            return "returned " + worker.error_text(rc)
    change_outputs(worker, arrays, shape)
    worker.fill(arrays, shape, fill, roles=frozenset({"inout"}))
    worker.stream.synchronize()
    rc = int(fn(*args, worker.stream.ptr))
    if rc:
        return "returned " + worker.error_text(rc)
    kept = keep_outputs(worker, arrays, shape, f"{tag}-lazy", (si, len(shape["sets"]) + 1), parked, fill)
    out.setdefault("extra_outputs", []).append(kept)
    return None


def graph_replays(
    worker: Worker,
    fn: Any,
    shape: BenchShapeRequest,
    set0: tuple[list[Any], list[Any]],
    where: Where,
    out: TimedShape,
) -> str | None:
    """Capture the call once on the stream (set 0's buffers), then per replay: the replay's input set written in
    place (outputs poisoned), only the graph launched, its outputs kept at their place and added to
    ``out["extra_outputs"]``. Why the capture failed, or None."""
    tag, si, parked = where
    arrays, args = set0
    rt, stream = worker.rt, worker.stream
    graph, rc, why = None, 0, None
    stream.begin_capture(getattr(rt, "streamCaptureModeGlobal", 0))
    try:
        rc = int(fn(*args, stream.ptr))
    finally:
        try:
            graph = stream.end_capture()
        except Exception as exc:  # cudaErrorStreamCaptureInvalidated and friends
            why = f"{type(exc).__name__}: {exc}"
    rt.deviceSynchronize()  # work the capture did not take (another stream) has finished before any upload
    if why or rc or graph is None:
        return why or (f"the call returned {worker.error_text(rc)} while captured" if rc else "no graph")
    sets = len(shape["sets"])
    for e, name in enumerate(EXTRA_CALLS):
        if name != "replay":
            continue
        source = extra_source(sets, e)
        fill = shape["sets"][source] if source < sets else shape["tweak"]
        worker.fill(arrays, shape, fill)
        stream.synchronize()
        graph.launch(stream)
        kept = keep_outputs(worker, arrays, shape, f"{tag}-replay{e}", (si, sets + 1 + e), parked, fill)
        out.setdefault("extra_outputs", []).append(kept)
    return None
