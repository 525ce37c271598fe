"""Compiling one candidate variant for one arch with nvcc, and reading ptxas's resource report.

The compile is exactly what the gate judges: the manifest's ``nvcc-flags``, ``-Xptxas -v`` for the report, one
``-gencode`` for the arch (real code only: the gate asks whether *this* arch's machine code is fine) and
``-DNAME=value`` per tunable parameter, the kernel's declaration as a pre-included header (the entry point as
the public header declares it, so a definition with another signature is a compile error), ``-c`` to a host
object in a scratch directory. nvcc runs inside that
directory on relative file names, so its messages name ``<kernel>.cu`` rather than a temporary path: the log is
the same on every machine, fit for the cache and for feeding back to a model.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..defines import check_defines
from ..errors import ToolchainError
from ..manifest.archs import arch_info
from ..records import GateReport
from ..toolchain import Toolchain

__all__ = ["DECLARATION_NAME", "Compilation", "compile_variant", "gencode", "nvcc_command", "parse_ptxas_report"]

DECLARATION_NAME = "r1build_declaration.h"
"""File name of the pre-included declaration in the scratch directory."""


@dataclass(frozen=True)
class Compilation:
    """The outcome of one nvcc run."""

    command: tuple[str, ...]
    """The command line, as run (relative file names, inside the scratch directory)."""
    returncode: int | None
    """nvcc's exit status; None when it was stopped at the timeout."""
    output: str
    """nvcc's stdout and stderr together (compiler messages and the ptxas report)."""
    report: GateReport
    """Resources from the ptxas report (zeros where ptxas said nothing) and the wall seconds taken."""
    object_path: Path | None
    """The host object, when the compile succeeded."""

    @property
    def ok(self) -> bool:
        """Whether nvcc finished with status 0 and wrote the object."""
        return self.returncode == 0 and self.object_path is not None

    @property
    def timed_out(self) -> bool:
        """Whether nvcc was stopped at the timeout."""
        return self.returncode is None


def gencode(arch: str) -> str:
    """The ``-gencode`` value for real code of one arch: ``arch=compute_90a,code=sm_90a`` for ``sm_90a``."""
    number = arch_info(arch).number
    return f"arch=compute_{number},code=sm_{number}"


def nvcc_command(
    nvcc: str, flags: Sequence[str], arch: str, defines: Mapping[str, int | str], source: str, output: str,
    *, pre_include: str | None = None,
) -> list[str]:
    """The gate's nvcc command line for one variant (defines sorted by name, so the line is stable);
    :class:`ValueError` for a define that is not an identifier set to a plain number or identifier."""
    check_defines(defines)
    cmd = [nvcc, *flags, "-Xptxas", "-v", "-gencode", gencode(arch)]
    cmd += [f"-D{name}={defines[name]}" for name in sorted(defines)]
    if pre_include is not None:
        cmd += ["--pre-include", pre_include]
    cmd += ["-c", source, "-o", output]
    return cmd


_ENTRY = re.compile(r"Compiling entry function '(?P<name>[^']+)'")
_PROPERTIES = re.compile(r"Function properties for (?P<name>\S+)")
_FRAME = re.compile(
    r"(?P<stack>\d+) bytes stack frame, (?P<stores>\d+) bytes spill stores, (?P<loads>\d+) bytes spill loads"
)
_USED = re.compile(r"Used (?P<regs>\d+) registers")
_SMEM = re.compile(r"(?P<smem>\d+) bytes smem")


def parse_ptxas_report(output: str, compile_s: float = 0.0) -> GateReport:
    """The resources ptxas reports (``-Xptxas -v``), the largest over the translation unit's functions.

    Registers and static shared memory come from the ``Used N registers, ... N bytes smem`` line of each entry
    function (``__global__``); stack frame and spills from every ``Function properties`` block, entries and
    non-inlined device functions alike, since a device function's spills happen inside the kernel calling it.
    """
    registers = shared = stack = stores = loads = 0
    in_entry = False
    for line in output.splitlines():
        if _ENTRY.search(line):
            in_entry = True
            continue
        if _PROPERTIES.search(line):
            continue
        frame = _FRAME.search(line)
        if frame:
            stack = max(stack, int(frame["stack"]))
            stores = max(stores, int(frame["stores"]))
            loads = max(loads, int(frame["loads"]))
            continue
        used = _USED.search(line)
        if used and in_entry:
            registers = max(registers, int(used["regs"]))
            smem = _SMEM.search(line)
            if smem:
                shared = max(shared, int(smem["smem"]))
            in_entry = False
    return GateReport(
        registers=registers,
        spill_stores=stores,
        spill_loads=loads,
        stack_frame=stack,
        shared_bytes=shared,
        compile_s=round(compile_s, 3),
    )


def compile_variant(
    source: str,
    defines: Mapping[str, int | str],
    arch: str,
    *,
    name: str,
    flags: Sequence[str],
    toolchain: Toolchain,
    workdir: Path,
    timeout_s: float,
    declaration: str | None = None,
) -> Compilation:
    """Compile ``source`` as ``<workdir>/<name>.cu`` for ``arch`` into ``<workdir>/<name>.o``, with
    ``declaration`` (a header's text) pre-included when given.

    A compile that fails or runs past ``timeout_s`` is a :class:`Compilation` that is not ``ok``; only an nvcc
    that cannot be started at all raises :class:`~r1build.errors.ToolchainError`.
    """
    src, obj = f"{name}.cu", f"{name}.o"
    (workdir / src).write_text(source, encoding="utf-8")
    if declaration is not None:
        (workdir / DECLARATION_NAME).write_text(declaration, encoding="utf-8")
    cmd = nvcc_command(toolchain.nvcc, flags, arch, defines, src, obj,
                       pre_include=DECLARATION_NAME if declaration is not None else None)
    start = time.perf_counter()
    try:
        # a session of its own, so a timeout stops nvcc's children (cudafe++, cicc, ptxas) as well
        proc = subprocess.Popen(
            cmd,
            cwd=workdir,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
        )
    except OSError as exc:
        raise ToolchainError(f"cannot run {toolchain.nvcc}: {exc}") from None
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        partial, _ = proc.communicate()
        message = f"{partial}\nnvcc did not finish within {timeout_s:g} s and was stopped."
        return Compilation(tuple(cmd), None, message.strip(), GateReport(compile_s=timeout_s), None)
    elapsed = time.perf_counter() - start
    made = workdir / obj
    ok = proc.returncode == 0 and made.is_file()
    return Compilation(tuple(cmd), proc.returncode, output, parse_ptxas_report(output, elapsed), made if ok else None)
