"""The one check-and-link step of a compiled variant, shared by the static gate and the GPU side's library build.

A host object from nvcc is held to the symbol rules (:func:`.symbols.check_object`), to the static memory limit
(:func:`.device_memory.static_memory_problem`), then linked into a shared library with ``nvcc -shared`` (the CUDA
runtime linked statically, so the library needs nothing but libc and the driver), inside the sandbox of its
origin and within one of the process's compile slots. The gate links what it compiles, so a variant that cannot
become the library the GPU side loads (a relocation overflow, say) is a gate rejection with the linker's words,
and the GPU side runs the very same step.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..errors import ToolchainError, format_subprocess_failure
from ..sandbox import Confinement, Sandbox, run_confined
from ..toolchain.nvcc import Toolchain
from .compile_slots import compile_slot
from .device_memory import STATIC_MEMORY_LIMIT, static_memory_problem
from .symbols import check_object

__all__ = ["Linked", "check_and_link"]


@dataclass(frozen=True)
class Linked:
    """The outcome of :func:`check_and_link`."""

    status: Literal["passed", "rejected", "compile_error"]
    """``passed`` (the library exists), ``rejected`` (a rule or the link refused it) or ``compile_error`` (the
    link ran past its time)."""
    detail: str
    """Why not, for people and models; empty when passed."""
    library: Path | None = None
    """The shared library, when passed."""
    cacheable: bool = True
    """Whether the verdict may be cached (not after a timeout: a loaded machine is the likelier cause)."""


def check_and_link(
    obj: Path,
    entry: str,
    *,
    toolchain: Toolchain,
    sandbox: Sandbox,
    timeout_s: float,
    limit: int = STATIC_MEMORY_LIMIT,
) -> Linked:
    """Check ``obj`` (a position-independent host object defining ``entry``) and link it into ``<obj>.so`` beside
    it, running nvcc in ``obj``'s folder."""
    symbols = check_object(obj, entry)
    if not symbols.ok:
        return Linked("rejected", symbols.reason(entry))
    too_big = static_memory_problem(obj, limit)
    if too_big is not None:
        return Linked("rejected", too_big)
    workdir = obj.parent
    so = obj.with_suffix(".so")
    cmd = [toolchain.nvcc, "-shared", "-o", so.name, obj.name]
    confinement = Confinement(workdir=workdir, toolkit=toolchain.nvcc)
    try:
        with compile_slot():  # an nvcc like any compile: within the process's cores, at the job's rank
            proc = run_confined(sandbox, cmd, confinement, timeout_s=timeout_s)
    except subprocess.TimeoutExpired:
        return Linked("compile_error", f"linking the shared library did not finish within {timeout_s:g} s", None, False)
    except OSError as exc:
        raise ToolchainError(f"cannot run {toolchain.nvcc}: {exc}") from None
    if proc.returncode != 0 or not so.is_file():
        failure = format_subprocess_failure(cmd, proc.returncode, proc.stdout + proc.stderr)
        return Linked("rejected", f"the object does not link into a shared library: {failure}")
    return Linked("passed", "", so)
