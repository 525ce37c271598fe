"""GPU architectures: parsing the spellings users write, and what each target offers a kernel.

Accepted spellings of one arch: ``sm_90``, ``90``, ``9.0``, ``compute_90``, CMake's ``90-real`` /
``90-virtual``, and the arch-specific ``sm_90a`` / ``90a``. The canonical form is ``sm_90`` (``sm_90a``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["ARCHS", "DEFAULT_ARCHS", "ArchInfo", "arch_info", "parse_arch"]


@dataclass(frozen=True)
class ArchInfo:
    """What a target architecture offers a kernel (representative part for SM count)."""

    arch: str
    """Canonical name, e.g. ``sm_90``."""
    capability: tuple[int, int]
    """Compute capability (major, minor)."""
    family: str
    """Marketing generation, e.g. Hopper."""
    example_gpu: str
    """A representative GPU of this arch, whose SM count is given."""
    sm_count: int
    """Streaming multiprocessors of the representative GPU."""
    smem_per_block: int
    """Largest shared memory one block may use, in bytes, after opting in above 48 KiB."""
    smem_per_sm: int
    """Shared memory per multiprocessor, in bytes."""
    regs_per_thread: int
    """Most registers one thread may use."""
    regs_per_sm: int
    """32-bit registers per multiprocessor."""
    max_threads_per_block: int
    """Most threads in one block."""
    tensor_cores: str
    """Tensor-core generation and how to reach it."""

    @property
    def number(self) -> str:
        """The bare number CMake and nvcc use, e.g. ``90`` or ``90a``."""
        return self.arch.removeprefix("sm_")


_KIB = 1024

ARCHS: dict[str, ArchInfo] = {
    info.arch: info
    for info in (
        ArchInfo("sm_75", (7, 5), "Turing", "Tesla T4", 40, 64 * _KIB, 64 * _KIB, 255, 65536, 1024,
                 "2nd gen: mma.sync / wmma fp16, int8"),
        ArchInfo("sm_80", (8, 0), "Ampere", "A100", 108, 163 * _KIB, 164 * _KIB, 255, 65536, 1024,
                 "3rd gen: mma.sync / wmma fp16, bf16, tf32; cp.async"),
        ArchInfo("sm_86", (8, 6), "Ampere", "RTX A6000", 84, 99 * _KIB, 100 * _KIB, 255, 65536, 1024,
                 "3rd gen: mma.sync / wmma fp16, bf16, tf32; cp.async"),
        ArchInfo("sm_87", (8, 7), "Ampere", "Jetson AGX Orin", 16, 163 * _KIB, 164 * _KIB, 255, 65536, 1024,
                 "3rd gen: mma.sync / wmma fp16, bf16, tf32; cp.async"),
        ArchInfo("sm_89", (8, 9), "Ada", "L40S", 142, 99 * _KIB, 100 * _KIB, 255, 65536, 1024,
                 "4th gen: mma.sync fp16, bf16, tf32, fp8"),
        ArchInfo("sm_90", (9, 0), "Hopper", "H100 SXM / H200", 132, 227 * _KIB, 228 * _KIB, 255, 65536, 1024,
                 "4th gen: mma.sync; wgmma and setmaxnreg need sm_90a; TMA (cp.async.bulk.tensor)"),
        ArchInfo("sm_90a", (9, 0), "Hopper", "H100 SXM / H200", 132, 227 * _KIB, 228 * _KIB, 255, 65536, 1024,
                 "4th gen: wgmma, setmaxnreg, TMA (cp.async.bulk.tensor)"),
        ArchInfo("sm_100", (10, 0), "Blackwell", "B200", 148, 227 * _KIB, 228 * _KIB, 255, 65536, 1024,
                 "5th gen: tcgen05 needs sm_100a; mma.sync available"),
        ArchInfo("sm_100a", (10, 0), "Blackwell", "B200", 148, 227 * _KIB, 228 * _KIB, 255, 65536, 1024,
                 "5th gen: tcgen05.mma with tensor memory"),
        ArchInfo("sm_103", (10, 3), "Blackwell", "B300", 148, 227 * _KIB, 228 * _KIB, 255, 65536, 1024,
                 "5th gen: tcgen05 needs sm_103a"),
        ArchInfo("sm_110", (11, 0), "Blackwell", "Jetson Thor", 20, 227 * _KIB, 228 * _KIB, 255, 65536, 1024,
                 "5th gen"),
        ArchInfo("sm_120", (12, 0), "Blackwell", "RTX 5090", 170, 99 * _KIB, 100 * _KIB, 255, 65536, 1024,
                 "5th gen consumer: mma.sync fp16, bf16, fp8, fp4"),
        ArchInfo("sm_121", (12, 1), "Blackwell", "DGX Spark (GB10)", 48, 99 * _KIB, 100 * _KIB, 255, 65536,
                 1024, "5th gen consumer: mma.sync fp16, bf16, fp8, fp4"),
    )
}

DEFAULT_ARCHS: tuple[str, ...] = ("sm_80", "sm_90")
"""Targets used when neither the manifest nor the command line names any."""

_PATTERNS = (
    re.compile(r"^(?:sm_|compute_)?(?P<num>\d{2,3})(?P<suffix>a?)(?:-(?:real|virtual))?$"),
    re.compile(r"^(?P<major>\d{1,2})\.(?P<minor>\d)(?P<suffix>a?)$"),
)


def parse_arch(text: str | int) -> str:
    """Canonical ``sm_XY`` for any accepted spelling; :class:`ValueError` naming the known ones otherwise."""
    raw = str(text).strip().lower()
    for pattern in _PATTERNS:
        m = pattern.match(raw)
        if not m:
            continue
        groups = m.groupdict()
        num = groups["num"] if "num" in groups else f"{groups['major']}{groups['minor']}"
        canonical = f"sm_{num}{groups['suffix']}"
        if canonical in ARCHS:
            return canonical
        break
    known = ", ".join(ARCHS)
    raise ValueError(f"unknown GPU architecture {text!r} (known: {known})")


def arch_info(arch: str) -> ArchInfo:
    """Facts about an arch given in any accepted spelling."""
    return ARCHS[parse_arch(arch)]


def arch_for_capability(major: int, minor: int) -> str | None:
    """The plain (non ``a``) arch of a compute capability, if known."""
    canonical = f"sm_{major}{minor}"
    return canonical if canonical in ARCHS else None
