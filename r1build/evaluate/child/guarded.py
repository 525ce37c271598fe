"""Arrays at the benchmark shapes whose last byte is followed by unmapped memory, so a read past the end faults.

At the test shapes every array sits between guard bands (a write past the end shows there) and compute-sanitizer's
memcheck sees a read past the end; but memcheck is far too slow for the benchmark shapes, and a kernel can read
past the end only above some size (an unrolled loop whose last trip is unguarded). So the worker places each array
of a benchmark shape with the CUDA virtual memory API (``cuMemCreate``, ``cuMemAddressReserve``, ``cuMemMap``,
``cuMemSetAccess`` through ctypes on ``libcuda``, as :mod:`.harness` does): an address range of the mapped size
plus one granule (2 MiB on current GPUs) is reserved, only the first part mapped, and the array placed so that it
ends where the mapping ends. A read or write past the end of any array, at any shape, is then an illegal address:
the worker reports it with :data:`PAST_THE_END` and exits. The array starts at a multiple of :data:`ALIGN` bytes
(what cudaMalloc and PyTorch hand out), so at most ``ALIGN - 1`` bytes after an array of an odd size stay mapped.

Mappings are kept for the next request (:meth:`GuardedArrays.recycle`) up to a limit: making one costs about what
a cudaMalloc does. Where the driver has no virtual memory management, :meth:`GuardedArrays.make` returns None and
the worker allocates as before.
"""

from __future__ import annotations

import ctypes
from typing import Any

from ...convert import record

__all__ = ["ALIGN", "PAST_THE_END", "GuardedArrays", "placement"]

ALIGN = 256
"""Each guarded array starts at a multiple of this many bytes."""
PAST_THE_END = (
    "every array of a benchmark shape ends where unmapped memory begins, so an illegal address there is a read "
    "or write past the end of an array (an unrolled or vectorized loop whose last trip is not bounded?)"
)
"""What the worker adds to an illegal address at a benchmark shape."""

_PINNED = 1  # CU_MEM_ALLOCATION_TYPE_PINNED
_DEVICE = 1  # CU_MEM_LOCATION_TYPE_DEVICE
_READ_WRITE = 3  # CU_MEM_ACCESS_FLAGS_PROT_READWRITE
_MINIMUM = 0  # CU_MEM_ALLOC_GRANULARITY_MINIMUM


class Location(ctypes.Structure):
    """``CUmemLocation``."""

    _fields_ = (("type", ctypes.c_int), ("id", ctypes.c_int))


class AllocFlags(ctypes.Structure):
    """The ``allocFlags`` member of ``CUmemAllocationProp``."""

    _fields_ = (
        ("compressionType", ctypes.c_ubyte),
        ("gpuDirectRDMACapable", ctypes.c_ubyte),
        ("usage", ctypes.c_ushort),
        ("reserved", ctypes.c_ubyte * 4),
    )


class AllocationProp(ctypes.Structure):
    """``CUmemAllocationProp``."""

    _fields_ = (
        ("type", ctypes.c_int),
        ("requestedHandleTypes", ctypes.c_int),
        ("location", Location),
        ("win32HandleMetaData", ctypes.c_void_p),
        ("allocFlags", AllocFlags),
    )


class AccessDesc(ctypes.Structure):
    """``CUmemAccessDesc``."""

    _fields_ = (("location", Location), ("flags", ctypes.c_int))


def placement(nbytes: int, granularity: int, align: int = ALIGN) -> tuple[int, int]:
    """(mapped bytes, offset of the array in the mapping) for an array of ``nbytes``: the mapping a whole number
    of granules, the array at a multiple of ``align`` and as close to the mapping's end as that allows."""
    padded = -(-max(nbytes, 1) // align) * align
    mapped = -(-padded // granularity) * granularity
    return mapped, mapped - padded


@record(frozen=True)
class _Region:
    """One reserved address range and the physical memory mapped at its start."""

    base: int
    mapped: int
    reserved: int
    handle: int


class GuardedArrays:
    """Device arrays each followed by an unmapped granule (see the module docstring), on device ``device``."""

    def __init__(self, cp: Any, lib: Any, device: int, granularity: int, limit_bytes: int) -> None:
        self.cp, self.lib, self.device = cp, lib, device
        self.granularity = granularity
        self.limit_bytes = limit_bytes
        self._free: list[_Region] = []
        self._used: list[_Region] = []

    @classmethod
    def make(cls, cp: Any, device: int, limit_bytes: int) -> GuardedArrays | None:
        """The allocator of this process's device, or None where the driver offers no virtual memory
        management."""
        try:
            lib = ctypes.CDLL("libcuda.so.1")
            granularity = ctypes.c_size_t()
            prop = _prop(device)
            if lib.cuMemGetAllocationGranularity(ctypes.byref(granularity), ctypes.byref(prop), _MINIMUM):
                return None
        except (OSError, AttributeError):
            return None
        return cls(cp, lib, device, int(granularity.value) or (2 << 20), limit_bytes)

    def _check(self, name: str, *args: Any) -> None:
        rc = int(getattr(self.lib, name)(*args))
        if rc:
            text = ctypes.c_char_p()
            self.lib.cuGetErrorName(rc, ctypes.byref(text))
            raise RuntimeError(f"{name} failed: {(text.value or b'?').decode()} ({rc})")

    def _region(self, mapped: int) -> _Region:
        for i, region in enumerate(self._free):
            if region.mapped == mapped:
                return self._free.pop(i)
        u64, size = ctypes.c_ulonglong, ctypes.c_size_t
        handle, base = u64(), u64()
        prop = _prop(self.device)
        self._check("cuMemCreate", ctypes.byref(handle), size(mapped), ctypes.byref(prop), u64(0))
        reserved = mapped + self.granularity
        try:
            self._check(
                "cuMemAddressReserve", ctypes.byref(base), size(reserved), size(self.granularity), u64(0), u64(0)
            )
        except RuntimeError:
            self.lib.cuMemRelease(handle)
            raise
        region = _Region(int(base.value), mapped, reserved, int(handle.value))
        try:
            self._check("cuMemMap", u64(region.base), size(mapped), size(0), u64(region.handle), u64(0))
            access = AccessDesc(Location(_DEVICE, self.device), _READ_WRITE)
            self._check("cuMemSetAccess", u64(region.base), size(mapped), ctypes.byref(access), size(1))
        except RuntimeError:
            self._release(region)
            raise
        return region

    def empty(self, dtype: str, count: int) -> Any:
        """A cupy array of ``count`` (at least 1) elements of numpy dtype ``dtype``, ending at an unmapped
        granule."""
        import numpy as np

        cp = self.cp
        count = max(count, 1)
        nbytes = count * np.dtype(dtype).itemsize
        mapped, offset = placement(nbytes, self.granularity)
        region = self._region(mapped)
        self._used.append(region)
        memory = cp.cuda.UnownedMemory(region.base + offset, nbytes, self, self.device)
        return cp.ndarray((count,), dtype=dtype, memptr=cp.cuda.MemoryPointer(memory, 0))

    def recycle(self) -> None:
        """Every array handed out is no longer used (the request is over, the device idle): their mappings wait
        for the next request, those beyond the limit are given back."""
        self._free += self._used
        self._used = []
        while self._free and sum(r.mapped for r in self._free) > self.limit_bytes:
            self._release(self._free.pop(0))

    def _release(self, region: _Region) -> None:
        u64, size = ctypes.c_ulonglong, ctypes.c_size_t
        self.lib.cuMemUnmap(u64(region.base), size(region.mapped))
        self.lib.cuMemRelease(u64(region.handle))
        self.lib.cuMemAddressFree(u64(region.base), size(region.reserved))


def _prop(device: int) -> AllocationProp:
    """Pinned device memory on ``device``, no shareable handle."""
    prop = AllocationProp()
    prop.type = _PINNED
    prop.location = Location(_DEVICE, device)
    return prop
