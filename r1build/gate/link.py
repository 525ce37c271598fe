"""The one check-and-link step of a compiled variant, shared by the static gate and the GPU side's library build.

A host object from nvcc is held to the symbol rules (:func:`.symbols.check_object`), to the static memory limit
(:func:`.device_memory.static_memory_problem`), then linked into a shared library with ``nvcc -shared`` (the CUDA
runtime linked statically, so the library needs nothing but libc and the driver), inside the sandbox of its
origin and within one of the process's compile slots. The gate links what it compiles, so a variant that cannot
become the library the GPU side loads (a relocation overflow, say) is a gate rejection with the linker's words,
and the GPU side runs the very same step.

Every library also gets r1build's own :data:`LAST_ERROR_SYMBOL` (compiled once per process and nvcc, from
:data:`_LAST_ERROR_SOURCE`): the statically linked runtime is the library's own, so only a function inside it can
read the launch error a candidate left unread (an invalid launch configuration whose launcher returns
``cudaSuccess`` regardless); the GPU worker calls it after each call and names that error. A candidate cannot
define the name: the symbol rules allow it no strong global but its entry point, and no entry point may take it.
"""

from __future__ import annotations

import atexit
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Literal

from ..convert import record
from ..errors import ToolchainError, format_subprocess_failure
from ..sandbox import Runner, Sandbox, compile_confinement, run_confined, run_process, unconfined
from ..toolchain.nvcc import Toolchain
from .compile_slots import compile_slot
from .device_memory import STATIC_MEMORY_LIMIT, static_memory_problem
from .symbols import UnreadableObject, check_object, reader

__all__ = ["LAST_ERROR_SYMBOL", "Linked", "check_and_link"]

LAST_ERROR_SYMBOL = "r1build_last_error"
"""The function every candidate library gets beside its entry point: its own runtime's ``cudaGetLastError``."""

_LAST_ERROR_SOURCE = f"""#include <cuda_runtime_api.h>
extern "C" __attribute__((visibility("default"))) int {LAST_ERROR_SYMBOL}(void) {{
    return static_cast<int>(cudaGetLastError());
}}
"""

_SHIMS: dict[str, Path] = {}
_SHIMS_LOCK = threading.Lock()


@record(frozen=True)
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
    runner: Runner = run_process,
) -> Linked:
    """Check ``obj`` (a position-independent host object defining ``entry``) and link it into ``<obj>.so`` beside
    it, running nvcc in ``obj``'s folder through ``runner`` (:mod:`r1build.toolchain.runner`)."""
    if entry == LAST_ERROR_SYMBOL:
        return Linked("rejected", f"the entry point may not be named {LAST_ERROR_SYMBOL}: r1build's own function")
    try:
        symbols = check_object(obj, entry, sandbox)
        if not symbols.ok:
            return Linked("rejected", symbols.reason(entry))
        too_big = static_memory_problem(obj, limit, reader(obj, sandbox))
    except UnreadableObject as exc:
        return Linked("rejected", f"the gate cannot inspect the compiled object: {exc}", None, exc.cacheable)
    if too_big is not None:
        return Linked("rejected", too_big)
    workdir = obj.parent
    so = obj.with_suffix(".so")
    shim = workdir / f"{LAST_ERROR_SYMBOL}.o"
    cmd = [toolchain.nvcc, "-shared", "-o", so.name, obj.name, shim.name]
    confinement = compile_confinement(workdir, toolchain.nvcc)
    try:
        with compile_slot():  # an nvcc like any compile: within the process's cores, at the job's rank
            shutil.copyfile(_last_error_object(toolchain, timeout_s, runner), shim)
            proc = run_confined(sandbox, cmd, confinement, timeout_s=timeout_s, runner=runner)
    except subprocess.TimeoutExpired:
        return Linked("compile_error", f"linking the shared library did not finish within {timeout_s:g} s", None, False)
    except OSError as exc:
        raise ToolchainError(f"cannot run {toolchain.nvcc}: {exc}") from None
    if proc.returncode != 0 or not so.is_file() or so.is_symlink():
        failure = format_subprocess_failure(cmd, proc.returncode, proc.stdout + proc.stderr)
        return Linked("rejected", f"the object does not link into a shared library: {failure}")
    return Linked("passed", "", so)


def _last_error_object(toolchain: Toolchain, timeout_s: float, runner: Runner) -> Path:
    """The object of :data:`_LAST_ERROR_SOURCE` for ``toolchain`` (r1build's own code: compiled unconfined, once
    per process and nvcc, in a folder removed at exit)."""
    with _SHIMS_LOCK:
        made = _SHIMS.get(toolchain.nvcc)
        if made is not None and made.is_file():
            return made
        folder = Path(tempfile.mkdtemp(prefix="r1build-shim-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        (folder / "last_error.cpp").write_text(_LAST_ERROR_SOURCE)
        cmd = [toolchain.nvcc, "-x", "c++", "-c", "-Xcompiler", "-fPIC", "-o", "last_error.o", "last_error.cpp"]
        try:
            proc = run_confined(
                unconfined(),
                cmd,
                compile_confinement(folder, toolchain.nvcc),
                timeout_s=timeout_s,
                runner=runner,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ToolchainError(
                f"cannot compile r1build's launch-error function with {toolchain.nvcc}: {exc}"
            ) from None
        if proc.returncode != 0:
            failure = format_subprocess_failure(cmd, proc.returncode, proc.stdout + proc.stderr)
            raise ToolchainError(f"cannot compile r1build's launch-error function: {failure}")
        _SHIMS[toolchain.nvcc] = folder / "last_error.o"
        return _SHIMS[toolchain.nvcc]
