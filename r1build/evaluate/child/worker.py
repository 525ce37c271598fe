"""The GPU worker: a child process that loads candidate libraries and calls them on the GPU.

Run as ``python -m r1build.evaluate.child.worker <request fd> <reply fd>`` by :class:`~.process.WorkerHandle`, with a
scrubbed environment and ``CUDA_VISIBLE_DEVICES`` naming one GPU. It knows nothing about specs or tolerances: it
allocates what it is told, uploads what it is sent, calls the entry point through the candidate contract on its
own non-blocking stream, and sends back raw bytes and timings. Judging happens in the parent (``compare``), or
for the outputs of timed calls in a second worker process that never loads a library (``compare``), which also means
a candidate that corrupts this process cannot forge a verdict about itself beyond the bytes it leaves on the GPU.

Operations (``op`` of a request):

``load``
    dlopen one candidate library and bind its entry point with ctypes argument types.
``check``
    one shape: allocate every array with guard bands, then run a sequence of calls into the same buffers,
    each ``direct``, ``capture`` (capture into a graph on the stream and discard it), ``graph`` (capture on the
    stream, replay only the graph), ``replay`` (replay that graph again), ``concurrent`` (two calls at once on two
    streams) or ``smem`` (shared memory of every SM pre-filled with a pattern first), in buffer set 0, 1 (new
    addresses) or 2 (256-byte-aligned arrays); return every allocation's bytes after every call.
``time``
    time the entry point per benchmark shape: warm-up, L2 flushed before each launch, rotated input sets,
    CUDA events on the stream, a CUDA graph of several calls when one call is shorter than ``graph_below_us``;
    what the timed calls left, and what the extra calls after them left (:mod:`.extras`: a call whose outputs
    already hold finite values, replays of one captured graph), goes to files, or (``park``) into one allocation
    another process reads.
``save_parked``
    write parked outputs to files (any the comparer did not pass), then zero the parked allocation.
``compare``
    in the comparer process, which is never sent a library: compare another worker's parked outputs with the
    reference's on this process's GPU (:mod:`.gpu_compare`).
``time_reference``
    time the spec's numpy reference called with cupy arrays (many numpy functions dispatch to cupy; :mod:`.measures`).
``time_torch``
    time the spec's ``torch-reference`` eager and under ``torch.compile`` on the same inputs (cupy arrays through
    DLPack; :mod:`.measures`).
``floors``
    measure device bandwidth (device-to-device copy) and fp32 peak (SGEMM and an FMA kernel; :mod:`.measures`).

A CUDA error that leaves the context unusable (illegal address, misaligned address, ...) is reported with
``"exiting": true`` and the worker exits; the parent starts a fresh one.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Literal, NoReturn

from ...selection.noise import settled
from .extras import graph_replays, lazy_output_call
from .gpu_compare import GpuComparer, Parking
from .guarded import PAST_THE_END, GuardedArrays
from .harness import CTYPES
from .measures import floors, time_reference, time_torch
from .messages import (
    ArgItem,
    ArrayAlloc,
    BenchFill,
    BenchShapeRequest,
    CallRecord,
    CallRequest,
    CheckReply,
    CheckRequest,
    Hello,
    LoadRequest,
    Reply,
    TimedShape,
    TimeReply,
    TimeRequest,
)
from .outputs import Parked, host_buffer, keep_outputs, op_compare, op_save_parked, reserve
from .pristine import PristineInputs
from .protocol import CAPTURE_ERRORS, PeerClosed, read_message, write_message

LAST_ERROR_SYMBOL = "r1build_last_error"
"""The function the link step adds to every candidate library (:data:`r1build.gate.link.LAST_ERROR_SYMBOL`: the
same name, kept here so the worker imports nothing of the gate): the library's own ``cudaGetLastError``."""

__all__ = ["main"]

_HELPERS = r"""
extern "C" __global__ void r1_spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
}
extern "C" __global__ void r1_flush(const uint4* __restrict__ buf, unsigned long long n16, unsigned* sink) {
    uint4 acc = make_uint4(0u, 0u, 0u, 0u);
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n16;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        uint4 v = buf[i];
        acc.x ^= v.x; acc.y ^= v.y; acc.z ^= v.z; acc.w ^= v.w;
    }
    if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x9E3779B9u) sink[0] = acc.x;
}
extern "C" __global__ void r1_smem_poison(unsigned pattern, unsigned words, unsigned* sink) {
    extern __shared__ unsigned smem[];
    volatile unsigned* v = smem;
    for (unsigned i = threadIdx.x; i < words; i += blockDim.x) v[i] = pattern;
    __syncthreads();
    if (v[threadIdx.x % words] == pattern + 1u) sink[0] = 1u;
}
extern "C" __global__ void r1_fma_peak(float* out, int iters, float b, float c) {
    float a0 = threadIdx.x * 1e-3f, a1 = a0 + 1.f, a2 = a0 + 2.f, a3 = a0 + 3.f;
    float a4 = a0 + 4.f, a5 = a0 + 5.f, a6 = a0 + 6.f, a7 = a0 + 7.f;
#pragma unroll 4
    for (int i = 0; i < iters; ++i) {
        a0 = fmaf(a0, b, c); a1 = fmaf(a1, b, c); a2 = fmaf(a2, b, c); a3 = fmaf(a3, b, c);
        a4 = fmaf(a4, b, c); a5 = fmaf(a5, b, c); a6 = fmaf(a6, b, c); a7 = fmaf(a7, b, c);
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
}
"""


_FRESH_STEP = 256
"""Bytes between the candidate addresses of a fresh allocation (keeps every array 256-byte aligned)."""
_FRESH_SLOTS = 128
"""How many candidate addresses a fresh allocation offers (its extra size is ``_FRESH_STEP`` times this)."""


_ALIGN = 256
"""Where the ``aligned`` buffer set puts each array: at a multiple of this many bytes (cudaMalloc's alignment)."""
_CONCURRENT_HOLD_US = 50.0
"""How long a spin kernel holds both streams of a ``concurrent`` pair while the two calls are queued."""
_IDLE_HOLD_US = 30.0
"""How long a spin kernel (one thread) holds the stream after an idle gap while the host queues a sample's event,
call and event, so the host's launch latency is not in the sample."""


_ROLES = frozenset({"in", "out", "inout"})
"""Every role of an array."""


_RUNS_CANDIDATES = frozenset({"load", "check", "time", "time_reference", "time_torch", "floors"})
"""Requests before which the parked outputs are zeroed (any that may run a candidate's code, or a reference)."""


class ContextLost(Exception):
    """The CUDA context is unusable; the worker must exit after replying."""


class CallFailed(Exception):
    """A candidate call returned an error or its work raised one (context still fine)."""


class _CheckBuffers:
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
            self.sets[which] = (allocs, self.worker._args(self.h["args"], pointers), regions)
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


class Worker:
    """State of one worker: the device, the stream, loaded libraries and helper kernels."""

    def __init__(self, reply_fd: int) -> None:
        import cupy

        self.cp = cupy
        self.rt = cupy.cuda.runtime
        self.reply_fd = reply_fd
        cupy.cuda.Device(0).use()
        props = self.rt.getDeviceProperties(0)
        self.name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        self.capability = (int(props["major"]), int(props["minor"]))
        self.sm_count = int(props["multiProcessorCount"])
        self.l2_bytes = int(props.get("l2CacheSize", 0)) or (40 << 20)
        self.memory = int(props["totalGlobalMem"])
        self.smem_optin = int(props.get("sharedMemPerBlockOptin", 0)) or 48 * 1024
        clock = int(props.get("clockRate", 0))
        if not clock:
            try:
                clock = int(self.rt.deviceGetAttribute(13, 0))  # cudaDevAttrClockRate, kHz
            except Exception:
                clock = 2_000_000
        self.clock_khz = clock
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.baseline_state = self.device_state()
        self.libs: dict[str, tuple[Any, Any]] = {}
        self.pointers_seen: dict[str, set[int]] = {}
        """Per library: every array address handed to its entry point, so that buffer set 1 is never one of them."""
        self._kernels: dict[str, Any] = {}
        self._flush: Any = None
        self._flush_us = 0.0
        self._overhead_us: float | None = None
        self._overhead_fresh = False  # measured again during this timing request (launch_overhead_us)
        self._empty_us = 0.0
        self._sink: Any = None
        self._side: Any = None
        """The second stream of the ``concurrent`` calls."""
        self._hold: Any = None
        """The stream whose spin kernel holds both ``concurrent`` calls until one event releases them."""
        self._guarded_now = False
        """Whether every array of the benchmark shape being timed ends at unmapped memory."""
        self._events: list[tuple[Any, Any]] = []
        self._pristine: PristineInputs | None = None
        self._last_error: dict[int, Any] = {}
        """Per loaded entry point (by ``id``), its library's ``r1build_last_error`` (:mod:`r1build.gate.link`)."""
        self.pinned: Any = None
        """The pinned host buffer outputs go through to their files (:func:`.outputs.host_buffer`)."""
        self.parking: Parking | None = None
        """Where the outputs of the timed calls are parked for the comparer process (:mod:`.outputs`)."""
        self.park_failed = False
        """Whether reserving the parked allocation failed once (no IPC here): outputs go to files from then on."""
        self.comparer: GpuComparer | None = None
        """In the comparer process: the reference's outputs and the rule (:mod:`.gpu_compare`)."""
        self.guarded: GuardedArrays | None = None
        """The arrays of the benchmark shapes, each ending at unmapped memory (:mod:`.guarded`)."""
        self.guarded_failed = False
        """Whether the driver has no virtual memory management: benchmark arrays come from cupy's pool."""

    @property
    def pristine(self) -> PristineInputs | None:
        """The device copies of the input files (None before the first fill)."""
        return self._pristine

    def launch_error(self, fn: Any) -> str | None:
        """What the candidate's own CUDA runtime holds as its last error after a call of ``fn`` (a launch that
        failed and that the call did not read itself: an invalid configuration, say), read and cleared through the
        library's ``r1build_last_error``; None where there is none or the library has no such function."""
        last = self._last_error.get(id(fn))
        code = int(last()) if last is not None else 0
        return f"{self.error_text(code)} ({code})" if code else None

    # -- plumbing ----------------------------------------------------------------------------------------
    def hello(self) -> Hello:
        return {
            "ok": True,
            "device": self.name,
            "capability": list(self.capability),
            "sm_count": self.sm_count,
            "l2_bytes": self.l2_bytes,
            "memory": self.memory,
            "smem_optin": self.smem_optin,
            "clock_khz": self.clock_khz,
            "driver": int(self.rt.driverGetVersion()),
            "runtime": int(self.rt.runtimeGetVersion()),
            "cupy": str(self.cp.__version__),
            "pid": os.getpid(),
        }

    def tick(self, n: int) -> None:
        write_message(self.reply_fd, {"tick": n})

    def error_text(self, code: int) -> str:
        try:
            return str(self.rt.CUDARuntimeError(code))
        except Exception:
            return f"CUDA error {code}"

    def context_ok(self) -> bool:
        try:
            self.rt.deviceSynchronize()
            probe = self.cp.zeros(1, dtype=self.cp.int32)
            probe += 1
            self.rt.deviceSynchronize()
            return int(probe.get()[0]) == 1
        except Exception:
            return False

    def settle(self, where: str, exc: BaseException) -> NoReturn:
        """After a CUDA error: raise :class:`ContextLost` when the context is gone, else :class:`CallFailed`."""
        text = f"{where}: {exc}"
        if not self.context_ok():
            raise ContextLost(text) from None
        raise CallFailed(text) from None

    def kernel(self, name: str) -> Any:
        if name not in self._kernels:
            self._kernels[name] = self.cp.RawKernel(_HELPERS, name, options=("-std=c++17",))
        return self._kernels[name]

    def event_pair(self, i: int) -> tuple[Any, Any]:
        while len(self._events) <= i:
            self._events.append((self.cp.cuda.Event(), self.cp.cuda.Event()))
        return self._events[i]

    def fn(self, key: str) -> Any:
        if key not in self.libs:
            raise CallFailed(f"library {key} is not loaded")
        return self.libs[key][1]

    # -- GPU helpers -------------------------------------------------------------------------------------
    def spin(self, microseconds: float, stream: Any = None) -> None:
        """Hold ``stream`` (the worker's own by default) for ``microseconds`` with a one-thread spin kernel."""
        kernel = self.kernel("r1_spin")
        cycles = int(microseconds * self.clock_khz / 1000.0)
        with stream if stream is not None else self.stream:
            kernel((1,), (1,), (self.cp.int64(cycles),))

    def flush_l2(self) -> None:
        """Evict the L2 by *reading* a buffer twice its size: the lines left behind are clean, so the timed
        kernel pays no write-back of someone else's data (a memset flush leaves dirty lines and adds noise)."""
        cp = self.cp
        if self._flush is None:
            size = max(2 * self.l2_bytes, 64 << 20) // 16 * 16
            self._flush = cp.zeros(size, dtype=cp.uint8)
        if self._sink is None:
            self._sink = cp.zeros(1, dtype=cp.uint32)
        kernel = self.kernel("r1_flush")
        with self.stream:
            kernel((self.sm_count * 4,), (512,), (self._flush, cp.uint64(self._flush.nbytes // 16), self._sink))

    def flush_time_us(self) -> float:
        if not self._flush_us:
            e0, e1 = self.event_pair(0)
            times = []
            for _ in range(5):
                e0.record(self.stream)
                self.flush_l2()
                e1.record(self.stream)
                e1.synchronize()
                times.append(self.cp.cuda.get_elapsed_time(e0, e1) * 1000.0)
            self._flush_us = statistics.median(times)
        return self._flush_us

    def launch_overhead_us(self) -> float:
        """What the events of a sample add to the kernel's own duration: the median of the same sample (L2
        flush, event, launch, event) around a kernel that does nothing, less what such a kernel costs when it is
        one of many back to back in a CUDA graph (there no event and no host sits between launches, so that cost
        is the kernel's own: what a profiler reports as the duration of an empty kernel). Subtracted from
        event-timed samples, so a time is the kernel's duration on the GPU as Nsight Compute reports it.

        Measured three times at the worker's first timing and once more at each timing request after it (see
        :meth:`op_time`), the least kept: another process's work on the GPU can only lengthen a measurement, and an
        overhead taken too long shortens every time it is subtracted from (one resolve on an H100 timed every
        honest ``sum_all`` at a third of its memory floor, and rejected them all as faster than the hardware)."""
        if not self._overhead_fresh:
            for n in (60, 60, 60) if self._overhead_us is None else (20,):
                overhead, own = self._overhead_once(n)
                if self._overhead_us is None or overhead < self._overhead_us:
                    self._overhead_us, self._empty_us = overhead, own
            self._overhead_fresh = True
        assert self._overhead_us is not None
        return self._overhead_us

    def _overhead_once(self, n: int) -> tuple[float, float]:
        """One measurement of :meth:`launch_overhead_us` (median of ``n`` samples): the overhead and the empty
        kernel's own duration, in us."""
        kernel = self.kernel("r1_spin")
        zero = (self.cp.int64(0),)

        def empty(_k: int) -> None:
            with self.stream:
                kernel((1,), (1,), zero)

        sample = statistics.median(self._measure(empty, n, 1, True, 20, 40.0))
        reps = 64
        graph = self._graph_of(empty, reps)
        own = statistics.median(self._measure(lambda _k: graph.launch(self.stream), 20, reps, False, 10, 40.0))
        return max(sample - own, 0.0), own

    def _graph_of(self, call: Callable[[int], None], reps: int) -> Any:
        """A CUDA graph of ``call(0)`` ... ``call(reps - 1)`` back to back, captured on the stream (global mode) and
        launched once, so its first timed launch is not its first."""
        self.stream.begin_capture(getattr(self.rt, "streamCaptureModeGlobal", 0))
        try:
            for k in range(reps):
                call(k)
        finally:
            graph = self.stream.end_capture()
        graph.launch(self.stream)
        self.stream.synchronize()
        return graph

    def poison_shared(self, pattern: int) -> None:
        kernel = self.kernel("r1_smem_poison")
        kernel.max_dynamic_shared_size_bytes = self.smem_optin
        if self._sink is None:
            self._sink = self.cp.zeros(1, dtype=self.cp.uint32)
        words = self.smem_optin // 4
        with self.stream:
            kernel(
                (2 * self.sm_count,),
                (1024,),
                (self.cp.uint32(pattern & 0xFFFFFFFF), self.cp.uint32(words), self._sink),
                shared_mem=self.smem_optin,
            )

    def random_fill(self, arr: Any, dtype: str) -> None:
        cp = self.cp
        n = arr.size
        with self.stream:
            if dtype in ("float32", "float64", "float16"):
                arr[...] = cp.random.standard_normal(n, dtype=cp.float32).reshape(arr.shape).astype(arr.dtype)
            elif dtype == "bfloat16":
                bits = cp.random.standard_normal(n, dtype=cp.float32).view(cp.uint32) >> 16
                arr[...] = bits.astype(cp.uint16).reshape(arr.shape)
            elif dtype == "bool":
                arr[...] = cp.random.randint(0, 2, n).astype(cp.bool_).reshape(arr.shape)
            elif dtype.startswith("uint"):
                arr[...] = cp.random.randint(0, 201, n).astype(arr.dtype).reshape(arr.shape)
            else:
                arr[...] = cp.random.randint(-100, 101, n).astype(arr.dtype).reshape(arr.shape)

    def typed_empty(self, dtype: str, count: int) -> Any:
        cp = self.cp
        return cp.empty(max(count, 1), dtype=_numpy_name(dtype))

    def bench_empty(self, dtype: str, count: int) -> tuple[Any, bool]:
        """An array of a benchmark shape: one that ends where unmapped memory begins (:mod:`.guarded`) where the
        driver allows it (True), else from cupy's pool (False)."""
        if self.guarded is None and not self.guarded_failed:
            self.guarded = GuardedArrays.make(self.cp, 0, min(8 << 30, self.memory // 8))
            self.guarded_failed = self.guarded is None
        if self.guarded is not None:
            try:
                return self.guarded.empty(_numpy_name(dtype), count), True
            except RuntimeError:  # out of memory, say: this array as before
                pass
        return self.typed_empty(dtype, count), False

    # -- operations --------------------------------------------------------------------------------------
    def op_load(self, h: LoadRequest, _bufs: list[bytes]) -> tuple[Reply, list[bytes]]:
        key = str(h["lib"])
        if key not in self.libs:
            lib = ctypes.CDLL(str(h["path"]), mode=os.RTLD_LOCAL | os.RTLD_NOW)
            fn = getattr(lib, str(h["entry"]))
            fn.argtypes = [CTYPES[code] for code in h["argtypes"]] + [ctypes.c_void_p]
            fn.restype = ctypes.c_int
            last = getattr(lib, LAST_ERROR_SYMBOL, None)
            if last is not None:
                last.argtypes, last.restype = [], ctypes.c_int
                self._last_error[id(fn)] = last
            self.libs[key] = (lib, fn)
        return {"ok": True}, []

    def _args(self, spec: Sequence[ArgItem], pointers: Sequence[int]) -> list[Any]:
        out: list[Any] = []
        for item in spec:
            out.append(pointers[item["array"]] if "array" in item else item["scalar"])
        return out

    # -- device state a candidate must leave as it found it -------------------------------------------------
    _LIMITS: ClassVar[dict[int, str]] = {
        0: "cudaLimitStackSize",
        1: "cudaLimitPrintfFifoSize",
        2: "cudaLimitMallocHeapSize",
        3: "cudaLimitDevRuntimeSyncDepth",
        4: "cudaLimitDevRuntimePendingLaunchCount",
        5: "cudaLimitMaxL2FetchGranularity",
        6: "cudaLimitPersistingL2CacheSize",
    }

    def device_state(self) -> dict[str, int]:
        """What a candidate could change that would change another's behaviour or time: the device limits, and
        the use of the device's default memory pool (``cudaMallocAsync``; cupy never uses it)."""
        state: dict[str, int] = {}
        for code, name in self._LIMITS.items():
            with contextlib.suppress(Exception):
                state[name] = int(self.rt.deviceGetLimit(code))
        with contextlib.suppress(Exception):
            pool = self.rt.deviceGetDefaultMemPool(0)
            state["default memory pool bytes in use (cudaMallocAsync)"] = int(self.rt.memPoolGetAttribute(pool, 8))
        return state

    def restore_state(self) -> str | None:
        """Compare the device state with the one at start; put every limit back; what changed, or None."""
        now = self.device_state()
        differs = [name for name, value in now.items() if value != self.baseline_state.get(name)]
        if not differs:
            return None
        # the driver itself grows the stack for kernels with deep frames: restored, never held against a kernel
        changed = [
            f"{name} from {self.baseline_state.get(name)} to {now[name]}"
            for name in differs
            if name != "cudaLimitStackSize"
        ]
        for code, name in self._LIMITS.items():
            if name in self.baseline_state and now.get(name) != self.baseline_state[name]:
                with contextlib.suppress(Exception):
                    self.rt.deviceSetLimit(code, self.baseline_state[name])
        with contextlib.suppress(Exception):
            self.rt.ctxResetPersistingL2Cache()
        with contextlib.suppress(Exception):
            pool = self.rt.deviceGetDefaultMemPool(0)
            self.rt.memPoolTrimTo(pool, 0)
            self.rt.memPoolSetAttribute(pool, 8, 0)  # reset the high-water mark
        self.baseline_state = self.device_state()
        return "; ".join(changed) or None

    def fresh_stream(self) -> None:
        """A new stream for every request that calls a candidate: attributes one candidate set on its stream (an
        access-policy window, a priority) never reach the next."""
        self.stream = self.cp.cuda.Stream(non_blocking=True)
        self._side = None

    def op_check(self, h: CheckRequest, bufs: list[bytes]) -> tuple[CheckReply, list[bytes]]:
        fn = self.fn(str(h["lib"]))
        self.fresh_stream()
        sets = _CheckBuffers(self, h, bufs)
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
                    self._one_call(fn, h["calls"], i, sets, record, graph, ran)
                try:
                    # the whole device idle first: work left on another stream has finished, so the bytes read
                    # are the same every run
                    self.rt.deviceSynchronize()
                    datas = sets.read_back(allocs)
                except self.rt.CUDARuntimeError as exc:
                    self.settle("after the call", exc)
                out.extend(datas)
                record["seconds"] = time.perf_counter() - started
                if record["rc"]:
                    record["error"] = "returned " + self.error_text(record["rc"])
                record["device_state"] = self.restore_state()
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
            if (
                exiting
                or record.get("device_state")
                or ((record["error"] or record["capture_error"]) and not probe_error)
            ):
                break
            self.tick(i)
        return {"ok": True, "calls": results, "exiting": exiting}, out

    def _one_call(
        self,
        fn: Any,
        calls: Sequence[CallRequest],
        i: int,
        sets: _CheckBuffers,
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
            graph[:] = [self._graph_call(fn, args, call, record, sets.upload)]
            return
        sets.upload(call)
        if mode == "concurrent" and i + 1 < len(calls) and calls[i + 1]["mode"] == "concurrent":
            other = calls[i + 1]
            sets.upload(other)
            self.stream.synchronize()
            record["rc"], ran[i + 1] = self._concurrent(fn, args, sets.get(int(other.get("buffers", 0)))[1])
            return
        # inputs and poison are in place before the call, whatever stream the candidate (wrongly) uses: a
        # violation then shows as such, not as a race with uploads
        self.stream.synchronize()
        if mode == "replay":
            if not graph or graph[0] is None:
                raise CallFailed("no captured graph to replay")
            try:
                graph[0].launch(self.stream)
            except self.rt.CUDARuntimeError as exc:
                self.settle("replaying the captured graph again", exc)
            return
        if mode == "smem":
            # the fill runs just before the call on its stream, with no pause for another context's work to run
            # in between (a context switch can leave shared memory cleared)
            self.poison_shared(int(call["smem_pattern"] or 0))
        if mode == "capture":
            self._capture_only(fn, args, record)
        else:
            record["rc"] = int(fn(*args, self.stream.ptr))
            record["launch_error"] = self.launch_error(fn)

    def _concurrent(self, fn: Any, first: list[Any], second: list[Any]) -> tuple[int, int]:
        """Two calls that start at the same moment on two streams: a spin kernel on a third stream holds both,
        each stream waiting on the one event recorded after it, so both calls are launched before either runs and
        both are released by the same event (a call queued behind the spin on its own stream started some
        microseconds before one waiting on the event: a small call was over before the other began, and
        state shared between calls went unseen on an H100). Their rcs."""
        if self._side is None:
            self._side = self.cp.cuda.Stream(non_blocking=True)
            self._hold = self.cp.cuda.Stream(non_blocking=True)
        gate = self.cp.cuda.Event(disable_timing=True)
        self.spin(_CONCURRENT_HOLD_US, self._hold)
        gate.record(self._hold)
        self.stream.wait_event(gate)
        self._side.wait_event(gate)
        rc_first = int(fn(*first, self.stream.ptr))
        rc_second = int(fn(*second, self._side.ptr))
        return rc_first, rc_second

    def _capture_only(self, fn: Any, args: list[Any], record: CallRecord) -> None:
        """Capture the call into a graph on the stream (global mode) and throw the graph away: touching the
        legacy default stream or synchronizing the device fails the capture."""
        self.stream.begin_capture(getattr(self.rt, "streamCaptureModeGlobal", 0))
        try:
            record["rc"] = int(fn(*args, self.stream.ptr))
            record["launch_error"] = self.launch_error(fn)
        finally:
            try:
                self.stream.end_capture()
            except Exception as exc:  # cudaErrorStreamCaptureInvalidated and friends
                record["capture_error"] = f"{type(exc).__name__}: {exc}"
        try:
            self.rt.deviceSynchronize()
        except self.rt.CUDARuntimeError as exc:
            self.settle("after capturing the call", exc)

    def _graph_call(
        self, fn: Any, args: list[Any], call: CallRequest, record: CallRecord, upload: Callable[[CallRequest], None]
    ) -> Any:
        """Capture the call on the stream, upload the call's inputs, replay only the graph; the graph (None where
        the capture failed or the call returned an error)."""
        mode = getattr(self.rt, "streamCaptureModeGlobal", 0)
        graph = None
        self.stream.begin_capture(mode)
        try:
            record["rc"] = int(fn(*args, self.stream.ptr))
            record["launch_error"] = self.launch_error(fn)
        finally:
            try:
                graph = self.stream.end_capture()
            except Exception as exc:  # cudaErrorStreamCaptureInvalidated and friends
                record["capture_error"] = f"{type(exc).__name__}: {exc}"
        if graph is None or record["rc"]:
            if graph is None:
                record["capture_error"] = record["capture_error"] or "the capture produced no graph"
            try:
                self.rt.deviceSynchronize()
            except self.rt.CUDARuntimeError as exc:
                self.settle("after a failed capture", exc)
            upload(call)
            return None
        self.rt.deviceSynchronize()
        upload(call)
        try:
            graph.launch(self.stream)
        except self.rt.CUDARuntimeError as exc:
            self.settle("launching the captured graph", exc)
        return graph

    def _fill(
        self, arrays: list[Any], shape: BenchShapeRequest, fill: BenchFill, roles: frozenset[str] = _ROLES
    ) -> None:
        """Upload one input set into those of ``arrays`` whose role is in ``roles``: ``in``/``inout`` from the
        files the parent wrote (through the checksummed device copies of :class:`~.pristine.PristineInputs`),
        ``out`` poisoned (bytes repeated over the array, on the device)."""
        if self._pristine is None:
            self._pristine = PristineInputs(self.cp, limit_bytes=min(16 << 30, self.memory // 8))
        for j, (arr, a) in enumerate(zip(arrays, shape["arrays"], strict=True)):
            if not int(a["count"]) or a["role"] not in roles:
                continue
            raw = arr.view(self.cp.uint8)[: int(a["count"]) * int(a["itemsize"])]
            path = fill["files"][j]
            if path is not None:
                self._pristine.copy_into(path, raw, self.stream)
            else:
                self._poison(raw, bytes.fromhex(fill["poison"][j] or "00"))

    def _poison(self, raw: Any, one: bytes) -> None:
        """``one`` repeated over the uint8 device array ``raw`` (a whole number of repeats)."""
        words = {1: self.cp.uint8, 2: self.cp.uint16, 4: self.cp.uint32, 8: self.cp.uint64}.get(len(one))
        if words is not None and raw.size % len(one) == 0 and int(raw.data.ptr) % len(one) == 0:
            with self.stream:
                raw.view(words).fill(words(int.from_bytes(one, "little")))
            return
        import numpy as np

        raw.set(np.tile(np.frombuffer(one, dtype=np.uint8), raw.size // len(one)), stream=self.stream)

    def _set_for(self, shape: BenchShapeRequest, fill: BenchFill) -> tuple[list[Any], list[Any]]:
        made = [self.bench_empty(a["dtype"], int(a["count"])) for a in shape["arrays"]]
        arrays = [arr for arr, _ in made]
        self._guarded_now = all(guarded for _, guarded in made)
        self._fill(arrays, shape, fill)
        self.stream.synchronize()
        return arrays, self._args(shape["args"], [int(arr.data.ptr) for arr in arrays])

    def _bench_checks(
        self,
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
            rc = int(fn(*args, self.stream.ptr))
            return "returned " + self.error_text(rc) if rc else None

        for k, (arrays, args) in enumerate(sets):
            if has_inout:
                self._fill(arrays, shape, shape["sets"][k])
                self.stream.synchronize()
                failed = call(args)
                if failed:
                    out["check_error"] = failed
                    return out
            kept = keep_outputs(self, arrays, shape, f"{tag}-set{k}", (si, k), parked, shape["sets"][k])
            out["outputs"].append(kept)
        lap("check_outputs")
        failed = lazy_output_call(self, fn, shape, sets[0], (tag, si, parked), out)
        lap("check_lazy")
        if failed:
            out["check_error"] = failed
            return out
        arrays, args = sets[0]
        self._fill(arrays, shape, shape["tweak"])
        self.stream.synchronize()
        failed = call(args)
        if failed:
            out["check_error"] = failed
            return out
        out["tweak_outputs"] = keep_outputs(
            self, arrays, shape, f"{tag}-tweak", (si, len(sets)), parked, shape["tweak"]
        )
        lap("check_tweak")
        self._capture_and_replays(fn, shape, sets[0], (tag, si, parked), out, lap)
        out["device_state"] = self.restore_state()
        return out

    def _capture_and_replays(
        self,
        fn: Any,
        shape: BenchShapeRequest,
        first: tuple[list[Any], list[Any]],
        where: tuple[str, int, Parked | None],
        out: TimedShape,
        lap: _Laps,
    ) -> None:
        """The last of :meth:`_bench_checks`: a capture of the call on set ``first``, then (where it captured) the
        replays of one captured graph (:mod:`.extras`); what they found added to ``out``."""
        record: CallRecord = {"rc": 0, "error": None, "capture_error": None}
        self._capture_only(fn, first[1], record)
        lap("check_capture")
        out["capture_error"] = record["capture_error"]
        out["capture_rc"] = record["rc"]
        out["launch_error"] = record.get("launch_error")
        if not record["capture_error"] and not record["rc"]:
            failed = graph_replays(self, fn, shape, first, where, out)
            lap("check_replays")
            if failed:
                out["extra_error"] = failed

    def _measure(
        self,
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
            self.spin(min(100_000.0, b * host_us))
            pairs = []
            for j in range(b):
                e0, e1 = self.event_pair(j)
                if flush:
                    self.flush_l2()
                e0.record(self.stream)
                launch(done + j)
                e1.record(self.stream)
                pairs.append((e0, e1))
            self.stream.synchronize()
            samples += [self.cp.cuda.get_elapsed_time(e0, e1) * 1000.0 / per_sample for e0, e1 in pairs]
            done += b
            self.tick(done)  # progress: the parent's deadline is per step, so a hang shows in seconds
        return samples

    def op_time(self, h: TimeRequest, _bufs: list[bytes]) -> tuple[TimeReply, list[bytes]]:
        fn = self.fn(str(h["lib"]))
        budget_us = float(h.get("budget_s", 0.3)) * 1e6
        min_n, max_n = int(h.get("min_samples", 20)), int(h.get("max_samples", 200))
        graph_below = float(h.get("graph_below_us", 10.0))
        stop_error = float(h.get("stop_error", 0.0))
        shapes_out = []
        self.fresh_stream()
        self._overhead_fresh = False
        parked, reply = reserve(self, h), TimeReply(ok=True)
        idle_gap_us = float(h.get("idle_gap_us", 1000.0)) if h.get("regime") == "idle-gaps" else None
        for si, shape in enumerate(h["shapes"]):
            try:
                if idle_gap_us is not None:  # the back-to-back timing of this library checked its outputs
                    shapes_out.append(self._time_idle(fn, shape, budget_us, (min_n, max_n, stop_error), idle_gap_us))
                    continue
                timed, sets = self._time_shape(fn, shape, budget_us, (min_n, max_n, stop_error), graph_below)
                timed["guarded"] = self._guarded_now
                start = time.perf_counter()
                tag = f"{h['lib'].replace(':', '-')}-s{si}"
                timed = self._bench_checks(fn, shape, sets, tag, timed, si, parked)
                if timed.get("check_error") and not self.context_ok():
                    raise CallFailed(str(timed["check_error"]))  # a fault the call's return code showed
                timed["seconds"]["checks"] = time.perf_counter() - start
                del sets
                shapes_out.append(timed)
            except (self.rt.CUDARuntimeError, CallFailed) as exc:
                if isinstance(exc, CallFailed) and self.context_ok():
                    raise
                self._timing_failed(fn, si, exc)
            finally:
                self.cp.get_default_memory_pool().free_all_blocks()
                if self.guarded is not None and self.context_ok():
                    self.guarded.recycle()
            self.tick(si)
        if parked is not None and self.parking is not None:
            try:
                self.stream.synchronize()  # the comparer reads the parked copies from another process
            except self.rt.CUDARuntimeError as exc:
                self.settle("parking the outputs", exc)
            reply["parked"] = {"handle": self.parking.handle, "size": self.parking.size}
        reply["shapes"] = shapes_out
        return reply, []

    def _timing_failed(self, fn: Any, si: int, exc: BaseException) -> NoReturn:
        """Raise what a CUDA error while timing shape ``si`` means: a launch that failed in the library's own
        runtime while the call returned cudaSuccess (an invalid configuration only at the benchmark size spoils
        the capture of the timed graph, and the capture's error hid it); else the error, with where an illegal
        address at a benchmark shape points (past the end of an array)."""
        where = f"timing shape {si}"
        if self.context_ok():
            launch = self.launch_error(fn)
            if launch is not None:
                # worded as a return code is ("returned ..."): the parent judges it the call's fault, as the
                # checks' own launch-error verdict does (incorrect), not a crash of the harness
                raise CallFailed(f"returned cudaSuccess, though its launch failed: {launch} ({where}; then: {exc})")
        self.settle(where + (f" ({PAST_THE_END})" if self._guarded_now else ""), exc)

    def _time_idle(
        self, fn: Any, shape: BenchShapeRequest, budget_us: float, counts: tuple[int, int, float], gap_us: float
    ) -> TimedShape:
        """Samples of one benchmark shape in the ``idle-gaps`` regime: per sample the L2 is flushed, the GPU sits
        idle for ``gap_us`` (the host sleeps with nothing queued), then a short spin kernel holds the stream while
        the host queues an event, one call and an event: the call's own duration (less the launch overhead of
        such a sample, as in the events mode) from a cold L2 after an idle GPU, as a serving engine calls it.
        Stops as :meth:`_time_shape` does, or when the samples' own time (the gaps not counted) is spent."""
        min_n, max_n, stop_error = counts
        started = time.perf_counter()
        sets = [self._set_for(shape, fill) for fill in shape["sets"]]
        sampling = time.perf_counter()
        rotation, stream_ptr = len(sets), self.stream.ptr

        def call(k: int) -> None:
            rc = fn(*sets[k % rotation][1], stream_ptr)
            if rc:
                raise CallFailed(f"returned {self.error_text(int(rc))}")

        call(0)
        self.stream.synchronize()
        overhead = self.launch_overhead_us()
        enough = _stop_rule(min_n, stop_error, 0.0, overhead)
        raw: list[float] = []
        e0, e1 = self.event_pair(0)
        while len(raw) < max_n and not (len(raw) >= min_n and (sum(raw) >= budget_us or (enough and enough(raw)))):
            self.flush_l2()
            self.stream.synchronize()
            time.sleep(gap_us / 1e6)
            self.spin(_IDLE_HOLD_US)
            e0.record(self.stream)
            call(len(raw))
            e1.record(self.stream)
            e1.synchronize()
            raw.append(self.cp.cuda.get_elapsed_time(e0, e1) * 1000.0)
            if len(raw) % 10 == 0:
                self.tick(len(raw))
        return {
            "samples_us": [max(t - overhead, 0.0) for t in raw],
            "mode": "events",
            "regime": "idle-gaps",
            "calls_per_sample": 1,
            "sets": rotation,
            "estimate_us": statistics.median(raw),
            "launch_overhead_us": overhead,
            "empty_kernel_us": self._empty_us,
            "big_sets": False,
            "outputs": [],
            "seconds": {"sets": sampling - started, "samples": time.perf_counter() - sampling, "checks": 0.0},
        }

    def _time_shape(
        self,
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
        sample beyond an empty kernel's own duration (:meth:`launch_overhead_us`) is subtracted, so the time is
        the kernel's own duration with a cold L2. The sampling may stop after any batch once it holds the least
        number of samples and took a tenth of the budget (a window long enough to see the clocks drift).
        """
        least_s = budget_us / 1e6 / 10
        set_bytes = max(1, sum(int(a["count"]) * int(a["itemsize"]) for a in shape["arrays"]))
        big = set_bytes >= 2 * self.l2_bytes
        started = time.perf_counter()
        sets = [self._set_for(shape, fill) for fill in shape["sets"]]
        sampling = time.perf_counter()
        rotation = len(sets)
        stream_ptr = self.stream.ptr

        def call(k: int) -> None:
            rc = fn(*sets[k % rotation][1], stream_ptr)
            if rc:
                raise CallFailed(f"returned {self.error_text(int(rc))}")

        for k in range(3):
            call(k)
        self.stream.synchronize()
        self.tick(0)
        t_est = self._estimate_us(call)
        overhead = 0.0
        if t_est < graph_below:
            samples, reps = self._sample_graph(call, t_est, budget_us, counts, least_s)
            mode: Literal["graph", "events"] = "graph"
        else:
            # one launch per sample: back-to-back launches would add the gap between kernels to every call
            reps = 1
            samples, overhead = self._sample_events(call, t_est, budget_us, counts, least_s)
            mode = "events"
        return {
            "samples_us": samples,
            "mode": mode,
            "calls_per_sample": reps,
            "sets": rotation,
            "estimate_us": t_est,
            "launch_overhead_us": overhead,
            "empty_kernel_us": self._empty_us,
            "big_sets": big,
            "outputs": [],
            "seconds": {"sets": sampling - started, "samples": time.perf_counter() - sampling},
        }, sets

    def _estimate_us(self, call: Callable[[int], None]) -> float:
        """The median of three calls timed by events, in us (at least 0.05)."""
        estimates: list[float] = []
        e0, e1 = self.event_pair(0)
        for k in range(3):
            e0.record(self.stream)
            call(k)
            e1.record(self.stream)
            e1.synchronize()
            estimates.append(self.cp.cuda.get_elapsed_time(e0, e1) * 1000.0)
        return max(statistics.median(estimates), 0.05)

    def _sample_graph(
        self,
        call: Callable[[int], None],
        t_est: float,
        budget_us: float,
        counts: tuple[int, int, float],
        least_s: float,
    ) -> tuple[list[float], int]:
        """Samples of a CUDA graph of back-to-back calls (see :meth:`_time_shape`), and the calls per sample."""
        min_n, max_n, stop_error = counts
        reps = max(4, min(256, math.ceil(200.0 / t_est)))
        graph = self._graph_of(call, reps)
        n = max(min_n, min(max_n, int(budget_us / (reps * t_est))))
        enough = _stop_rule(min_n, stop_error, least_s)
        samples = self._measure(lambda _k: graph.launch(self.stream), n, reps, False, max(1, min_n), _HOST_US, enough)
        return samples, reps

    def _sample_events(
        self,
        call: Callable[[int], None],
        t_est: float,
        budget_us: float,
        counts: tuple[int, int, float],
        least_s: float,
    ) -> tuple[list[float], float]:
        """Samples of one launch each after an L2 flush, less the launch overhead (see :meth:`_time_shape`), and
        that overhead."""
        min_n, max_n, stop_error = counts
        flush_us = self.flush_time_us()
        n = max(min_n, min(max_n, int(budget_us / (t_est + flush_us))))
        overhead = self.launch_overhead_us()
        batch = max(1, min(min_n, int(1e6 / t_est)))  # a batch takes about a second at most
        raw = self._measure(call, n, 1, True, batch, _HOST_US, _stop_rule(min_n, stop_error, least_s, overhead))
        return [max(t - overhead, 0.0) for t in raw], overhead


_HOST_US = 40.0
"""Host time allowed per sample when sampling a shape (passed to :meth:`Worker._measure`)."""


class _Laps:
    """Seconds since the last lap added to ``seconds[name]`` at each call (where a worker's time went, for the
    evaluator's statistics)."""

    def __init__(self, seconds: dict[str, float]) -> None:
        self.seconds, self.last = seconds, time.perf_counter()

    def __call__(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = self.seconds.get(name, 0.0) + now - self.last
        self.last = now


def _numpy_name(dtype: str) -> str:
    """The numpy dtype an array of manifest dtype ``dtype`` is held in (bfloat16 as its bits)."""
    return "uint16" if dtype == "bfloat16" else dtype


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


def _wipe_parked(worker: Worker) -> str | None:
    """Zero the parked outputs of the last timing before a request that may run a candidate, where ``save_parked``
    did not (it does after every judging; nothing to do then); why that failed, or None. Their memory is not given
    back unzeroed: a later allocation of this context could hand those bytes to a candidate."""
    if worker.parking is None:
        return None
    try:
        worker.parking.wipe(worker.stream)
    except Exception as exc:
        return f"zeroing the parked outputs failed ({type(exc).__name__}: {exc})"
    return None


def main(argv: Sequence[str]) -> int:
    """Serve requests until told to exit or the parent goes away."""
    request_fd, reply_fd = int(argv[1]), int(argv[2])
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    try:
        worker = Worker(reply_fd)
        hello = worker.hello()
    except Exception as exc:
        write_message(reply_fd, {"error": f"{type(exc).__name__}: {exc}"})
        return 2
    write_message(reply_fd, hello)
    ops = _handlers(worker)
    while True:
        try:
            header, buffers = read_message(request_fd)
        except PeerClosed:
            return 0
        op = header.get("op")
        if op == "exit":
            return 0
        reply, out = _serve(worker, ops, op, header, buffers)
        out_ok = True
        try:
            write_message(reply_fd, reply, out)
        except PeerClosed:
            out_ok = False
        del out
        with contextlib.suppress(Exception):
            worker.cp.get_default_memory_pool().free_all_blocks()
        if not out_ok:
            return 0
        if reply.get("exiting"):
            return 3


_Handler = Callable[[Any, list[bytes]], tuple[Mapping[str, Any], list[bytes]]]


def _handlers(worker: Worker) -> dict[str, _Handler]:
    """The worker's handler of each request ``op`` but ``exit``."""
    # the header is parsed JSON: each handler reads it as its request's record (messages.py)
    return {
        "load": worker.op_load,
        "check": worker.op_check,
        "time": worker.op_time,
        "save_parked": lambda h, b: op_save_parked(worker, h, b),
        "compare": lambda h, b: op_compare(worker, h, b),
        "time_reference": lambda h, b: time_reference(worker, h, b),
        "time_torch": lambda h, b: time_torch(worker, h, b),
        "floors": lambda h, b: floors(worker, h, b),
        "ping": lambda _h, _b: ({"ok": True}, []),
    }


def _serve(
    worker: Worker, ops: dict[str, _Handler], op: Any, header: Any, buffers: list[bytes]
) -> tuple[Mapping[str, Any], list[bytes]]:
    """The reply to one request and its buffers; a failed handler's error as a reply (fatal when the context is
    lost)."""
    handler = ops.get(str(op))
    out: list[bytes] = []
    wiped = _wipe_parked(worker) if op in _RUNS_CANDIDATES else None
    if wiped is not None:  # right answers may still lie there: no candidate runs, the worker starts afresh
        reply: Mapping[str, Any] = {"ok": False, "error": wiped, "fatal": True, "exiting": True}
    elif handler is None:
        reply = {"ok": False, "error": f"unknown op {op!r}"}
    else:
        try:
            reply, out = handler(header, buffers)
        except ContextLost as exc:
            reply = {"ok": False, "error": str(exc), "fatal": True, "exiting": True}
        except CallFailed as exc:
            reply = {"ok": False, "error": str(exc)}
        except Exception as exc:
            failed: Reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000]}
            if not worker.context_ok():
                failed["fatal"] = failed["exiting"] = True
            reply = failed
    return reply, out


if __name__ == "__main__":
    sys.exit(main(sys.argv))
