"""A lower bound on a candidate's time from its compiled code, before any GPU runs it.

The roofline of the shape (the spec's bytes over the memory bandwidth, its flops over the fp32 peak: the floor of
GPU evaluation) is derated by what the code shows:

- **occupancy** by the arch's limits (warps, blocks, registers, shared memory per SM; :func:`occupancy`) at the
  block size the code fixes (``__launch_bounds__``, a tunable named like ``BLOCK`` or ``THREADS``, a literal
  launch configuration in the source) or 256: below half of the SM's warps, latency hiding weakens, as the square
  root of the shortfall;
- **global access width**: 128-bit loads and stores reach the bandwidth, 64-bit ones lose ~8%, 32-bit ones ~15%,
  narrower ones ~30% (the widest load and the widest store of the PTX, averaged: a vectorized main path with a
  scalar tail counts as vectorized);
- **reuse**: where the spec has flops, the code's floating-point operations per global load (static counts, so
  an unrolled inner loop over a shared-memory tile counts its tile) bound the global traffic the call really
  makes (``flops / (2 * intensity)`` loads, served at an L2-like 2.5 times the memory bandwidth): a matmul
  tiled 32 wide is predicted faster than one tiled 16 wide, however both compare to the fp32 roofline;
- **spills**: local-memory traffic, 1% per 20 bytes spilled per thread;

plus a fixed launch cost. The result is a prediction meant for ranking candidates of one kernel on one arch and for
skipping those predicted far slower than the best measured so far; how well it ranks is measured
(``bench/perf_model.py``), and r1build uses it only when asked (``R1BUILD_PERF_MODEL``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..convert import record
from ..manifest.archs import arch_info
from ..manifest.model import KernelSpec
from ..records import Candidate
from .features import CodeFeatures

__all__ = ["ARCH_PEAKS", "SM_LIMITS", "Prediction", "arch_peaks", "block_threads", "occupancy", "predict", "shape_work"]

SM_LIMITS: dict[tuple[int, int], tuple[int, int]] = {
    (7, 0): (64, 32),
    (7, 2): (64, 32),
    (7, 5): (32, 16),
    (8, 0): (64, 32),
    (8, 6): (48, 16),
    (8, 7): (48, 16),
    (8, 9): (48, 24),
    (9, 0): (64, 32),
    (10, 0): (64, 32),
    (10, 3): (64, 32),
    (11, 0): (48, 24),
    (12, 0): (48, 24),
    (12, 1): (48, 24),
}
"""Warps and blocks one SM holds at most, by compute capability (CUDA's occupancy tables)."""

ARCH_PEAKS: dict[str, tuple[float, float]] = {
    "sm_70": (0.9e12, 15.7e12),
    "sm_75": (0.32e12, 8.1e12),
    "sm_80": (1.55e12, 19.5e12),
    "sm_86": (0.77e12, 38.7e12),
    "sm_89": (0.86e12, 91.6e12),
    "sm_90": (3.35e12, 67e12),
    "sm_90a": (3.35e12, 67e12),
    "sm_100": (8.0e12, 80e12),
    "sm_100a": (8.0e12, 80e12),
    "sm_120": (1.79e12, 104.8e12),
}
"""Memory bandwidth (bytes/s) and fp32 peak (flops/s) of each arch's representative GPU, where no measured floor
is given."""


def arch_peaks(arch: str) -> tuple[float, float]:
    """:data:`ARCH_PEAKS` of ``arch``: a family arch (``sm_100f``) has its plain sibling's; an arch not on record
    has sm_90's."""
    found = ARCH_PEAKS.get(arch) or (ARCH_PEAKS.get(arch[:-1]) if arch.endswith("f") else None)
    return found or ARCH_PEAKS["sm_90"]


LAUNCH_US = 2.0
"""A launch's fixed cost in microseconds."""

L2_FACTOR = 2.5
"""How much faster than device memory the traffic of reused operands is served (L2 and L1 together)."""

_BLOCK_NAMES = re.compile(r"^(?:BLOCK|BLOCK_?SIZE|BLOCK_?THREADS|THREADS|N?THREADS|TPB|BLOCK_?DIM)$")
_LITERAL_BLOCK = re.compile(r"(?:threads|block(?:_?size|_?dim)?|tpb)\w*\s*=\s*(\d{2,4})\b", re.IGNORECASE)
_LAUNCH = re.compile(r"<<<[^,>]+,\s*(\d{2,4})\s*[,>]")


def block_threads(candidate: Candidate, features: CodeFeatures) -> int:
    """The block size the code fixes: ``__launch_bounds__``, a block-size tunable, a literal in the source; 256
    when none says."""
    if features.ptx.max_threads:
        return features.ptx.max_threads
    for name, value in candidate.defines.items():
        if _BLOCK_NAMES.match(name) and str(value).isdigit():
            return int(value)
    for pattern in (_LAUNCH, _LITERAL_BLOCK):
        m = pattern.search(candidate.source)
        if m and 32 <= int(m.group(1)) <= 1024:
            return int(m.group(1))
    return 256


def occupancy(arch: str, *, registers: int, shared_bytes: int, threads: int) -> float:
    """Theoretical occupancy (active warps over the SM's most) of blocks of ``threads`` using ``registers`` per
    thread and ``shared_bytes`` of static shared memory."""
    info = arch_info(arch)
    max_warps, max_blocks = SM_LIMITS.get(info.capability, (64, 32))
    warps = max(1, -(-threads // 32))
    by_warps = max_warps // warps
    regs_per_warp = -(-max(registers, 1) * 32 // 256) * 256
    by_regs = info.regs_per_sm // (regs_per_warp * warps) if registers else max_blocks
    smem = shared_bytes + (1024 if info.capability >= (8, 0) else 0)
    by_smem = info.smem_per_sm // (-(-smem // 128) * 128) if shared_bytes else max_blocks
    blocks = max(0, min(by_warps, by_regs, by_smem, max_blocks))
    return min(1.0, blocks * warps / max_warps)


@record(frozen=True, kw_only=True)
class Prediction:
    """A candidate's predicted lower bound and what it is made of."""

    lower_bound_us: float
    """The prediction, in microseconds per call at the shape."""
    memory_us: float
    """Bytes over the bandwidth."""
    compute_us: float
    """Flops over the fp32 peak."""
    occupancy: float
    """Theoretical occupancy at :attr:`threads`."""
    threads: int
    """The block size assumed."""
    width_bits: float | None
    """Mean global access width."""
    efficiency: float
    """The derate applied to the roofline (1 is none)."""


def _width_factor(width: float | None) -> float:
    if width is None or width >= 128:
        return 1.0
    if width >= 64:
        return 0.92
    if width >= 32:
        return 0.85
    return 0.7


def predict(
    spec: KernelSpec,
    arch: str,
    candidate: Candidate,
    features: CodeFeatures,
    *,
    bytes_moved: float,
    flops: float,
    peaks: tuple[float, float] | None = None,
) -> Prediction:
    """The prediction for ``candidate`` (see the module docstring), for one shape's ``bytes_moved`` and ``flops``;
    ``peaks``: (bandwidth bytes/s, fp32 flops/s), the arch's representative GPU's when None."""
    bandwidth, fp32 = peaks or arch_peaks(arch)
    threads = block_threads(candidate, features)
    report = features.report
    occ = occupancy(arch, registers=report.registers, shared_bytes=report.shared_bytes, threads=threads)
    occ_factor = 1.0 if occ >= 0.5 else max(occ, 1 / 64) ** 0.5 / 0.5**0.5
    ptx = features.ptx
    widths = [w for w in (ptx.widest("load"), ptx.widest("store")) if w is not None]
    width = sum(widths) / len(widths) if widths else None
    spill = 1.0 + (report.spill_stores + report.spill_loads) / 2000
    memory_us = bytes_moved / bandwidth * 1e6
    compute_us = flops / fp32 * 1e6
    loads = sum(ptx.global_loads.values())
    reuse_us = 0.0
    if flops > 0 and loads and ptx.fp_ops:
        intensity = ptx.fp_ops / loads
        load_bytes = (ptx.widest("load") or 32) / 8
        reuse_us = flops / (2 * intensity) * load_bytes / (L2_FACTOR * bandwidth) * 1e6
    efficiency = occ_factor * _width_factor(width) / spill
    bound = (
        max(memory_us / (occ_factor * _width_factor(width)), compute_us / occ_factor, reuse_us / occ_factor) * spill
        + LAUNCH_US
    )
    return Prediction(
        lower_bound_us=bound,
        memory_us=memory_us,
        compute_us=compute_us,
        occupancy=occ,
        threads=threads,
        width_bits=width,
        efficiency=efficiency,
    )


def shape_work(spec: KernelSpec, sizes: Mapping[str, int]) -> tuple[float, float]:
    """Bytes one call moves and the flops it does at ``sizes`` (the floor's two numbers)."""
    from ..evaluate.timing.floors import bytes_moved, eval_flops

    return float(bytes_moved(spec, sizes)), eval_flops(spec.flops, sizes) if spec.flops else 0.0
