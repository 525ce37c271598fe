"""Compiling one candidate variant with nvcc, for one arch or several at once, and reading ptxas's resource report.

The compile is exactly what the gate judges: the manifest's ``nvcc-flags``, ``-Xptxas -v`` for the report, one
``-gencode`` per arch (real code only: the gate asks whether *these* archs' machine code is fine) and
``-DNAME=value`` per tunable parameter, the kernel's declaration as a pre-included header (the entry point as
the public header declares it, so a definition with another signature is a compile error), ``-c`` to a host
object in a scratch directory. nvcc runs inside that
directory on relative file names, so its messages name ``<kernel>.cu`` rather than a temporary path: the log is
the same on every machine, fit for the cache and for feeding back to a model.

One variant for several archs is one nvcc (the front end and host compile run once, ptxas once per arch), and
the ptxas report is split per arch (:func:`split_ptxas_report`). Every nvcc of the process waits for one of the
process's compile slots (:mod:`.compile_slots`: one per core, handed out by rank).
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..convert import record, replace
from ..errors import SandboxUnavailableError, ToolchainError
from ..manifest.archs import arch_info
from ..manifest.flags import include_folders
from ..records import GateReport
from ..sandbox import Runner, Sandbox, compile_confinement, run_confined, run_process, unconfined
from ..settings import SANDBOX_ENV
from ..toolchain.defines import check_defines
from ..toolchain.nvcc import Toolchain
from .compile_slots import COMPILE_SLOTS, compile_slot
from .fatbin import device_code_bytes
from .messages import own_messages

__all__ = [
    "COMPILE_SLOTS",
    "DECLARATION_NAME",
    "Compilation",
    "compile_variant",
    "gencode",
    "nvcc_command",
    "parse_ptxas_report",
    "split_ptxas_report",
]


PIC_FLAGS = ("-Xcompiler", "-fPIC")
"""What makes a compile's host code position-independent, for a shared library: a GPU evaluator's library builds
and a gate that keeps its objects for them (the device code and the ptxas report are the same)."""


DECLARATION_NAME = "r1build_declaration.h"
"""File name of the pre-included declaration in the scratch directory."""


@record(frozen=True, kw_only=True)
class Compilation:
    """The outcome of one nvcc run."""

    command: tuple[str, ...]
    """The command line, as run (relative file names, inside the scratch directory)."""
    returncode: int | None
    """nvcc's exit status; None when it was stopped at the timeout."""
    output: str
    """nvcc's stdout and stderr together (compiler messages and the ptxas report)."""
    report: GateReport
    """Resources from the ptxas report (zeros where ptxas said nothing; the largest over the archs when several)
    and the wall seconds taken."""
    object_path: Path | None
    """The host object, when the compile succeeded."""
    reports: Mapping[str, GateReport] | None = None
    """Each arch's resources, from its part of the report (the wall seconds shared evenly); None when a compile
    for several archs failed or its report could not be split (compile each arch alone then)."""

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


def _archs(arch: str | Sequence[str]) -> list[str]:
    return [arch] if isinstance(arch, str) else list(arch)


def nvcc_command(
    nvcc: str,
    flags: Sequence[str],
    arch: str | Sequence[str],
    defines: Mapping[str, int | str],
    source: str,
    output: str,
    *,
    pre_include: str | None = None,
) -> list[str]:
    """The gate's nvcc command line for one variant and one arch or several (defines sorted by name, so the line
    is stable); :class:`ValueError` for a define that is not an identifier set to a plain number or identifier."""
    check_defines(defines)
    cmd = [nvcc, *flags, "-Xptxas", "-v"]
    for one in _archs(arch):
        cmd += ["-gencode", gencode(one)]
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


_GMEM = re.compile(r"^ptxas info\s*: \d+ bytes gmem")
_FOR_ARCH = re.compile(r"Compiling entry function '[^']+' for '(?P<arch>sm_\w+)'")


def split_ptxas_report(output: str, archs: Sequence[str]) -> dict[str, str] | None:
    """Each arch's part of the ptxas report of one nvcc for ``archs`` (ptxas runs once per arch, each run
    starting with its ``bytes gmem`` line and naming its arch in every ``Compiling entry function ... for``
    line); None when the parts cannot be told apart for certain."""
    parts: list[list[str]] = []
    for line in output.splitlines():
        if _GMEM.match(line):
            parts.append([])
        if parts:
            parts[-1].append(line)
    if len(parts) != len(archs):
        return None
    out: dict[str, str] = {}
    for lines in parts:
        named = {m["arch"] for m in map(_FOR_ARCH.search, lines) if m}
        if len(named) != 1:
            return None
        (arch,) = named
        if arch not in archs or arch in out:
            return None
        out[arch] = "\n".join(lines)
    return out


def compile_variant(
    source: str,
    defines: Mapping[str, int | str],
    arch: str | Sequence[str],
    *,
    name: str,
    flags: Sequence[str],
    toolchain: Toolchain,
    workdir: Path,
    timeout_s: float,
    declaration: str | None = None,
    sandbox: Sandbox | None = None,
    runner: Runner = run_process,
) -> Compilation:
    """Compile ``source`` as ``<workdir>/<name>.cu`` for ``arch`` (one, or several at once) into
    ``<workdir>/<name>.o``, with ``declaration`` (a header's text) pre-included when given. The compile waits for
    one of the process's compile slots; ``timeout_s`` counts from when it starts.

    ``sandbox`` confines a model-written source (:func:`r1build.sandbox.sandbox_for`): nvcc then sees only the
    toolkit, the system and ``workdir``, and the output keeps only the messages about the candidate's own file
    (:func:`.messages.own_messages`). None compiles a trusted source as it is. nvcc runs through ``runner``
    (:mod:`r1build.toolchain.runner`).

    A compile that fails or runs past ``timeout_s`` is a :class:`Compilation` that is not ``ok``; only an nvcc
    that cannot be started at all raises :class:`~r1build.errors.ToolchainError`.
    """
    with compile_slot():
        done = _compile(
            source,
            defines,
            _archs(arch),
            name=name,
            flags=flags,
            toolchain=toolchain,
            workdir=workdir,
            timeout_s=timeout_s,
            declaration=declaration,
            sandbox=sandbox or unconfined(),
            runner=runner,
        )
    if sandbox is not None and sandbox.kind == "bwrap" and done.returncode not in (0, None):
        _check_sandbox_compiles(sandbox, toolchain, runner)
    return done


_SANDBOX_COMPILES: dict[str, str | None] = {}
"""Per nvcc: None where a trivial kernel compiles inside the sandbox, else nvcc's output there."""
_TRIVIAL = "__global__ void r1build_sandbox_check(float* x) { x[threadIdx.x] = 0.0f; }\n"


def _check_sandbox_compiles(sandbox: Sandbox, toolchain: Toolchain, runner: Runner) -> None:
    """After a confined compile failed: :class:`~r1build.errors.SandboxUnavailableError` when the sandbox itself
    cannot compile a trivial kernel with this nvcc (for its default arch; a toolkit it does not show, say), so that a
    failure of the sandbox is never taken, and cached, as the candidate's compile error. Checked once per nvcc."""
    key = toolchain.nvcc
    if key not in _SANDBOX_COMPILES:
        with tempfile.TemporaryDirectory(prefix="r1build-sandbox-check-") as scratch:
            done = _compile(
                _TRIVIAL,
                {},
                [],
                name="check",
                flags=[],
                toolchain=toolchain,
                workdir=Path(scratch),
                timeout_s=300,
                declaration=None,
                sandbox=sandbox,
                runner=runner,
            )
        _SANDBOX_COMPILES[key] = None if done.ok else done.output
    problem = _SANDBOX_COMPILES[key]
    if problem is not None:
        raise SandboxUnavailableError(
            f"{toolchain.nvcc} cannot compile inside the sandbox of model-written code (a trivial kernel failed: "
            f"{' '.join(problem.split())[:300]}); put the CUDA toolkit under /usr or name it with R1BUILD_NVCC, "
            f"or set {SANDBOX_ENV}=off to compile unconfined"
        )


def _compile(
    source: str,
    defines: Mapping[str, int | str],
    archs: list[str],
    *,
    name: str,
    flags: Sequence[str],
    toolchain: Toolchain,
    workdir: Path,
    timeout_s: float,
    declaration: str | None,
    sandbox: Sandbox,
    runner: Runner,
) -> Compilation:
    src, obj = f"{name}.cu", f"{name}.o"
    (workdir / src).write_text(source, encoding="utf-8")
    if declaration is not None:
        (workdir / DECLARATION_NAME).write_text(declaration, encoding="utf-8")
    cmd = nvcc_command(
        toolchain.nvcc,
        flags,
        archs,
        defines,
        src,
        obj,
        pre_include=DECLARATION_NAME if declaration is not None else None,
    )
    confinement = compile_confinement(workdir, toolchain.nvcc, include_folders(flags))  # the user's headers
    start = time.perf_counter()
    try:
        # the runner stops nvcc's children (cudafe++, cicc, ptxas) as well at a timeout, and at an interrupt of
        # the compile scope (:mod:`r1build.toolchain.stopping`): no verdict then
        proc = run_confined(sandbox, cmd, confinement, timeout_s=timeout_s, runner=runner, merge_stderr=True)
    except OSError as exc:
        raise ToolchainError(f"cannot run {toolchain.nvcc}: {exc}") from None
    except subprocess.TimeoutExpired as stopped:
        return _stopped(stopped, cmd, src, sandbox, timeout_s)
    elapsed = time.perf_counter() - start
    output = proc.stdout
    if sandbox.kind != "trusted":
        output = own_messages(output, (src, DECLARATION_NAME))
    made = workdir / obj
    ok = proc.returncode == 0 and made.is_file() and not made.is_symlink()  # never a link out of the folder
    report, reports = parse_ptxas_report(output, elapsed), _arch_reports(output, archs, elapsed) if ok else None
    if ok:
        report, reports = _sized(made, archs, report, reports)
    return Compilation(
        command=tuple(cmd),
        returncode=proc.returncode,
        output=output,
        report=report,
        object_path=made if ok else None,
        reports=reports,
    )


def _sized(
    obj: Path, archs: list[str], report: GateReport, reports: dict[str, GateReport] | None
) -> tuple[GateReport, dict[str, GateReport] | None]:
    """The reports with the device code each arch adds to ``obj`` (the single report: all of it)."""
    sizes = device_code_bytes(obj)
    whole = replace(report, device_bytes=sum(sizes.values()))
    if reports is None:
        return whole, None
    return whole, {a: replace(r, device_bytes=sizes.get(a, 0)) for a, r in reports.items()}


def _stopped(
    stopped: subprocess.TimeoutExpired, cmd: list[str], src: str, sandbox: Sandbox, timeout_s: float
) -> Compilation:
    """The compilation of an nvcc that ran past ``timeout_s`` (stopped with its children by the runner), what it
    said kept."""
    partial = stopped.output if isinstance(stopped.output, str) else ""
    if sandbox.kind != "trusted":
        partial = own_messages(partial, (src, DECLARATION_NAME))
    message = f"{partial}\nnvcc did not finish within {timeout_s:g} s and was stopped."
    return Compilation(
        command=tuple(cmd),
        returncode=None,
        output=message.strip(),
        report=GateReport(compile_s=timeout_s),
        object_path=None,
    )


def _arch_reports(output: str, archs: list[str], elapsed: float) -> dict[str, GateReport] | None:
    """ptxas's report per arch of a compilation that succeeded (None when it cannot be split by arch)."""
    if len(archs) == 1:
        return {archs[0]: parse_ptxas_report(output, elapsed)}
    if not archs:
        return None
    parts = split_ptxas_report(output, archs)
    return {a: parse_ptxas_report(parts[a], elapsed / len(archs)) for a in archs} if parts is not None else None
