"""Arrays of the benchmark shapes that end at unmapped memory (child/guarded.py): where they go in a mapping, and
the driver's structures as ctypes declares them, checked against the toolkit's own cuda.h (no GPU needed)."""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import pytest

from r1build.evaluate.child.guarded import ALIGN, AccessDesc, AllocationProp, AllocFlags, Location, placement
from tests.support.nvcc import toolchain_or_skip

MIB2 = 2 << 20


def test_each_array_ends_at_the_end_of_its_mapping_at_an_aligned_start() -> None:
    # a 64 MiB array fills 32 granules exactly: its last byte is the mapping's last byte
    assert placement(64 << 20, MIB2) == (64 << 20, 0)
    mapped, offset = placement(4 * 1_000_003, MIB2)
    assert mapped % MIB2 == 0 and offset % ALIGN == 0
    assert 0 <= mapped - (offset + 4 * 1_000_003) < ALIGN  # at most ALIGN - 1 bytes after it stay mapped
    assert placement(1, MIB2) == (MIB2, MIB2 - ALIGN)
    assert placement(0, MIB2) == (MIB2, MIB2 - ALIGN)  # an empty array still gets a valid address
    assert placement(MIB2 + 1, MIB2) == (2 * MIB2, MIB2 - ALIGN)


@pytest.mark.slow
def test_the_ctypes_structures_match_the_toolkits_cuda_h(tmp_path: Path) -> None:
    nvcc = Path(toolchain_or_skip().nvcc)
    source = tmp_path / "sizes.cpp"
    source.write_text(
        "#include <cuda.h>\n#include <cstdio>\n#include <cstddef>\n"
        'int main() { std::printf("%zu %zu %zu %zu %zu %zu %zu\\n", sizeof(CUmemLocation),'
        " sizeof(CUmemAllocationProp), offsetof(CUmemAllocationProp, location),"
        " offsetof(CUmemAllocationProp, win32HandleMetaData), offsetof(CUmemAllocationProp, allocFlags),"
        " sizeof(CUmemAccessDesc), offsetof(CUmemAccessDesc, flags)); return 0; }\n"
    )
    exe = tmp_path / "sizes"
    subprocess.run([str(nvcc), "-o", str(exe), str(source)], check=True, capture_output=True)
    got = [int(x) for x in subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split()]
    assert got == [
        ctypes.sizeof(Location),
        ctypes.sizeof(AllocationProp),
        AllocationProp.location.offset,
        AllocationProp.win32HandleMetaData.offset,
        AllocationProp.allocFlags.offset,
        ctypes.sizeof(AccessDesc),
        AccessDesc.flags.offset,
    ]
    assert ctypes.sizeof(AllocFlags) == 8


_PROBE = r"""
import sys
import cupy as cp
from r1build.evaluate.child.guarded import GuardedArrays

cp.cuda.Device(0).use()
guarded = GuardedArrays.make(cp, 0, 1 << 30)
assert guarded is not None, "no virtual memory management"
arr = guarded.empty("float32", int(sys.argv[1]))
arr[...] = 1.0
read = cp.RawKernel(
    'extern "C" __global__ void r(const float* a, long long i, float* out) { out[0] = a[i]; }', "r"
)
out = cp.zeros(1, dtype=cp.float32)
read((1,), (1,), (arr, cp.int64(arr.size - 1), out))  # the last element: fine
cp.cuda.runtime.deviceSynchronize()
assert float(out.get()[0]) == 1.0
guarded.recycle()
again = guarded.empty("float32", int(sys.argv[1]))
assert again.data.ptr == arr.data.ptr  # the mapping is reused
print("in bounds ok", flush=True)
read((1,), (1,), (again, cp.int64(again.size), out))  # one element past the end
cp.cuda.runtime.deviceSynchronize()
print("no fault")
"""


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("count", [1 << 24, 1_000_003])
def test_a_read_one_element_past_a_guarded_array_faults(tmp_path: Path, count: int) -> None:
    """On a GPU, in a process of its own (the fault ends its context): the last element reads fine, the one after
    it is an illegal address (for an odd size, a read past the 256-byte rounding)."""
    import sys

    probe = tmp_path / "probe.py"
    probe.write_text(_PROBE)
    index = count if count % 64 == 0 else count + 64  # past the ALIGN rounding for an odd size
    done = subprocess.run(
        [sys.executable, str(probe), str(count)], capture_output=True, text=True, timeout=120, check=False
    )
    assert "in bounds ok" in done.stdout, done.stderr
    if index == count:
        assert "no fault" not in done.stdout and done.returncode != 0
        assert "IllegalAddress" in done.stderr or "illegal" in done.stderr.lower(), done.stderr
