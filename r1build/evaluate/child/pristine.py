"""Device copies of the benchmark shapes' input files, kept by the worker between candidates.

Every candidate of a kernel is timed on the same input sets (files the parent writes once per kernel). Reading a
file and uploading it for every candidate cost about half of a candidate's timing; here each file is uploaded once
and later fills are device-to-device copies, a few microseconds per set.

The copies live in the process that runs untrusted candidates, whose kernels can write anywhere in the context's
memory. So each copy carries a position-dependent checksum taken on the GPU right after the upload (before any
candidate ran on it), and every use checks it again (a pass over the bytes at device bandwidth): a copy that
changed is uploaded again from its file, so one candidate can never change the inputs another is judged on.

Standard library only, besides the cupy module the worker hands in.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any

__all__ = ["PristineInputs"]

_MIX = r"""
extern "C" __global__ void r1_mix(const unsigned long long* __restrict__ x, unsigned long long n,
                                  unsigned long long* __restrict__ out) {
    unsigned long long acc = 0ull;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned long long v = (x[i] ^ (i * 0x9E3779B97F4A7C15ull)) * 0xBF58476D1CE4E5B9ull;
        acc += v ^ (v >> 31);
    }
    atomicAdd(out, acc);
}
"""

_DIFFER = r"""
extern "C" __global__ void r1_differ(const unsigned char* __restrict__ a, const unsigned char* __restrict__ b,
                                     unsigned long long n, int* __restrict__ differs) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        if (a[i] != b[i]) {
            *differs = 1;
            return;
        }
    }
}
"""
"""Whether two byte ranges differ: compiled once per process (cupy's ``array_equal`` compiles a reduction for each
size it meets, which cost the timing worker seconds of NVRTC a run with the GPU held alone)."""


class _Copy:
    """One file's bytes on the device (padded to whole 8-byte words with zeros) and their checksum."""

    def __init__(self, data: Any, nbytes: int, identity: tuple[int, int], checksum: int) -> None:
        self.data = data
        self.nbytes = nbytes
        self.identity = identity
        self.checksum = checksum


class PristineInputs:
    """Input files on the device, least recently used dropped past ``limit_bytes``."""

    def __init__(self, cupy: Any, limit_bytes: int) -> None:
        self._cp = cupy
        self._limit = limit_bytes
        self._copies: OrderedDict[str, _Copy] = OrderedDict()
        self._held = 0
        self._mix = cupy.RawKernel(_MIX, "r1_mix")
        self._differ = cupy.RawKernel(_DIFFER, "r1_differ")
        self._sum = cupy.zeros(1, dtype=cupy.uint64)
        self._flag = cupy.zeros(1, dtype=cupy.int32)
        self.uploads = 0
        """Files uploaded (first use, a changed file, or a copy a candidate changed)."""
        self.repaired = 0
        """Copies found changed since their upload (by a candidate's kernel) and uploaded again."""

    def _checksum(self, words: Any, stream: Any) -> int:
        with stream:
            self._sum.fill(0)
        n = int(words.size)
        blocks = max(1, min(1024, (n + 255) // 256))
        self._mix((blocks,), (256,), (words, self._cp.uint64(n), self._sum), stream=stream)
        return int(self._sum.get(stream=stream)[0])

    def _upload(self, path: str, identity: tuple[int, int], stream: Any) -> _Copy:
        import numpy as np

        host = np.fromfile(path, dtype=np.uint8)
        nbytes = int(host.size)
        with stream:
            words = self._cp.zeros(max(1, (nbytes + 7) // 8), dtype=self._cp.uint64)
        words.view(self._cp.uint8)[:nbytes].set(host, stream=stream)
        self.uploads += 1
        return _Copy(words, nbytes, identity, self._checksum(words, stream))

    def copy_into(self, path: str, raw: Any, stream: Any) -> None:
        """Fill the uint8 device array ``raw`` with the bytes of file ``path`` on ``stream`` (the copy itself
        asynchronous; the checksum before it waits for the stream)."""
        stat = Path(path).stat()
        identity = (stat.st_size, stat.st_mtime_ns)
        copy = self._copies.get(path)
        if copy is not None and copy.identity != identity:
            self._drop(path)
            copy = None
        if copy is not None and self._checksum(copy.data, stream) != copy.checksum:
            self.repaired += 1
            self._drop(path)
            copy = None
        if copy is None:
            copy = self._upload(path, identity, stream)
            self._copies[path] = copy
            self._held += copy.data.nbytes
            while self._held > self._limit and len(self._copies) > 1:
                self._drop(next(iter(self._copies)))
        self._copies.move_to_end(path)
        n = min(copy.nbytes, int(raw.size))
        if n:
            raw[:n].data.copy_from_device_async(copy.data.data, n, stream)

    def holds(self, path: str, raw: Any, stream: Any) -> bool:
        """Whether the uint8 device array ``raw`` still holds exactly the bytes of file ``path`` (a device-side
        compare against the kept copy, whose checksum is checked first). False where no intact copy is kept or
        the sizes differ: the caller then sends the bytes to the parent, which compares them with its own."""
        copy = self._copies.get(path)
        if copy is None or int(raw.size) != copy.nbytes:
            return False
        if self._checksum(copy.data, stream) != copy.checksum:
            return False
        return not self._differs(raw, copy.data.view(self._cp.uint8)[: copy.nbytes], stream)

    def _differs(self, a: Any, b: Any, stream: Any) -> bool:
        """Whether the uint8 device arrays ``a`` and ``b`` (of one size) differ anywhere, computed on ``stream`` and
        read on it: a read on the current (legacy default) stream would not wait for the worker's non-blocking
        one, and could take the flag before the compare set it (a written input taken as unchanged)."""
        n = int(a.size)
        with stream:
            self._flag.fill(0)
        blocks = max(1, min(4096, (n + 255) // 256))
        self._differ((blocks,), (256,), (a, b, self._cp.uint64(n), self._flag), stream=stream)
        return bool(int(self._flag.get(stream=stream)[0]))

    def _drop(self, path: str) -> None:
        copy = self._copies.pop(path)
        self._held -= copy.data.nbytes

    def clear(self) -> None:
        """Forget every copy (their memory goes back to the pool)."""
        self._copies.clear()
        self._held = 0
