"""The GPUs this process can see, and which target archs each one can measure.

Detection goes through cupy (imported lazily): without cupy or without a visible GPU there is nothing to
measure on, and :func:`detect_gpus` returns an empty list rather than failing. Querying device properties
creates no CUDA context in this process; only the isolated workers do GPU work.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from ..convert import record
from ..manifest.archs import ARCHS, arch_for_capability, arch_info, parse_arch, suffix_of

__all__ = ["GpuInfo", "archs_of", "detect_gpus", "gpu_runs_arch", "visible_devices_value"]


@record(frozen=True, kw_only=True)
class GpuInfo:
    """One visible GPU."""

    name: str
    """Device name as the driver reports it, e.g. ``NVIDIA H200``."""
    arch: str
    """Canonical plain arch of its compute capability, e.g. ``sm_90``."""
    index: int
    """Device ordinal in this process (after ``CUDA_VISIBLE_DEVICES``)."""
    memory: int
    """Global memory in bytes."""
    capability: tuple[int, int] = (0, 0)
    """Compute capability (major, minor)."""
    sm_count: int = 0
    """Streaming multiprocessors."""
    l2_bytes: int = 0
    """L2 cache size in bytes."""

    @property
    def key(self) -> str:
        """A key for per-device measurements (floors): the same for every GPU of one model and memory size."""
        return f"{self.name}|{self.arch}|{self.memory}|{self.sm_count}"


def archs_of(gpu: GpuInfo) -> list[str]:
    """The target archs whose machine code runs on ``gpu``: its plain arch; from Hopper on, the arch-specific
    ``a`` arch of the same capability (``sm_90`` and ``sm_90a`` on an H100 or H200); from Blackwell on, the family
    ``f`` arch of every plain arch on record of its major and a minor not above its own (``sm_100f`` and
    ``sm_103f`` on a B300, an sm_103 GPU). An ``a`` arch of another capability is not among them."""
    major, minor = arch_info(gpu.arch).capability
    out = [gpu.arch]
    if major >= 9:
        out.append(gpu.arch + "a")
    if major >= 10:
        members = [a for a, info in ARCHS.items() if info.capability[0] == major and not suffix_of(a)]
        out += [a + "f" for a in members if ARCHS[a].capability[1] <= minor]
    return out


def gpu_runs_arch(gpu: GpuInfo, arch: str) -> bool:
    """Whether code built for ``arch`` (any accepted spelling) runs natively on ``gpu``."""
    try:
        canonical = parse_arch(arch)
    except ValueError:
        return False
    return canonical in archs_of(gpu)


def detect_gpus() -> list[GpuInfo]:
    """Every visible GPU of a known arch; ``[]`` without cupy, without a driver or without a GPU."""
    try:
        import cupy
    except Exception:  # ImportError, or a broken CUDA install raising at import
        return []
    try:
        runtime = cupy.cuda.runtime
        count = int(runtime.getDeviceCount())
    except Exception:  # cudaErrorNoDevice, cudaErrorInsufficientDriver, ...
        return []
    gpus = []
    for index in range(count):
        try:
            props = runtime.getDeviceProperties(index)
        except Exception:
            continue
        major, minor = int(props["major"]), int(props["minor"])
        arch = arch_for_capability(major, minor)
        if arch is None:
            continue
        name = props["name"]
        gpus.append(
            GpuInfo(
                name=name.decode() if isinstance(name, bytes) else str(name),
                arch=arch,
                index=index,
                memory=int(props["totalGlobalMem"]),
                capability=(major, minor),
                sm_count=int(props.get("multiProcessorCount", 0)),
                l2_bytes=int(props.get("l2CacheSize", 0)),
            )
        )
    return gpus


def visible_devices_value(index: int, environ: Mapping[str, str] | None = None) -> str:
    """``CUDA_VISIBLE_DEVICES`` for a child that should see exactly this process's device ``index``."""
    env = os.environ if environ is None else environ
    current = env.get("CUDA_VISIBLE_DEVICES")
    if current is None or not current.strip():
        return str(index)
    entries: Sequence[str] = [e.strip() for e in current.split(",") if e.strip()]
    if index >= len(entries):
        return str(index)
    return entries[index]
