"""What the worker measures besides candidates: the numpy reference run on cupy, the torch reference (eager and
``torch.compile``), and the device's floors.

Functions of the :class:`~.worker.Worker` that serves the request (``time_reference``, ``time_torch`` and
``floors`` ops).
"""

from __future__ import annotations

import functools
import importlib
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from .messages import (
    FloorsReply,
    FloorsRequest,
    ReferenceShape,
    ReferenceShapeReply,
    TimeReferenceReply,
    TimeReferenceRequest,
    TimeTorchReply,
    TimeTorchRequest,
    TorchShapeReply,
)

if TYPE_CHECKING:
    from .worker import Worker

__all__ = ["floors", "time_reference", "time_torch"]


def time_reference(
    worker: Worker, h: TimeReferenceRequest, _bufs: list[bytes]
) -> tuple[TimeReferenceReply, list[bytes]]:
    """Time the numpy reference computed by cupy: the reference module's ``numpy`` (and the numpy functions
    it imported by name) rebound to cupy in this process, so every array it makes is a cupy array."""
    from pathlib import Path

    import numpy

    from ...manifest.reference import load_reference

    fn = load_reference(Path(h["root"]), str(h["reference"]))
    names = fn.__globals__ if h.get("rebind", True) else {}  # a gpu-reference is cupy code already
    for name, value in list(names.items()):
        home = str(getattr(value, "__module__", None) or "")
        own = str(getattr(value, "__name__", None) or "")
        if value is numpy:
            names[name] = worker.cp
        elif callable(value) and home.startswith("numpy") and own and hasattr(worker.cp, own):
            names[name] = getattr(worker.cp, own)
    out: list[ReferenceShapeReply] = []
    warm = bool(h.get("warm"))
    for si, shape in enumerate(h["shapes"]):
        try:
            out.append({"samples_us": _time_reference_shape(worker, fn, shape, warm)})
        except worker.rt.CUDARuntimeError as exc:
            worker.settle("timing the reference", exc)
        except Exception as exc:  # the reference does not run under cupy: report, do not fail
            out.append({"error": f"{type(exc).__name__}: {exc}"[:500]})
        worker.tick(si)
    return {"ok": True, "shapes": out}, []


def _time_reference_shape(
    worker: Worker, fn: Callable[..., Any], shape: ReferenceShape, warm: bool = False
) -> list[float]:
    """Samples of the reference at one shape; with ``warm``, one call and none (its kernels compiled)."""
    kwargs = _reference_inputs(worker, shape)
    with worker.stream:
        if warm:
            fn(**kwargs)
            worker.stream.synchronize()
            return []
        return _time_calls(worker, lambda: fn(**kwargs))


def _reference_inputs(worker: Worker, shape: ReferenceShape) -> dict[str, Any]:
    """The keyword arguments of one shape: its scalars, and cupy arrays of random values for its arrays."""
    kwargs: dict[str, Any] = dict(shape["scalars"])
    for a in shape["arrays"]:
        arr = worker.typed_empty(a["dtype"], int(a["count"]))[: int(a["count"])].reshape(a["shape"])
        worker.random_fill(arr, a["dtype"])
        kwargs[a["name"]] = arr
    return kwargs


def _time_calls(worker: Worker, call: Callable[[], Any]) -> list[float]:
    """Samples (microseconds) of ``call`` on the worker's stream after two warm-up calls, L2 flushed before each:
    at least 5, up to 30 within a second."""
    e0, e1 = worker.event_pair(0)
    for _ in range(2):
        call()
    worker.stream.synchronize()
    samples: list[float] = []
    deadline = time.monotonic() + 1.0
    while len(samples) < 5 or (len(samples) < 30 and time.monotonic() < deadline):
        worker.flush_l2()
        e0.record(worker.stream)
        call()
        e1.record(worker.stream)
        e1.synchronize()
        samples.append(worker.cp.cuda.get_elapsed_time(e0, e1) * 1000.0)
    return samples


def time_torch(worker: Worker, h: TimeTorchRequest, _bufs: list[bytes]) -> tuple[TimeTorchReply, list[bytes]]:
    """Time the kernel's torch reference, eager and under ``torch.compile``, on the inputs the library gets (cupy
    arrays handed to torch through DLPack, no copy), torch running on the worker's stream. No torch in this
    environment: a failed reply saying so (the parent keeps it as the lock's ``torch-note``)."""
    from pathlib import Path

    try:
        torch: Any = importlib.import_module("torch")  # typed as Any: mypy runs where torch may be missing
    except ImportError as exc:
        return {"ok": False, "error": f"torch is not installed in the GPU worker's environment ({exc})"}, []
    from ...manifest.reference import load_reference

    fn = load_reference(Path(h["root"]), str(h["reference"]))
    calls: list[tuple[str, Callable[..., Any]]] = [("eager", fn)]
    if h.get("compile", True):
        calls.append(("compile", torch.compile(fn)))
    stream = torch.cuda.ExternalStream(worker.stream.ptr)
    out: list[TorchShapeReply] = []
    for si, shape in enumerate(h["shapes"]):
        made = _reference_inputs(worker, shape)
        kwargs = {k: torch.from_dlpack(v) if hasattr(v, "__dlpack__") else v for k, v in made.items()}
        row: dict[str, Any] = {}
        for mode, f in calls:
            try:
                with worker.stream, torch.cuda.stream(stream):
                    row[f"{mode}_us"] = _time_calls(worker, functools.partial(f, **kwargs))
            except worker.rt.CUDARuntimeError as exc:
                worker.settle("timing the torch reference", exc)
            except Exception as exc:  # the torch reference fails here: report, do not fail
                row[f"{mode}_error"] = f"{type(exc).__name__}: {exc}"[:500]
        out.append(cast(TorchShapeReply, row))
        worker.tick(si)
    return {"ok": True, "shapes": out}, []


def floors(worker: Worker, _h: FloorsRequest, _bufs: list[bytes]) -> tuple[FloorsReply, list[bytes]]:
    """Device bandwidth (a device-to-device copy) and fp32 peak (SGEMM and an FMA kernel)."""
    cp = worker.cp
    e0, e1 = worker.event_pair(0)

    def timed(action: Callable[[], None], repeats: int) -> float:
        action()
        worker.stream.synchronize()
        times = []
        for _ in range(repeats):
            e0.record(worker.stream)
            action()
            e1.record(worker.stream)
            e1.synchronize()
            times.append(cp.cuda.get_elapsed_time(e0, e1) / 1000.0)
        return float(statistics.median(times))

    with worker.stream:
        bandwidth = _bandwidth(worker, timed)
        sgemm = _sgemm(worker, timed)
        fma = _fma(worker, timed)
    return {
        "ok": True,
        "bandwidth_bps": bandwidth,
        "fp32_flops": max(sgemm, fma),
        "sgemm_flops": sgemm,
        "fma_flops": fma,
    }, []


def _bandwidth(worker: Worker, timed: Callable[[Callable[[], None], int], float]) -> float:
    n = min(2 << 30, worker.memory // 8)
    src = worker.cp.empty(n, dtype=worker.cp.uint8)
    dst = worker.cp.empty(n, dtype=worker.cp.uint8)
    src.fill(1)
    return 2.0 * n / timed(lambda: dst.data.copy_from_device_async(src.data, n, worker.stream), 10)


def _sgemm(worker: Worker, timed: Callable[[Callable[[], None], int], float]) -> float:
    cp, size = worker.cp, 8192
    a = cp.random.standard_normal((size, size), dtype=cp.float32)
    b = cp.random.standard_normal((size, size), dtype=cp.float32)
    c = cp.empty((size, size), dtype=cp.float32)
    return 2.0 * size**3 / timed(lambda: cp.matmul(a, b, out=c), 5)


def _fma(worker: Worker, timed: Callable[[Callable[[], None], int], float]) -> float:
    cp = worker.cp
    kernel = worker.kernel("r1_fma_peak")
    blocks, threads, iters = worker.sm_count * 8, 256, 1 << 15
    sink = cp.empty(blocks * threads, dtype=cp.float32)
    args = (sink, cp.int32(iters), cp.float32(0.999999), cp.float32(1e-6))
    return 16.0 * iters * blocks * threads / timed(lambda: kernel((blocks,), (threads,), args), 5)
