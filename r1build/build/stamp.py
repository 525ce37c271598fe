"""The warm-build stamp: proof that a locked build's generated kernels are still what resolving would write.

A ``--locked`` build takes every kernel × arch from the lock, so its output is a function of files on disk: the
manifest, the lock (which names every winner by digest), the references, the hand-written sources, the
vendored winners, and the toolchain that gated them. After a locked ``prepare_build`` succeeds, the backend
records the digests of all of those, of the generated files, of ``nvcc --version`` (remembered by the binary's
identity, see :mod:`r1build.toolchain`) and of the build's context (r1build's own code, options, environment) in
``.r1build/build-stamp.json``. The next locked build of the project checks them (hashing a few small files: a
few milliseconds) and, when every
one matches, uses the generated CMake file as it is instead of opening the cache and resolving again: a warm
rebuild then costs what a plain scikit-build-core rebuild costs.

Unlocked builds neither write nor read a stamp: without ``--locked`` the cache can change a kernel's winner (an
imported bundle, a decision made by ``r1build resolve``) without any file here changing. Anything unreadable,
missing or different means "resolve again"; a stamp only ever skips work whose result is proven unchanged.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from .. import __version__
from ..fingerprint import code_fingerprint, path_digest
from .options import BuildOptions

__all__ = ["STAMP_NAME", "Stamp", "build_context", "path_digest", "read_valid_stamp", "write_stamp"]

STAMP_NAME = "build-stamp.json"
"""The stamp's file name inside the project's ``.r1build/`` folder."""

_FORMAT = 1
_ENV_KEYS = ("PATH", "CUDACXX", "CUDA_HOME", "CUDA_PATH")
_ALWAYS = ("kernels.toml", "pyproject.toml")  # where a manifest may be found: a new one changes the answer


@dataclass(frozen=True, kw_only=True)
class Stamp:
    """What one successful locked resolution depended on and produced."""

    format: int
    """Stamp format version."""
    context: str
    """Digest of r1build's code (file sizes and times), the options, the relevant environment and Python."""
    nvcc: str
    """The nvcc that gated the winners."""
    toolchain: str
    """sha256 of its ``--version`` output."""
    inputs: dict[str, str | None]
    """Project-relative path of every file or folder resolution read → its digest (None: absent)."""
    outputs: str
    """Digest of the generated folder (every file's name and bytes)."""
    cmake_file: str
    """Project-relative path of the generated CMake file."""


def build_context(options: BuildOptions) -> str:
    """Digest of everything besides project files that a locked resolution's outcome could depend on."""
    parts = [f"r1build {__version__}", sys.executable, sys.version, repr(options)]
    parts += [f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("R1BUILD_") or k in _ENV_KEYS]
    parts += code_fingerprint()
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _toolchain_digest(nvcc: str) -> str | None:
    from ..toolchain import version_digest

    return version_digest(nvcc)


def _stamp_file(project: Path) -> Path:
    return project / ".r1build" / STAMP_NAME


def _relative(project: Path, path: Path) -> str | None:
    try:
        return path.resolve().relative_to(project.resolve()).as_posix()
    except ValueError:
        return None


def read_valid_stamp(project: Path, options: BuildOptions) -> Path | None:
    """The generated CMake file when a stamp proves the last locked resolution still holds; else None."""
    if not options.locked:
        return None
    try:
        data = json.loads(_stamp_file(project).read_text(encoding="utf-8"))
        stamp = Stamp(**data)
    except (OSError, ValueError, TypeError):
        return None
    if stamp.format != _FORMAT:
        return None
    if stamp.context != build_context(options):
        return None
    inputs = dict(stamp.inputs)
    for name in _ALWAYS:
        inputs.setdefault(name, None)
    cmake_file = project / stamp.cmake_file
    unchanged = (
        all(path_digest(project / rel) == digest for rel, digest in inputs.items())
        and cmake_file.is_file()
        and path_digest(cmake_file.parent) == stamp.outputs
    )
    return cmake_file if unchanged and _toolchain_digest(stamp.nvcc) == stamp.toolchain else None


def write_stamp(project: Path, options: BuildOptions, inputs: Iterable[Path], cmake_file: Path, nvcc: str) -> bool:
    """Record a successful locked resolution; False (and no stamp) when unlocked or something cannot be
    recorded."""
    target = _stamp_file(project)
    rel_cmake = _relative(project, cmake_file)
    toolchain = _toolchain_digest(nvcc)
    recorded: dict[str, str | None] = {name: path_digest(project / name) for name in _ALWAYS}
    for path in inputs:
        rel = _relative(project, path)
        if rel is None:  # outside the project: cannot be watched from here
            target.unlink(missing_ok=True)
            return False
        recorded[rel] = path_digest(path)
    outputs = path_digest(cmake_file.parent)
    if not options.locked or rel_cmake is None or toolchain is None or outputs is None:
        target.unlink(missing_ok=True)
        return False
    stamp = Stamp(
        format=_FORMAT,
        context=build_context(options),
        nvcc=nvcc,
        toolchain=toolchain,
        inputs=dict(sorted(recorded.items())),
        outputs=outputs,
        cmake_file=rel_cmake,
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(asdict(stamp), indent=1, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return True


def forget_stamp(project: Path) -> None:
    """Remove the project's stamp (before resolving: a failed or unstamped resolution leaves none behind)."""
    _stamp_file(project).unlink(missing_ok=True)
