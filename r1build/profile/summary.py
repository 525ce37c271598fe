"""Nsight Compute's findings in one line, for the next round's feedback and the report.

``memory-bound at 62% of DRAM peak; top stall: long scoreboard (8.1 cycles per instruction); achieved occupancy
48%; 1,024 shared-memory bank conflicts``. A call that launches several kernels is summarised by its longest.
"""

from __future__ import annotations

from ..records import KernelProfile, Profile

__all__ = ["BUSY_PCT", "bottleneck", "main_kernel", "profile_summary", "top_stall"]

BUSY_PCT = 60.0
"""A unit above this share of its peak is what bounds the kernel; below it for all, the kernel is latency-bound."""

NOT_STALLS = frozenset({"selected", "not_selected"})
"""Warp states that ncu counts with the stalls but that are not waiting (issuing, or eligible and not picked)."""


def main_kernel(profile: Profile) -> KernelProfile | None:
    """The call's longest kernel (its first when durations are unknown)."""
    if not profile.kernels:
        return None
    return max(profile.kernels, key=lambda k: k.duration_us or 0.0)


def bottleneck(kernel: KernelProfile) -> str:
    """What bounds the kernel, with the share of peak: memory (DRAM), L2, compute (SM), or latency."""
    units = [
        (kernel.dram_pct, "memory-bound", "DRAM"),
        (kernel.l2_pct, "L2-bound", "L2"),
        (kernel.sm_pct, "compute-bound", "SM"),
    ]
    known = [(pct, word, unit) for pct, word, unit in units if pct is not None]
    if not known:
        return "no throughput measured"
    pct, word, unit = max(known, key=lambda x: x[0])
    if pct >= BUSY_PCT:
        return f"{word} at {pct:.0f}% of {unit} peak"
    shares = ", ".join(f"{unit} {p:.0f}%" for p, _, unit in known)
    return f"latency-bound (no unit near its peak: {shares})"


def top_stall(kernel: KernelProfile) -> tuple[str, float] | None:
    """The warp stall reason with the most cycles per issued instruction."""
    stalls = {k: v for k, v in kernel.stalls.items() if k not in NOT_STALLS and v > 0}
    if not stalls:
        return None
    name = max(stalls, key=lambda k: stalls[k])
    return name, stalls[name]


def profile_summary(profile: Profile) -> str:
    """The findings in one line (see the module docstring)."""
    kernel = main_kernel(profile)
    if kernel is None:
        return "Nsight Compute saw no kernel launch"
    parts = [bottleneck(kernel)]
    stall = top_stall(kernel)
    if stall is not None:
        parts.append(f"top stall: {stall[0].replace('_', ' ')} ({stall[1]:.1f} cycles per instruction)")
    if kernel.achieved_occupancy_pct is not None:
        parts.append(f"achieved occupancy {kernel.achieved_occupancy_pct:.0f}%")
    if kernel.shared_bank_conflicts:
        parts.append(f"{kernel.shared_bank_conflicts:,} shared-memory bank conflicts")
    text = "; ".join(parts)
    if len(profile.kernels) > 1:
        text += f" (kernel {kernel.kernel}, the longest of {len(profile.kernels)})"
    return text
