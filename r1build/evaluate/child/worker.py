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

The ``check`` op is :mod:`.check_op`'s, the ``time`` op :mod:`.time_op`'s (with :mod:`.extras` and :mod:`.outputs`),
the measures :mod:`.measures`', the comparer's :mod:`.outputs`'; this module holds the worker's state, its helpers on
the GPU and the request loop.

A CUDA error that leaves the context unusable (illegal address, misaligned address, ...) is reported with
``"exiting": true`` and the worker exits; the parent starts a fresh one.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, NoReturn

from .check_op import op_check
from .faults import CallFailed, ContextLost
from .gpu_compare import GpuComparer, Parking
from .guarded import GuardedArrays
from .harness import CTYPES
from .measures import floors, time_reference, time_torch
from .messages import (
    ArgItem,
    BenchFill,
    BenchShapeRequest,
    Hello,
    LoadRequest,
    Reply,
)
from .outputs import op_compare, op_save_parked
from .pristine import PristineInputs
from .protocol import PeerClosed, read_message, write_message
from .time_op import op_time

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


_ROLES = frozenset({"in", "out", "inout"})
"""Every role of an array."""


_RUNS_CANDIDATES = frozenset({"load", "check", "time", "time_reference", "time_torch", "floors"})
"""Requests before which the parked outputs are zeroed (any that may run a candidate's code, or a reference)."""


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
        self.overhead_us: float | None = None
        self.overhead_fresh = False  # measured again during this timing request (launch_overhead_us)
        self.empty_us = 0.0
        self._sink: Any = None
        self.side: Any = None
        """The second stream of the ``concurrent`` calls."""
        self.hold: Any = None
        """The stream whose spin kernel holds both ``concurrent`` calls until one event releases them."""
        self.guarded_now = False
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

    def args(self, spec: Sequence[ArgItem], pointers: Sequence[int]) -> list[Any]:
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
        self.side = None

    def fill(
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
                self.poison(raw, bytes.fromhex(fill["poison"][j] or "00"))

    def poison(self, raw: Any, one: bytes) -> None:
        """``one`` repeated over the uint8 device array ``raw`` (a whole number of repeats)."""
        words = {1: self.cp.uint8, 2: self.cp.uint16, 4: self.cp.uint32, 8: self.cp.uint64}.get(len(one))
        if words is not None and raw.size % len(one) == 0 and int(raw.data.ptr) % len(one) == 0:
            with self.stream:
                raw.view(words).fill(words(int.from_bytes(one, "little")))
            return
        import numpy as np

        raw.set(np.tile(np.frombuffer(one, dtype=np.uint8), raw.size // len(one)), stream=self.stream)


def _numpy_name(dtype: str) -> str:
    """The numpy dtype an array of manifest dtype ``dtype`` is held in (bfloat16 as its bits)."""
    return "uint16" if dtype == "bfloat16" else dtype


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
        "check": lambda h, b: op_check(worker, h, b),
        "time": lambda h, b: op_time(worker, h, b),
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
