"""What a candidate's compiled code says before it runs: ptxas's resource report and counts from its PTX.

:func:`compile_features` runs nvcc once per variant the way the gate does (the manifest's flags, one
``-gencode``, the tunable values, the declaration pre-included), to a cubin with ``-Xptxas -v`` and ``--keep``,
and reads the ptxas report and the kept PTX. :func:`ptx_features` counts, statically (each instruction once,
whatever its loop trip count): global loads and stores by width, shared-memory loads and stores, floating-point
arithmetic, barriers, atomics, and the block size a ``__launch_bounds__`` fixes (``.maxntid``).
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

from ..convert import field, record
from ..errors import ToolchainError
from ..gate.nvcc import DECLARATION_NAME, gencode, parse_ptxas_report
from ..manifest.cdecl import declaration
from ..manifest.model import KernelSpec
from ..records import Candidate, GateReport
from ..sandbox import compile_confinement, run_confined, sandbox_for
from ..toolchain.defines import check_defines
from ..toolchain.nvcc import Toolchain

__all__ = ["CodeFeatures", "PtxFeatures", "compile_features", "ptx_features"]


@record(frozen=True, kw_only=True)
class PtxFeatures:
    """Static instruction counts of a translation unit's PTX."""

    global_loads: dict[int, int] = field(default_factory=dict)
    """``ld.global`` (and ``ld.global.nc``) instructions by access width in bits (32, 64, 128 ...)."""
    global_stores: dict[int, int] = field(default_factory=dict)
    """``st.global`` instructions by access width in bits."""
    shared_loads: int = 0
    shared_stores: int = 0
    fp_ops: int = 0
    """Floating-point arithmetic instructions (add, sub, mul, fma, div, ex2, rcp ...)."""
    barriers: int = 0
    """``bar.sync`` / ``barrier.sync`` instructions."""
    atomics: int = 0
    """``atom`` and ``red`` instructions."""
    instructions: int = 0
    """Every instruction line."""
    max_threads: int | None = None
    """``.maxntid`` of an entry (a ``__launch_bounds__``), when one is given."""

    def widest(self, kind: str = "load") -> int | None:
        """The widest global access of ``kind`` (``load`` or ``store``) in bits."""
        counts = self.global_loads if kind == "load" else self.global_stores
        return max(counts) if counts else None

    def mean_width(self) -> float | None:
        """The mean width in bits of the global accesses, loads and stores together, by instruction."""
        total = Counter(self.global_loads) + Counter(self.global_stores)
        n = sum(total.values())
        return sum(w * c for w, c in total.items()) / n if n else None


@record(frozen=True, kw_only=True)
class CodeFeatures:
    """ptxas's report and the PTX counts of one variant for one arch."""

    report: GateReport
    ptx: PtxFeatures


_BITS = {
    "b8": 8,
    "u8": 8,
    "s8": 8,
    "b16": 16,
    "u16": 16,
    "s16": 16,
    "f16": 16,
    "bf16": 16,
    "b32": 32,
    "u32": 32,
    "s32": 32,
    "f32": 32,
    "b64": 64,
    "u64": 64,
    "s64": 64,
    "f64": 64,
    "f16x2": 32,
    "bf16x2": 32,
    "b128": 128,
}
_INSTRUCTION = re.compile(r"^\s*(?:@!?%\w+\s+)?([a-z][\w.:]*)")
_FP = re.compile(
    r"^(?:add|sub|mul|fma|mad|div|rcp|sqrt|rsqrt|ex2|lg2|sin|cos|tanh|max|min)(?:\.[\w]+)*\.(?:f16|f16x2|"
    r"bf16|bf16x2|f32|f64)$"
)


def _width(opcode: str) -> int:
    parts = opcode.split(".")
    vector = next((int(p[1:]) for p in parts if re.fullmatch(r"v[248]", p)), 1)
    bits = next((_BITS[p] for p in reversed(parts) if p in _BITS), 32)
    return vector * bits


def ptx_features(ptx: str) -> PtxFeatures:
    """The counts of :class:`PtxFeatures` from PTX text."""
    loads: Counter[int] = Counter()
    stores: Counter[int] = Counter()
    counts: Counter[str] = Counter()
    max_threads = None
    for line in ptx.splitlines():
        m = re.search(r"\.maxntid\s+(\d+)(?:,\s*(\d+))?(?:,\s*(\d+))?", line)
        if m:
            threads = 1
            for g in m.groups():
                threads *= int(g) if g else 1
            max_threads = max(max_threads or 0, threads)
            continue
        stripped = line.strip()
        if not stripped or stripped.startswith(("//", ".", "{", "}", "$")) or stripped.endswith(":"):
            continue
        found = _INSTRUCTION.match(stripped)
        if not found:
            continue
        op = found.group(1)
        counts["all"] += 1
        if op.startswith("ld.global"):
            loads[_width(op)] += 1
        elif op.startswith("st.global"):
            stores[_width(op)] += 1
        elif op.startswith("ld.shared"):
            counts["ld.shared"] += 1
        elif op.startswith("st.shared"):
            counts["st.shared"] += 1
        elif op.startswith(("bar.sync", "barrier.sync", "bar.red")):
            counts["bar"] += 1
        elif op.startswith(("atom.", "red.")):
            counts["atom"] += 1
        elif _FP.match(op):
            counts["fp"] += 1
    return PtxFeatures(
        global_loads=dict(sorted(loads.items())),
        global_stores=dict(sorted(stores.items())),
        shared_loads=counts["ld.shared"],
        shared_stores=counts["st.shared"],
        fp_ops=counts["fp"],
        barriers=counts["bar"],
        atomics=counts["atom"],
        instructions=counts["all"],
        max_threads=max_threads,
    )


def compile_features(
    candidate: Candidate,
    spec: KernelSpec,
    arch: str,
    *,
    flags: list[str],
    toolchain: Toolchain,
    timeout_s: float = 300.0,
) -> CodeFeatures | None:
    """ptxas's report and the PTX counts of ``candidate`` for ``arch``; None when it does not compile."""
    check_defines(candidate.defines)
    with tempfile.TemporaryDirectory(prefix="r1build-perf-") as tmp:
        work = Path(tmp)
        (work / "candidate.cu").write_text(candidate.source, encoding="utf-8")
        (work / DECLARATION_NAME).write_text(declaration(spec), encoding="utf-8")
        (work / "keep").mkdir()
        cmd = [
            toolchain.nvcc,
            *flags,
            "-Xptxas",
            "-v",
            "-gencode",
            gencode(arch),
            *(f"-D{k}={candidate.defines[k]}" for k in sorted(candidate.defines)),
            "--pre-include",
            DECLARATION_NAME,
            "--keep",
            "--keep-dir",
            "keep",
            "-cubin",
            "candidate.cu",
            "-o",
            "candidate.cubin",
        ]
        sandbox, confinement = sandbox_for(candidate.origin.kind), compile_confinement(work, toolchain.nvcc)
        try:
            done = run_confined(sandbox, cmd, confinement, timeout_s=timeout_s)
        except OSError as exc:
            raise ToolchainError(f"cannot run {toolchain.nvcc}: {exc}") from None
        except subprocess.TimeoutExpired:
            return None
        ptx_files = sorted((work / "keep").glob("*.ptx"))
        if done.returncode != 0 or not ptx_files:
            return None
        return CodeFeatures(
            report=parse_ptxas_report(done.stdout + done.stderr),
            ptx=ptx_features(ptx_files[0].read_text(encoding="utf-8", errors="replace")),
        )
