"""Nsight Compute's command line and its CSV output, read into :class:`~r1build.records.KernelProfile` records.

The metric set is small and fixed: duration, achieved occupancy, DRAM, L2 and SM throughput as a share of their
peaks, shared-memory bank conflicts of loads and stores, and every warp stall reason (a regular expression over
the ``smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio`` metrics, cycles per issued
instruction). ncu writes one CSV row per kernel launch and metric (``--csv``, the details page), after its own
``==PROF==`` lines and whatever the program printed; numbers may carry thousands separators.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence

from ..records import KernelProfile

__all__ = ["METRICS", "STALL_PREFIX", "ncu_command", "parse_ncu_csv"]

DURATION = "gpu__time_duration.sum"
OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"
DRAM = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
L2 = "lts__throughput.avg.pct_of_peak_sustained_elapsed"
SM = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
BANK_LD = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"
BANK_ST = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"
STALL_PREFIX = "smsp__average_warps_issue_stalled_"
STALL_SUFFIX = "_per_issue_active.ratio"

METRICS: tuple[str, ...] = (
    DURATION,
    OCCUPANCY,
    DRAM,
    L2,
    SM,
    BANK_LD,
    BANK_ST,
    f"regex:{STALL_PREFIX}.*{re.escape(STALL_SUFFIX)}",
)
"""What ``--metrics`` asks for."""

_TIME_SCALE = {
    "nsecond": 1e-3,
    "ns": 1e-3,
    "usecond": 1.0,
    "us": 1.0,
    "msecond": 1e3,
    "ms": 1e3,
    "second": 1e6,
    "s": 1e6,
}


def ncu_command(ncu: str, program: Sequence[str]) -> list[str]:
    """ncu profiling ``program`` between its ``cudaProfilerStart`` and ``cudaProfilerStop``, caches flushed
    and clocks left as they are (as r1build's own timing runs), CSV with base units."""
    return [
        ncu,
        "--profile-from-start",
        "off",
        "--cache-control",
        "all",
        "--clock-control",
        "none",
        "--print-kernel-base",
        "function",
        "--metrics",
        ",".join(METRICS),
        "--csv",
        "--print-units",
        "base",
        *program,
    ]


def _number(text: str) -> float | None:
    cleaned = text.replace(",", "").strip()
    if not cleaned or cleaned.lower() in ("n/a", "nan"):
        return None
    try:
        return float(cleaned)
    except ValueError:
        return None


def _kernel_name(text: str) -> str:
    """``vadd_kernel`` from ``vadd_kernel``, ``(anonymous namespace)::vadd_kernel`` or
    ``void ns::vadd_kernel<128>(const float *, float *)``."""
    name = text.strip().replace("(anonymous namespace)::", "")
    name = name.split("(", 1)[0].strip() or name
    name = name.rsplit(" ", 1)[-1]  # a return type before the name
    head, _, args = name.partition("<")
    return (head.split("::")[-1] + (f"<{args}" if args else "")) or text.strip()


def parse_ncu_csv(text: str) -> list[KernelProfile]:
    """The kernels in ncu's CSV output (one row per launch and metric), in launch order. Lines that are not CSV
    rows of the table (``==PROF==`` lines, the program's own output) are skipped; :class:`ValueError` when no
    table is found."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    if not lines:
        raise ValueError("ncu printed no CSV table")
    reader = csv.DictReader(io.StringIO("\n".join(lines)))
    need = {"ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value"}
    if not need <= set(reader.fieldnames or ()):
        raise ValueError(f"ncu's CSV lacks the columns {sorted(need - set(reader.fieldnames or ()))}")
    launches: dict[str, dict[str, tuple[str, float | None]]] = {}
    names: dict[str, str] = {}
    for row in reader:
        ident = row["ID"]
        names.setdefault(ident, _kernel_name(row["Kernel Name"]))
        launches.setdefault(ident, {})[row["Metric Name"]] = (row["Metric Unit"], _number(row["Metric Value"]))
    out = []
    for ident in sorted(launches, key=lambda i: int(i) if i.isdigit() else 0):
        metrics = launches[ident]

        def value(name: str, metrics: dict[str, tuple[str, float | None]] = metrics) -> float | None:
            return metrics.get(name, ("", None))[1]

        unit, duration = metrics.get(DURATION, ("", None))
        conflicts = [v for v in (value(BANK_LD), value(BANK_ST)) if v is not None]
        stalls = {
            name[len(STALL_PREFIX) : -len(STALL_SUFFIX)]: v
            for name, (_, v) in metrics.items()
            if name.startswith(STALL_PREFIX) and name.endswith(STALL_SUFFIX) and v is not None
        }
        out.append(
            KernelProfile(
                kernel=names[ident],
                duration_us=duration * _TIME_SCALE.get(unit.strip(), 1e-3) if duration is not None else None,
                achieved_occupancy_pct=value(OCCUPANCY),
                dram_pct=value(DRAM),
                l2_pct=value(L2),
                sm_pct=value(SM),
                shared_bank_conflicts=int(sum(conflicts)) if conflicts else None,
                stalls=dict(sorted(stalls.items())),
            )
        )
    return out
