"""Where the outputs of the timed calls go: files for the parent, or the parked allocation the comparer process reads.

Functions of the :class:`~.worker.Worker` that times a candidate (its ``time`` and ``save_parked`` ops) and of
the one that compares (``compare``); see :mod:`.gpu_compare` for the parked allocation and the rule.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from .gpu_compare import GpuComparer, Parking, park_layout, parked_size
from .messages import (
    BenchFill,
    BenchShapeRequest,
    CompareReply,
    CompareRequest,
    ParkedItem,
    Reply,
    SaveParkedRequest,
    TimeRequest,
)

if TYPE_CHECKING:
    from .worker import Worker

__all__ = ["Parked", "host_buffer", "keep_outputs", "op_compare", "op_save_parked", "reserve"]

Parked = dict[tuple[int, int, int], ParkedItem]
"""Places in the parked allocation by (shape, set, array)."""


def host_buffer(worker: Worker, nbytes: int) -> Any:
    """``nbytes`` of the worker's pinned host buffer (grown when needed)."""
    import numpy as np

    if worker.pinned is None or worker.pinned.size < nbytes:
        memory = worker.cp.cuda.alloc_pinned_memory(max(1, nbytes))
        worker.pinned = np.frombuffer(memory, dtype=np.uint8, count=max(1, nbytes))
    return worker.pinned[:nbytes]


def _to_file(worker: Worker, raw: Any, path: Path) -> None:
    """The uint8 device array ``raw`` written to ``path`` through the pinned host buffer."""
    host = host_buffer(worker, int(raw.size))
    raw.get(stream=worker.stream, out=host)
    with path.open("wb") as f:
        f.write(memoryview(host))


def _save(worker: Worker, arrays: list[Any], shape: BenchShapeRequest, tag: str) -> list[str | None]:
    """Write every ``out``/``inout`` array to a file for the parent to judge."""
    paths: list[str | None] = []
    for j, (arr, a) in enumerate(zip(arrays, shape["arrays"], strict=True)):
        if a["role"] == "in":
            paths.append(None)
            continue
        path = Path(shape["out_dir"]) / f"{tag}-{j}.bin"
        _to_file(worker, arr.view(worker.cp.uint8)[: int(a["count"]) * int(a["itemsize"])], path)
        paths.append(str(path))
    return paths


def _changed_inputs(
    worker: Worker, arrays: list[Any], shape: BenchShapeRequest, fill: BenchFill, tag: str
) -> dict[int, str]:
    """The ``in`` arrays among ``arrays`` that no longer hold what ``fill`` put there (compared on the device with
    the pristine copies), each written to a file for the parent to name: by array index, its path."""
    changed: dict[int, str] = {}
    pristine = worker.pristine
    for j, (arr, a) in enumerate(zip(arrays, shape["arrays"], strict=True)):
        path = fill["files"][j]
        if a["role"] != "in" or path is None or not int(a["count"]):
            continue
        raw = arr.view(worker.cp.uint8)[: int(a["count"]) * int(a["itemsize"])]
        if pristine is not None and pristine.holds(path, raw, worker.stream):
            continue
        target = Path(shape["out_dir"]) / f"{tag}-{j}.bin"
        _to_file(worker, raw, target)
        changed[j] = str(target)
    return changed


def keep_outputs(
    worker: Worker,
    arrays: list[Any],
    shape: BenchShapeRequest,
    tag: str,
    where: tuple[int, int],
    parked: Parked | None,
    fill: BenchFill | None = None,
) -> list[str | None]:
    """What one call left in ``arrays``, the whole device idle first: written to files (their paths), or with
    ``parked`` copied into the parked allocation at the places of ``where`` (shape, set; no paths). Given the
    ``fill`` the call's inputs came from, an ``in`` array the call wrote into goes to a file too (its path in its
    place; None where it is unchanged), so the parent names the input rather than the outputs it spoiled."""
    worker.rt.deviceSynchronize()
    changed = _changed_inputs(worker, arrays, shape, fill, tag) if fill is not None else {}
    if parked is None:
        paths = _save(worker, arrays, shape, tag)
    else:
        assert worker.parking is not None
        for j, (arr, a) in enumerate(zip(arrays, shape["arrays"], strict=True)):
            if a["role"] != "in":
                worker.parking.park(arr.view(worker.cp.uint8), parked[(where[0], where[1], j)], worker.stream)
        worker.stream.synchronize()  # copied before the candidate is called again (the capture after the tweak)
        paths = [None] * len(arrays)
    for j, path in changed.items():
        paths[j] = path
    return paths


def reserve(worker: Worker, h: TimeRequest) -> Parked | None:
    """With ``park``: the parked allocation reserved for this request's outputs, by place; None (outputs to files)
    without it, where they would take more than a sixteenth of the device's memory, or where it cannot be had."""
    if not h.get("park") or worker.park_failed:
        return None
    layout = park_layout(h["shapes"])
    size = parked_size(layout)
    if size > worker.memory // 16:  # beside the pristine inputs' eighth and the candidate's own arrays
        return None
    if worker.parking is None:
        worker.parking = Parking(worker.cp)
    try:
        worker.parking.reserve(size, worker.stream)
    except Exception:  # no IPC here, say: the outputs go to files, as without parking, from now on
        worker.park_failed = True
        return None
    return {(i["shape"], i["set"], i["array"]): i for i in layout}


def op_save_parked(worker: Worker, h: SaveParkedRequest, _bufs: list[bytes]) -> tuple[Reply, list[bytes]]:
    """Write parked outputs to files (those the comparer did not find clear, for the parent's full rules; none where it
    passed them all), then zero the parked allocation: the parent is done with it. A failure here is the timing's
    that parked them, not the next candidate's."""
    if worker.parking is None:
        return {"ok": False, "error": "nothing is parked"}, []
    for item in h["items"]:
        _to_file(worker, worker.parking.view(item["offset"], item["nbytes"]), Path(item["path"]))
    worker.parking.wipe(worker.stream)
    return {"ok": True}, []


def op_compare(worker: Worker, h: CompareRequest, bufs: list[bytes]) -> tuple[CompareReply, list[bytes]]:
    """Only in the comparer process, which is never sent a library (:mod:`.gpu_compare`)."""
    if worker.comparer is None:
        worker.comparer = GpuComparer(worker.cp, limit_bytes=min(16 << 30, worker.memory // 16))
    return worker.comparer.op_compare(h, bufs)
