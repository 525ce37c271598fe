"""Arrays of the benchmark shapes that end at unmapped memory (child/guarded.py): where they go in a mapping, and
the driver's structures as ctypes declares them, checked against the toolkit's own cuda.h (no GPU needed)."""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import pytest

from r1build.errors import ToolchainError
from r1build.evaluate.child.guarded import ALIGN, AccessDesc, AllocationProp, AllocFlags, Location, placement
from r1build.toolchain import toolchain

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
    try:
        nvcc = Path(toolchain().nvcc)
    except ToolchainError:
        pytest.skip("nvcc not found")
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
