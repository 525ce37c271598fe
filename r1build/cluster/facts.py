"""What one process of a cluster runs: its r1build, its nvcc, its host and GPUs, so a resolve refuses a cluster of
mixed versions before any job runs.

Computed the same way on the resolving machine and (through ``Client.run``) on every worker; imports nothing of
Dask, so the worker side and the tests read it cheaply.
"""

from __future__ import annotations

import hashlib
import platform
import socket
from pathlib import Path

from .. import __version__
from ..convert import field, record

__all__ = ["COMPILE_RESOURCE", "ProcessFacts", "mismatch", "package_digest", "process_facts"]

COMPILE_RESOURCE = "compile"
"""The Dask resource of a worker slot that runs static-gate compiles."""

_PACKAGE = Path(__file__).resolve().parents[1]


def package_digest() -> str:
    """sha256 (16 hex digits) of r1build's own Python sources: two installs with the same version number but
    other code (a checkout with local changes) differ here."""
    h = hashlib.sha256()
    for path in sorted(_PACKAGE.rglob("*.py")):
        h.update(path.relative_to(_PACKAGE).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


@record(frozen=True, kw_only=True)
class ProcessFacts:
    """One process's r1build, CUDA toolchain, host and GPUs."""

    version: str
    """r1build's version number."""
    code: str
    """:func:`package_digest` of its sources."""
    toolchain: str | None
    """nvcc's build identity (``cuda_13.0.r13.0/compiler.36424714_0``), None without a usable nvcc."""
    toolchain_problem: str = ""
    """Why there is no usable nvcc."""
    host: str = ""
    """Host name."""
    python: str = ""
    """Python version."""
    gpus: list[str] = field(default_factory=list)
    """Visible GPUs as ``name (arch)``, in device order (empty without cupy or a GPU)."""

    def describe(self) -> str:
        """``r1build 0.1.0 (code 0123abcd...), nvcc cuda_13.0...``."""
        return f"r1build {self.version} (code {self.code}), nvcc {self.toolchain or 'missing'}"


def process_facts(*, with_gpus: bool = True) -> ProcessFacts:
    """This process's facts (``with_gpus``: also list its GPUs, which imports cupy where installed)."""
    from ..errors import ToolchainError
    from ..toolchain.nvcc import toolchain

    try:
        ident: str | None = toolchain().ident
        problem = ""
    except ToolchainError as exc:
        ident, problem = None, str(exc)
    gpus: list[str] = []
    if with_gpus:
        from ..evaluate.devices import detect_gpus

        gpus = [f"{g.name} ({g.arch})" for g in detect_gpus()]
    return ProcessFacts(
        version=__version__,
        code=package_digest(),
        toolchain=ident,
        toolchain_problem=problem,
        host=socket.gethostname(),
        python=platform.python_version(),
        gpus=gpus,
    )


def mismatch(here: ProcessFacts, worker: ProcessFacts, name: str) -> str | None:
    """Why worker ``name`` may not judge for this process (another r1build, another nvcc, or none), or None."""
    if (worker.version, worker.code) != (here.version, here.code):
        return (
            f"worker {name} on {worker.host} runs r1build {worker.version} (code {worker.code}), this machine "
            f"r1build {here.version} (code {here.code}): install the same r1build on every host"
        )
    if worker.toolchain is None:
        return f"worker {name} on {worker.host} has no usable nvcc ({worker.toolchain_problem})"
    if worker.toolchain != here.toolchain:
        return (
            f"worker {name} on {worker.host} compiles with nvcc {worker.toolchain}, this machine with "
            f"{here.toolchain}: every host needs the same CUDA toolkit, so that gate verdicts and measurements "
            "mean the same"
        )
    return None
