"""Shared libraries of candidate variants, built for the GPU's arch and checked before anything loads them.

One variant is compiled exactly as the static gate compiles it (its :func:`~r1build.gate.nvcc.compile_variant`,
the manifest's flags, real code for the arch) plus ``-Xcompiler -fPIC`` (or the gate's own object of it is taken,
where the gate kept one), then its host object goes through the gate's own check-and-link step
(:func:`~r1build.gate.link.check_and_link`): an object that needs symbols outside the allowlist or reserves more
static memory than the limit is rejected, naming them, and is never linked, let alone loaded; then it is linked
with ``nvcc -shared`` (the CUDA runtime linked statically, so the library needs nothing but libc and the driver),
the link taking one of the process's compile slots as a compile does (:mod:`~r1build.gate.compile_slots`: within
the cores, the first job's links before the later jobs' compiles).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from ..convert import record
from ..errors import format_subprocess_failure
from ..gate.link import check_and_link
from ..gate.nvcc import PIC_FLAGS, compile_variant
from ..records import Candidate
from ..sandbox import sandbox_for
from ..toolchain.nvcc import Toolchain

__all__ = ["Library", "LibraryFailure", "build_library"]


@record(frozen=True)
class Library:
    """A loadable shared library of one variant."""

    path: Path
    """The ``.so`` file."""
    digest: str
    """Variant digest of the candidate it was built from."""
    arch: str
    """Arch of its machine code."""
    build_s: float
    """Wall seconds compile, check and link took."""


@record(frozen=True)
class LibraryFailure:
    """Why a variant has no library: it does not compile, or its object breaks the symbol rules."""

    status: Literal["compile_error", "rejected"]
    """Result status to report."""
    detail: str
    """Compiler output or the symbol check's reason."""


def build_library(
    candidate: Candidate,
    entry: str,
    arch: str,
    *,
    flags: Sequence[str],
    toolchain: Toolchain,
    workdir: Path,
    timeout_s: float = 300.0,
    declaration: str | None = None,
    compiled_object: Path | None = None,
    linked_library: Path | None = None,
) -> Library | LibraryFailure:
    """Compile, check and link one variant in ``workdir`` (created if missing), with the entry point's
    ``declaration`` pre-included as the gate compiles it; or, given the ``compiled_object`` of the gate's own
    compile of the variant (position-independent, with code for ``arch`` and maybe other archs), check and link
    that, without compiling again; or, given the ``linked_library`` the gate's check-and-link step made of that
    object in this process, take that library as it is."""
    workdir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    name = f"v_{candidate.digest[:16]}"
    if linked_library is not None:
        so = workdir / f"{name}.so"
        shutil.copyfile(linked_library, so)
        return Library(so, candidate.digest, arch, time.perf_counter() - start)
    if compiled_object is not None:
        obj = workdir / f"{name}.o"
        shutil.copyfile(compiled_object, obj)
    else:
        compiled = compile_variant(
            candidate.source,
            candidate.defines,
            arch,
            name=name,
            flags=[*flags, *PIC_FLAGS],
            toolchain=toolchain,
            workdir=workdir,
            timeout_s=timeout_s,
            declaration=declaration,
            sandbox=sandbox_for(candidate.origin.kind),
        )
        if not compiled.ok or compiled.object_path is None:
            why = (
                "nvcc timed out"
                if compiled.timed_out
                else format_subprocess_failure(list(compiled.command), compiled.returncode or 0, compiled.output)
            )
            return LibraryFailure("compile_error", why)
        obj = compiled.object_path
    linked = check_and_link(
        obj, entry, toolchain=toolchain, sandbox=sandbox_for(candidate.origin.kind), timeout_s=timeout_s
    )
    if linked.status != "passed" or linked.library is None:
        return LibraryFailure("compile_error" if linked.status == "compile_error" else "rejected", linked.detail)
    so = linked.library
    return Library(so, candidate.digest, arch, time.perf_counter() - start)
