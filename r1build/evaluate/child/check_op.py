"""The worker's ``check`` op: one shape's calls of a candidate, each ``direct``, ``capture``, ``graph``, ``replay``,
``concurrent`` or ``smem`` (see :mod:`.worker`), in buffer sets made at first use (:class:`CheckBuffers`), with every
allocation's bytes read back after every call and the device state compared with the one at start.

Functions of the :class:`~.worker.Worker` that checks a candidate; :func:`capture_only` is also the timing's capture
check (:mod:`.time_op`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .faults import CallFailed, ContextLost
from .messages import ArrayAlloc, CallRecord, CallRequest, CheckReply, CheckRequest
from .outputs import host_buffer
from .protocol import CAPTURE_ERRORS

if TYPE_CHECKING:
    from .worker import Worker

__all__ = ["CheckBuffers", "capture_only", "op_check"]

_FRESH_STEP = 256
"""Bytes between the candidate addresses of a fresh allocation (keeps every array 256-byte aligned)."""
_FRESH_SLOTS = 128
"""How many candidate addresses a fresh allocation offers (its extra size is ``_FRESH_STEP`` times this)."""


_ALIGN = 256
"""Where the ``aligned`` buffer set puts each array: at a multiple of this many bytes (cudaMalloc's alignment)."""
_CONCURRENT_HOLD_US = 50.0
"""How long a spin kernel holds both streams of a ``concurrent`` pair while the two calls are queued."""


class CheckBuffers:
    """The buffer sets of one ``check`` request, made at first use: 0 (guard-filled allocations), 1 (the same
    layout at addresses never handed to this library before: the ``moved`` call), 2 (each array at a 256-byte
    aligned address: the ``aligned`` calls). Each set is (allocations, call arguments, array regions)."""

    def __init__(self, worker: Worker, h: CheckRequest, bufs: list[bytes]) -> None:
        self.worker, self.h, self.bufs = worker, h, bufs
        self.sets: dict[int, tuple[list[Any], list[Any], list[Any]]] = {}
        self.seen = worker.pointers_seen.setdefault(str(h["lib"]), set())
        self.staged: list[Any] = []  # pinned memory the uploads copy from, until the call's bytes are read back

    def _allocation(self, a: ArrayAlloc, which: int) -> Any:
        cp = self.worker.cp
        total, start = int(a["total"]), int(a["start"])
        if which == 0:
            return cp.empty(total, dtype=cp.uint8)
        if which == 2:  # the array at a multiple of _ALIGN (the pool's blocks are aligned at least that much)
            whole = cp.empty(total + _ALIGN, dtype=cp.uint8)
            shift = -(int(whole.data.ptr) + start) % _ALIGN
            return whole[shift : shift + total]
        # an address this library has never been handed: the memory pool gives a request the blocks of the one
        # before, so a memo keyed on pointers would still hit
        whole = cp.empty(total + _FRESH_STEP * _FRESH_SLOTS, dtype=cp.uint8)
        base = int(whole.data.ptr) + start
        k = next((k for k in range(_FRESH_SLOTS) if base + _FRESH_STEP * k not in self.seen), _FRESH_SLOTS - 1)
        return whole[_FRESH_STEP * k : _FRESH_STEP * k + total]

    def get(self, which: int) -> tuple[list[Any], list[Any], list[Any]]:
        """Allocations (guard-filled), call arguments and array regions of set ``which``."""
        if which not in self.sets:
            arrays = self.h["arrays"]
            with self.worker.stream:
                allocs = [self._allocation(a, which) for a in arrays]
                for alloc, a in zip(allocs, arrays, strict=True):
                    alloc.fill(int(a["guard_byte"]))
            pointers = [int(alloc.data.ptr) + int(a["start"]) for alloc, a in zip(allocs, arrays, strict=True)]
            self.seen.update(pointers)
            regions = [
                alloc[int(a["start"]) : int(a["start"]) + int(a["nbytes"])]
                for alloc, a in zip(allocs, arrays, strict=True)
            ]
            self.sets[which] = (allocs, self.worker.args(self.h["args"], pointers), regions)
        return self.sets[which]

    def upload(self, call: CallRequest) -> None:
        """The call's inputs and its outputs' poison into its buffer set, copied on the worker's stream from pinned
        host memory, so no copy waits: a copy from pageable memory first waits for the stream, and with other
        processes' work on the GPU each wait can cost a time slice. The staging memory is held until the call's
        bytes are read back (:meth:`read_back`), so a second upload before that never writes over it."""
        import numpy as np

        regions = self.get(int(call.get("buffers", 0)))[2]
        parts: list[tuple[Any, Any]] = []
        for j, src in call["inputs"].items():
            if regions[int(j)].size:
                parts.append((regions[int(j)], np.frombuffer(self.bufs[int(src)], dtype=np.uint8)))
        for j, pattern in call["poison"].items():
            region = regions[int(j)]
            if region.size:
                one = np.frombuffer(bytes.fromhex(pattern), dtype=np.uint8)
                parts.append((region, np.tile(one, region.size // one.size)))
        total = sum(int(region.size) for region, _ in parts)
        if not total:
            return
        memory = self.worker.cp.cuda.alloc_pinned_memory(total)
        self.staged.append(memory)
        staging = np.frombuffer(memory, dtype=np.uint8, count=total)
        at = 0
        for region, data in parts:
            n = int(region.size)
            staging[at : at + n] = data
            region.set(staging[at : at + n], stream=self.worker.stream)
            at += n

    def read_back(self, allocs: list[Any]) -> list[bytes]:
        """The bytes of ``allocs``, copied on the worker's stream into its pinned host buffer with one wait at the
        end (a copy into pageable memory waits once per allocation); the uploads' staging memory let go."""
        sizes = [int(alloc.nbytes) for alloc in allocs]
        host = host_buffer(self.worker, sum(sizes))
        views, at = [], 0
        for alloc, n in zip(allocs, sizes, strict=True):
            if n:
                alloc.get(stream=self.worker.stream, out=host[at : at + n], blocking=False)
            views.append(host[at : at + n])
            at += n
        self.worker.stream.synchronize()
        self.staged.clear()
        return [view.tobytes() for view in views]


def op_check(worker: Worker, h: CheckRequest, bufs: list[bytes]) -> tuple[CheckReply, list[bytes]]:
    fn = worker.fn(str(h["lib"]))
    worker.fresh_stream()
    sets = CheckBuffers(worker, h, bufs)
    results: list[CallRecord] = []
    out: list[bytes] = []
    exiting = False
    graph: list[Any] = []  # the graph the last ``graph`` call captured (``replay`` calls launch it again)
    ran: dict[int, int] = {}  # calls already made with the one before them (``concurrent``): their rc
    for i, call in enumerate(h["calls"]):
        record: CallRecord = {"rc": 0, "error": None, "capture_error": None}
        mode = call["mode"]
        started = time.perf_counter()
        try:
            allocs = sets.get(int(call.get("buffers", 0)))[0]
            if i in ran:
                record["rc"] = ran.pop(i)
            else:
                _one_call(worker, fn, h["calls"], i, sets, record, graph, ran)
            try:
                # the whole device idle first: work left on another stream has finished, so the bytes read
                # are the same every run
                worker.rt.deviceSynchronize()
                datas = sets.read_back(allocs)
            except worker.rt.CUDARuntimeError as exc:
                worker.settle("after the call", exc)
            out.extend(datas)
            record["seconds"] = time.perf_counter() - started
            if record["rc"]:
                record["error"] = "returned " + worker.error_text(record["rc"])
            record["device_state"] = worker.restore_state()
        except CallFailed as exc:
            record["error"] = str(exc)
        except ContextLost as exc:
            record["error"] = str(exc)
            record["fatal"] = True
            exiting = True
        results.append(record)
        # an error the call returns while its stream is captured may be the capture's, not the call's:
        # the calls that follow return the call's own
        probe_error = mode == "capture" and record["rc"] and int(record["rc"]) not in CAPTURE_ERRORS
        if exiting or record.get("device_state") or ((record["error"] or record["capture_error"]) and not probe_error):
            break
        worker.tick(i)
    return {"ok": True, "calls": results, "exiting": exiting}, out


def _one_call(
    worker: Worker,
    fn: Any,
    calls: Sequence[CallRequest],
    i: int,
    sets: CheckBuffers,
    record: CallRecord,
    graph: list[Any],
    ran: dict[int, int],
) -> None:
    """Make call ``i`` of a check request as its mode says (a ``concurrent`` call with the next one, whose
    return code goes to ``ran``)."""
    call = calls[i]
    mode = call["mode"]
    args = sets.get(int(call.get("buffers", 0)))[1]
    if mode == "graph":
        graph[:] = [_graph_call(worker, fn, args, call, record, sets.upload)]
        return
    sets.upload(call)
    if mode == "concurrent" and i + 1 < len(calls) and calls[i + 1]["mode"] == "concurrent":
        other = calls[i + 1]
        sets.upload(other)
        worker.stream.synchronize()
        record["rc"], ran[i + 1] = _concurrent(worker, fn, args, sets.get(int(other.get("buffers", 0)))[1])
        return
    # inputs and poison are in place before the call, whatever stream the candidate (wrongly) uses: a
    # violation then shows as such, not as a race with uploads
    worker.stream.synchronize()
    if mode == "replay":
        if not graph or graph[0] is None:
            raise CallFailed("no captured graph to replay")
        try:
            graph[0].launch(worker.stream)
        except worker.rt.CUDARuntimeError as exc:
            worker.settle("replaying the captured graph again", exc)
        return
    if mode == "smem":
        # the fill runs just before the call on its stream, with no pause for another context's work to run
        # in between (a context switch can leave shared memory cleared)
        worker.poison_shared(int(call["smem_pattern"] or 0))
    if mode == "capture":
        capture_only(worker, fn, args, record)
    else:
        record["rc"] = int(fn(*args, worker.stream.ptr))
        record["launch_error"] = worker.launch_error(fn)


def _concurrent(worker: Worker, fn: Any, first: list[Any], second: list[Any]) -> tuple[int, int]:
    """Two calls that start at the same moment on two streams: a spin kernel on a third stream holds both,
    each stream waiting on the one event recorded after it, so both calls are launched before either runs and
    both are released by the same event (a call queued behind the spin on its own stream started some
    microseconds before one waiting on the event: a small call was over before the other began, and
    state shared between calls went unseen on an H100). Their rcs."""
    if worker.side is None:
        worker.side = worker.cp.cuda.Stream(non_blocking=True)
        worker.hold = worker.cp.cuda.Stream(non_blocking=True)
    gate = worker.cp.cuda.Event(disable_timing=True)
    worker.spin(_CONCURRENT_HOLD_US, worker.hold)
    gate.record(worker.hold)
    worker.stream.wait_event(gate)
    worker.side.wait_event(gate)
    rc_first = int(fn(*first, worker.stream.ptr))
    rc_second = int(fn(*second, worker.side.ptr))
    return rc_first, rc_second


def capture_only(worker: Worker, fn: Any, args: list[Any], record: CallRecord) -> None:
    """Capture the call into a graph on the stream (global mode) and throw the graph away: touching the
    legacy default stream or synchronizing the device fails the capture."""
    worker.stream.begin_capture(getattr(worker.rt, "streamCaptureModeGlobal", 0))
    try:
        record["rc"] = int(fn(*args, worker.stream.ptr))
        record["launch_error"] = worker.launch_error(fn)
    finally:
        try:
            worker.stream.end_capture()
        except Exception as exc:  # cudaErrorStreamCaptureInvalidated and friends
            record["capture_error"] = f"{type(exc).__name__}: {exc}"
    try:
        worker.rt.deviceSynchronize()
    except worker.rt.CUDARuntimeError as exc:
        worker.settle("after capturing the call", exc)


def _graph_call(
    worker: Worker,
    fn: Any,
    args: list[Any],
    call: CallRequest,
    record: CallRecord,
    upload: Callable[[CallRequest], None],
) -> Any:
    """Capture the call on the stream, upload the call's inputs, replay only the graph; the graph (None where
    the capture failed or the call returned an error)."""
    mode = getattr(worker.rt, "streamCaptureModeGlobal", 0)
    graph = None
    worker.stream.begin_capture(mode)
    try:
        record["rc"] = int(fn(*args, worker.stream.ptr))
        record["launch_error"] = worker.launch_error(fn)
    finally:
        try:
            graph = worker.stream.end_capture()
        except Exception as exc:  # cudaErrorStreamCaptureInvalidated and friends
            record["capture_error"] = f"{type(exc).__name__}: {exc}"
    if graph is None or record["rc"]:
        if graph is None:
            record["capture_error"] = record["capture_error"] or "the capture produced no graph"
        try:
            worker.rt.deviceSynchronize()
        except worker.rt.CUDARuntimeError as exc:
            worker.settle("after a failed capture", exc)
        upload(call)
        return None
    worker.rt.deviceSynchronize()
    upload(call)
    try:
        graph.launch(worker.stream)
    except worker.rt.CUDARuntimeError as exc:
        worker.settle("launching the captured graph", exc)
    return graph
