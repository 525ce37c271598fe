"""What the timed calls left, judged on the GPU by a process that never runs a candidate.

After a candidate's timed calls at a benchmark shape, every ``out``/``inout`` array of every input set (and of the
call on the tweaked set) was written to a file and read back on the CPU: hundreds of MB a candidate, written
while the evaluator held the GPU alone. Now the worker copies them, device to device, into one allocation of its
own (:class:`Parking`, laid out by :func:`park_layout`, which both sides compute) and hands out a CUDA IPC handle
of it. A second worker process, the *comparer* (started by the evaluator, sent no ``load`` ever, so no candidate's
code runs in it), maps that allocation, holds the reference's outputs in its own CUDA context (which the
candidate's kernels cannot reach) and runs the fast rule of
:func:`~r1build.evaluate.correctness.compare._clearly_matches`
on the GPU (:func:`clearly_matches`, in one pass of one kernel for float32 and float64): every element finite and
within ``atol + rtol * |ref|``, the error norm within its bound. An array it finds clear passes; any other goes
the old way (the worker writes it to a file, ``save_parked``, and the parent's comparing process applies every rule
and says what is wrong), so a verdict is never more lenient than before and every message is as before.

The error norm is summed in a different order than on the CPU, so the comparer passes it only with a margin of
:data:`NORM_MARGIN` below the bound; the elementwise rule is the same IEEE arithmetic in the same order (cast to
float64, subtract, absolute value; ``|ref|``, times ``rtol``, plus ``atol``, each rounded on its own, so no
multiply-add is fused).

Standard library only at import (the worker hands in cupy; the tests hand in numpy).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .messages import BenchShapeRequest, CompareReply, CompareRequest, ParkedItem

__all__ = [
    "COMPARED_DTYPES",
    "EXTRA_CALLS",
    "NORM_MARGIN",
    "GpuComparer",
    "Parking",
    "clearly_matches",
    "extra_source",
    "park_layout",
]

NORM_MARGIN = 1e-9
"""The comparer passes an error norm only this far (relatively) below its bound; closer cases go to the CPU."""
COMPARED_DTYPES = frozenset({"float16", "float32", "float64"})
"""Output dtypes the comparer compares (others go to the CPU, which knows every rule)."""
PARK_ALIGN = 256
"""Each parked array starts at a multiple of this many bytes."""
CHUNK = 1 << 24
"""Elements per pass of :func:`clearly_matches` on the GPU (128 MB float64 temporaries)."""


EXTRA_CALLS = ("lazy", "replay", "replay", "replay")
"""The calls at a benchmark shape after the timed ones and the tweaked one, whose outputs are judged too: ``lazy``
(the inputs of set 0 unchanged, its outputs holding finite values: what the timed calls left with one element in
:data:`DECOY_STRIDE` changed), then three replays of one CUDA graph captured on the stream, fresh inputs written
in place before each. Their places in the parked layout follow the tweaked call's (``len(sets) + 1 + e``)."""
DECOY_STRIDE = 64
"""One element in this many of an output is changed before the ``lazy`` call."""


def extra_source(sets: int, e: int) -> int:
    """The input set whose inputs extra call ``e`` (of :data:`EXTRA_CALLS`) is made with, at a shape of ``sets``
    sets: an index of them, or ``sets`` for the tweaked set. The replays take another set, the tweaked one, then
    set 0, so each replay's inputs differ from the one before."""
    return (0, 1 % max(sets, 1), sets, 0)[e]


def _aligned(nbytes: int) -> int:
    """``nbytes`` (at least 1) rounded up to :data:`PARK_ALIGN`."""
    return -(-max(nbytes, 1) // PARK_ALIGN) * PARK_ALIGN


def park_layout(shapes: Sequence[BenchShapeRequest]) -> list[ParkedItem]:
    """Where each ``out``/``inout`` array of each set (``set == len(sets)``: the tweaked call; above it the
    :data:`EXTRA_CALLS`) of each benchmark shape lies in the parked allocation; the worker parks by it and the
    parent judges by it."""
    items: list[ParkedItem] = []
    offset = 0
    for si, shape in enumerate(shapes):
        for k in range(len(shape["sets"]) + 1 + len(EXTRA_CALLS)):
            for j, a in enumerate(shape["arrays"]):
                if a["role"] == "in":
                    continue
                nbytes = int(a["count"]) * int(a["itemsize"])
                items.append(
                    {"shape": si, "set": k, "array": j, "offset": offset, "nbytes": nbytes, "dtype": a["dtype"]}
                )
                offset += _aligned(nbytes)
    return items


def parked_size(items: Sequence[ParkedItem]) -> int:
    """Bytes the parked allocation needs for ``items``."""
    return max((i["offset"] + _aligned(i["nbytes"]) for i in items), default=0)


def clearly_matches(xp: Any, got: Any, want: Any, rtol: float, atol: float, chunk: int = CHUNK) -> bool:
    """True only where every element of ``got`` and ``want`` (1-d arrays of the module ``xp``, numpy or cupy) is
    finite, ``|got - want| <= atol + rtol * |want|`` holds for each, and the error norm is below
    ``rtol * ||want|| + atol * sqrt(n)`` by :data:`NORM_MARGIN`; False sends the array to the CPU's full rules."""
    if got.dtype.kind != "f" or want.dtype.kind != "f" or got.size != want.size:
        return False
    n = int(got.size)
    if n == 0:
        return True
    err_sq = ref_sq = 0.0
    for start in range(0, n, max(1, chunk)):
        g = got[start : start + chunk].astype(xp.float64)
        w = want[start : start + chunk].astype(xp.float64)
        if not bool(xp.isfinite(g).all()) or not bool(xp.isfinite(w).all()):
            return False
        err = xp.subtract(g, w)
        xp.abs(err, out=err)
        allowed = xp.abs(w)
        xp.multiply(allowed, rtol, out=allowed)
        xp.add(allowed, atol, out=allowed)
        if bool(xp.greater(err, allowed).any()):
            return False
        err_sq += float(xp.dot(err, err))
        ref_sq += float(xp.dot(w, w))
    return _norm_within(err_sq, ref_sq, n, rtol, atol)


def _norm_within(err_sq: float, ref_sq: float, n: int, rtol: float, atol: float) -> bool:
    """The error norm below ``rtol * ||ref|| + atol * sqrt(n)`` by :data:`NORM_MARGIN`."""
    bound = rtol * ref_sq**0.5 + atol * n**0.5
    return bool(err_sq**0.5 <= bound * (1.0 - NORM_MARGIN))


_RULE = r"""
typedef GOT_T got_t;
typedef WANT_T want_t;
extern "C" __global__ void r1_compare(const got_t* __restrict__ got, const want_t* __restrict__ want,
                                    unsigned long long n, double rtol, double atol,
                                    double* __restrict__ sums, unsigned long long* __restrict__ bad) {
    double e2 = 0.0, r2 = 0.0;
    unsigned long long b = 0ull;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        double g = (double)got[i], w = (double)want[i];
        if (!isfinite(g) || !isfinite(w)) { b += 1ull; continue; }
        double err = fabs(__dsub_rn(g, w));                       /* numpy: copy, subtract, absolute value */
        double allowed = __dadd_rn(__dmul_rn(fabs(w), rtol), atol); /* |ref| times rtol, plus atol: no fused op */
        if (err > allowed) b += 1ull;
        e2 += err * err;
        r2 += w * w;
    }
    for (int off = 16; off > 0; off >>= 1) {
        e2 += __shfl_down_sync(0xffffffffu, e2, off);
        r2 += __shfl_down_sync(0xffffffffu, r2, off);
        b += __shfl_down_sync(0xffffffffu, b, off);
    }
    if ((threadIdx.x & 31) == 0) {
        if (e2 != 0.0) atomicAdd(&sums[0], e2);
        if (r2 != 0.0) atomicAdd(&sums[1], r2);
        if (b) atomicAdd(bad, b);
    }
}
"""
"""The rule of :func:`clearly_matches` in one pass: elements not finite or beyond their bound counted in ``bad``,
the squared error and reference summed in ``sums`` (compiled per pair of dtypes)."""
_C_TYPES = {"float32": "float", "float64": "double"}


class Parking:
    """The worker's side: one device allocation (grown when a candidate needs more) that the outputs of the timed
    calls are copied into, and its IPC handle. It lives in the process that runs candidates, and holds right answers
    for inputs every candidate of the kernel gets: the worker zeroes it once the parent is done with it
    (``save_parked``, sent after every judging) and again, where that did not happen, before each request that may
    run a candidate (:meth:`wipe`), so no kernel finds the last candidate's outputs there."""

    def __init__(self, cupy: Any) -> None:
        self._cp = cupy
        self._memory: Any = None
        self._handle = ""
        self.size = 0
        self.dirty = False
        """Whether outputs were parked since the allocation was last zeroed."""

    def reserve(self, nbytes: int, stream: Any) -> str:
        """An allocation of at least ``nbytes`` (a new one zeroed on ``stream`` and waited for: fresh memory may
        hold the old one's bytes); its IPC handle (hex)."""
        if self._memory is None or self.size < nbytes:
            if self._memory is not None:  # the old one goes first (its bytes may be most of what a big shape needs)
                self.wipe(stream)
                self._memory = None
            self._memory = self._cp.cuda.Memory(max(nbytes, 1))
            self.size = max(nbytes, 1)
            self.dirty = True  # fresh memory may hold the old one's bytes
            self.wipe(stream)
            self._handle = bytes(self._cp.cuda.runtime.ipcGetMemHandle(self._memory.ptr)).hex()
        return self._handle

    @property
    def handle(self) -> str:
        """The IPC handle (hex) of the allocation :meth:`reserve` made."""
        return self._handle

    def wipe(self, stream: Any) -> None:
        """Zero the whole allocation and wait for it (nothing to do where nothing was parked since)."""
        if self._memory is not None and self.dirty:
            self._cp.cuda.runtime.memsetAsync(self._memory.ptr, 0, self.size, stream.ptr)
            stream.synchronize()
            self.dirty = False

    def park(self, raw: Any, item: ParkedItem, stream: Any) -> None:
        """Copy the uint8 device array ``raw`` (one output) to its place (asynchronous on ``stream``)."""
        n = min(int(raw.size), item["nbytes"])
        self.dirty = True
        if n:
            self._cp.cuda.runtime.memcpyAsync(
                self._memory.ptr + item["offset"], int(raw.data.ptr), n, 3, stream.ptr
            )  # 3: cudaMemcpyDeviceToDevice

    def view(self, offset: int, nbytes: int) -> Any:
        """The uint8 device array of ``nbytes`` parked at ``offset``."""
        memptr = self._cp.cuda.MemoryPointer(self._memory, offset)
        return self._cp.ndarray((nbytes,), dtype=self._cp.uint8, memptr=memptr)


class GpuComparer:
    """The comparer's side: the reference's outputs on its device (least recently used dropped past ``limit_bytes``)
    and the mapping of the worker's parked allocation."""

    def __init__(self, cupy: Any, limit_bytes: int) -> None:
        self._cp = cupy
        self._limit = limit_bytes
        self._expected: OrderedDict[tuple[str, int, int], Any] = OrderedDict()
        self._held = 0
        self._mapped: tuple[str, int] | None = None  # (handle, pointer)
        self._kernels: dict[tuple[str, str], Any] = {}
        self._sums = cupy.zeros(2, dtype=cupy.float64)
        self._bad = cupy.zeros(1, dtype=cupy.uint64)

    def warm(self) -> None:
        """Compile the rule for every pair of dtypes it takes (a fresh process compiles each on first use)."""
        for got in _C_TYPES:
            for want in _C_TYPES:
                self.clear(self._cp.zeros(1, dtype=got), self._cp.zeros(1, dtype=want), 0.0, 0.0)

    def clear(self, got: Any, want: Any, rtol: float, atol: float) -> bool:
        """:func:`clearly_matches` of two device arrays: one pass of :data:`_RULE` where both dtypes are float32
        or float64, else the array operations of that function."""
        cp = self._cp
        pair = (str(got.dtype), str(want.dtype))
        if pair[0] not in _C_TYPES or pair[1] not in _C_TYPES:
            return clearly_matches(cp, got, want, rtol, atol)
        if got.size != want.size:
            return False
        n = int(got.size)
        if n == 0:
            return True
        kernel = self._kernels.get(pair)
        if kernel is None:
            source = f"#define GOT_T {_C_TYPES[pair[0]]}\n#define WANT_T {_C_TYPES[pair[1]]}\n" + _RULE
            kernel = self._kernels[pair] = cp.RawKernel(source, "r1_compare")
        self._sums.fill(0)
        self._bad.fill(0)
        blocks = max(1, min(4096, (n + 255) // 256))
        kernel((blocks,), (256,), (got, want, cp.uint64(n), cp.float64(rtol), cp.float64(atol), self._sums, self._bad))
        err_sq, ref_sq = (float(x) for x in self._sums.get())
        if int(self._bad.get()[0]):
            return False
        return _norm_within(err_sq, ref_sq, n, rtol, atol)

    def _open(self, handle: str) -> int:
        self._close()
        rt = self._cp.cuda.runtime
        pointer = int(rt.ipcOpenMemHandle(bytes.fromhex(handle), rt.cudaIpcMemLazyEnablePeerAccess))
        self._mapped = (handle, pointer)
        return pointer

    def _close(self) -> None:
        if self._mapped is not None:
            pointer, self._mapped = self._mapped[1], None
            self._cp.cuda.runtime.ipcCloseMemHandle(pointer)

    def _reference(self, path: str) -> Any:
        import numpy as np

        stat = Path(path).stat()
        key = (path, stat.st_size, stat.st_mtime_ns)
        held = self._expected.get(key)
        if held is None:
            held = self._cp.asarray(np.load(path, allow_pickle=False)).reshape(-1)
            self._expected[key] = held
            self._held += int(held.nbytes)
            while self._held > self._limit and len(self._expected) > 1:
                _, dropped = self._expected.popitem(last=False)
                self._held -= int(dropped.nbytes)
        self._expected.move_to_end(key)
        return held

    def op_compare(self, h: CompareRequest, _bufs: list[bytes]) -> tuple[CompareReply, list[bytes]]:
        cp = self._cp
        if not h["items"]:  # sent at the start: compile while nothing waits for it
            self.warm()
            return {"ok": True, "clear": []}, []
        try:
            base = self._open(h["handle"])
        except Exception as exc:  # no IPC here (a container without it): every array goes to the CPU
            return {"ok": True, "clear": [False] * len(h["items"]), "note": f"{type(exc).__name__}: {exc}"}, []
        memory = cp.cuda.UnownedMemory(base, int(h["size"]), self)
        clear: list[bool] = []
        for item in h["items"]:
            if item["dtype"] not in COMPARED_DTYPES or item["offset"] + item["nbytes"] > int(h["size"]):
                clear.append(False)
                continue
            dtype = cp.dtype(item["dtype"])
            where = cp.cuda.MemoryPointer(memory, item["offset"])
            got = cp.ndarray((item["nbytes"] // dtype.itemsize,), dtype=dtype, memptr=where)
            try:
                want = self._reference(item["expected"])
            except (OSError, ValueError):
                clear.append(False)
                continue
            clear.append(self.clear(got, want, float(h["rtol"]), float(h["atol"])))
        cp.cuda.Device().synchronize()
        self._close()  # not kept: the worker frees the allocation when it grows it, or when it is restarted
        return {"ok": True, "clear": clear}, []

    def close(self) -> None:
        self._close()
        self._expected.clear()
        self._held = 0
