"""The torch bar: the kernel's ``torch-reference`` timed eager and under ``torch.compile`` on the benchmark
shapes, the faster of the two the time a winner's ``speedup_vs_torch`` is set against.

The request and what its reply says are pure functions here; the worker's side is
:func:`r1build.evaluate.child.measures.time_torch` (the same inputs as the library's, made on cupy and handed to
torch through DLPack).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from ...convert import record, replace
from ...manifest.model import KernelSpec
from ...records import Timing, note_line
from ..child.messages import ReferenceShape, TimeTorchRequest
from .stats import summarize

__all__ = ["TorchTime", "torch_request", "torch_time", "with_torch"]

TorchMode = Literal["eager", "compile"]


def torch_request(
    spec: KernelSpec, root: str, shapes: list[ReferenceShape], *, compile: bool = True
) -> TimeTorchRequest:
    """The worker request timing ``spec``'s ``torch-reference`` at ``shapes`` (those of the library's request:
    the same arrays and scalars), eager and, with ``compile``, under ``torch.compile``."""
    if spec.torch_reference is None:
        raise ValueError(f"kernel {spec.name!r} names no torch-reference")
    return {"op": "time_torch", "root": root, "reference": spec.torch_reference, "shapes": shapes, "compile": compile}


@record(frozen=True)
class TorchTime:
    """The torch bar at the first benchmark shape, or why there is none."""

    median_us: float | None
    """The faster median of eager and ``torch.compile``; None when neither ran."""
    mode: TorchMode | None = None
    """Which of the two set the bar."""
    eager_us: float | None = None
    """Median of the eager calls, where they ran."""
    compile_us: float | None = None
    """Median of the ``torch.compile`` calls, where they ran."""
    note: str | None = None
    """Why there is no bar (torch missing in the worker, the reference's error), one line."""


def torch_time(spec: KernelSpec, reply: Mapping[str, object]) -> TorchTime:
    """What the worker's reply to :func:`torch_request` says of the torch bar at the first benchmark shape: the
    faster of eager and ``torch.compile`` (eager where compile failed, and the other way), or why neither ran,
    worded for the lock and ``status``."""
    shapes = reply.get("shapes")
    first = shapes[0] if reply.get("ok") and isinstance(shapes, list) and shapes else None
    first = first if isinstance(first, dict) else None
    medians: dict[TorchMode, float] = {}
    for mode in ("eager", "compile"):
        samples = (first or {}).get(f"{mode}_us")
        if isinstance(samples, list) and samples:
            medians[mode] = round(summarize([float(x) for x in samples]).median_us, 4)
    if medians:
        mode = min(medians, key=lambda m: (medians[m], m))
        return TorchTime(medians[mode], mode, medians.get("eager"), medians.get("compile"))
    if first is not None:
        why = "; ".join(f"{m}: {first[f'{m}_error']}" for m in ("eager", "compile") if first.get(f"{m}_error"))
    else:
        why = str(reply.get("error") or "")
    why = note_line(why or "no samples came back", 300)
    return TorchTime(None, note=note_line(f"the torch-reference {spec.torch_reference} could not be timed ({why})"))


def with_torch(timing: Timing, torch: TorchTime | None) -> Timing:
    """``timing`` with its speedup over the torch bar (and which run set it), or why there is none; as it is
    where the kernel names no ``torch-reference`` (``torch`` None)."""
    if torch is None:
        return timing
    if torch.median_us is None or timing.median_us <= 0:
        return replace(timing, torch_note=torch.note or "the torch bar has no time")
    return replace(timing, speedup_vs_torch=round(torch.median_us / timing.median_us, 4), torch_mode=torch.mode)
