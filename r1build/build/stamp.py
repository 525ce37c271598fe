"""The warm-build stamp: proof that a locked build's generated kernels are still what resolving would write.

A ``--locked`` build takes every kernel × arch from the lock, so its output is a function of files on disk: the
manifest, the lock (which names every winner by digest), the references, the hand-written sources, the
vendored winners, and the toolchain that gated them. After a locked ``prepare_build`` succeeds, the backend
records in ``.r1build/build-stamp.json``: the digests of all of those and of the generated files; the nvcc (the
places it was looked for, in order, the one found, and that binary's identity: path, real file, size, times and
inode, as the remembered ``nvcc --version`` is keyed in :mod:`r1build.toolchain.nvcc`); the build's context
(r1build's own code by its files' sizes and times, the Python, the project folder, the ``R1BUILD_*``, ``PATH``
and CUDA variables); and the options, both as the ``r1build.*`` config settings were given and as parsed.

The next locked build of the project checks all of it (a few small files hashed, a folder walked, a few
``stat`` calls: about a millisecond) and, when every one matches, uses the generated CMake file as it is instead
of opening the cache and resolving again: a warm rebuild then costs what a plain scikit-build-core rebuild
costs. The backend's ``build_wheel`` asks first with the config settings as given (:func:`read_warm_stamp`: the
same settings in the same context parse to the same options, which were locked when the stamp was written), so
a warm build imports nothing of r1build but this module; everything else asks with the parsed options
(:func:`read_valid_stamp`).

Unlocked builds neither write nor read a stamp: without ``--locked`` the cache can change a kernel's winner (an
imported bundle, a decision made by ``r1build resolve``) without any file here changing. Anything unreadable,
missing or different means "resolve again"; a stamp only ever skips work whose result is proven unchanged.
This module imports the standard library and r1build's light :mod:`~r1build.digests` and
:mod:`~r1build.toolchain.lookup` only.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from .. import __version__
from ..digests import code_fingerprint, path_digest, read_plain
from ..toolchain.lookup import first_nvcc, nvcc_identity

if TYPE_CHECKING:
    from typing import TypedDict

    from ..records import ResolveOptions

__all__ = [
    "STAMP_NAME",
    "Stamp",
    "build_context",
    "forget_stamp",
    "path_digest",
    "read_valid_stamp",
    "read_warm_stamp",
    "write_stamp",
]

STAMP_NAME = "build-stamp.json"
"""The stamp's file name inside the project's ``.r1build/`` folder."""

_FORMAT = 2
_ENV_KEYS = ("PATH", "CUDACXX", "CUDA_HOME", "CUDA_PATH")
_ALWAYS = ("kernels.toml", "pyproject.toml")  # where a manifest may be found: a new one changes the answer

Given: TypeAlias = "Mapping[str, str | list[str]]"
"""r1build's config settings (``r1build.*``) as a frontend passed them."""


if TYPE_CHECKING:

    class Stamp(TypedDict):
        """What one successful locked resolution depended on and produced (the stamp file's JSON object)."""

        format: int
        """Stamp format version."""
        context: str
        """Digest of r1build's code (file sizes and times), the Python, the project folder and the environment's
        ``R1BUILD_*``, ``PATH`` and CUDA variables."""
        given: dict[str, str | list[str]] | None
        """The ``r1build.*`` config settings the build was given (None: not known, e.g. an editable install's
        refresh, which has its recorded options only)."""
        options: str
        """The options they parsed to (their repr)."""
        nvcc: str
        """The nvcc that gated the winners (CMake's CUDA compiler too)."""
        nvcc_places: list[list[str]]
        """Where it was looked for, in order (:func:`r1build.toolchain.lookup.nvcc_places`)."""
        nvcc_identity: str
        """Its identity (:func:`r1build.toolchain.lookup.nvcc_identity`): another binary behind the path is another
        nvcc."""
        toolchain: str
        """sha256 of its ``--version`` output."""
        inputs: dict[str, str | None]
        """Project-relative path of every file or folder resolution read → its digest (None: absent)."""
        outputs: str
        """Digest of the generated folder (every file's name and bytes)."""
        cmake_file: str
        """Project-relative path of the generated CMake file."""

else:  # at run time the same JSON object, a plain dict: no TypedDict class built at every warm build's import
    Stamp = dict

_FIELDS = frozenset(
    "format context given options nvcc nvcc_places nvcc_identity toolchain inputs outputs cmake_file".split()
)
"""The keys of :class:`Stamp` (a stamp with other keys is not read)."""


def build_context(project: Path) -> str:
    """Digest of everything besides project files and options that a locked resolution's outcome could depend on."""
    parts = [f"r1build {__version__}", sys.executable, sys.version, str(project)]
    parts += [f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("R1BUILD_") or k in _ENV_KEYS]
    parts += code_fingerprint()
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _given(given: Given | None) -> dict[str, str | list[str]] | None:
    """``given`` as JSON keeps it (lists as lists)."""
    if given is None:
        return None
    return {k: v if isinstance(v, str) else list(v) for k, v in sorted(given.items())}


def _stamp_file(project: Path) -> Path:
    return project / ".r1build" / STAMP_NAME


def _relative(project: Path, path: Path) -> str | None:
    try:
        return path.resolve().relative_to(project.resolve()).as_posix()
    except ValueError:
        return None


def _load(project: Path) -> Stamp | None:
    try:
        data = json.loads(read_plain(_stamp_file(project)).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.keys() != _FIELDS or data["format"] != _FORMAT:
        return None
    stamp: Stamp = data  # type: ignore[assignment]  # its keys checked just now, its values where they are used
    return stamp


def _holds(project: Path, stamp: Stamp) -> Path | None:
    """The generated CMake file when the context, the nvcc, the inputs and the generated files are as recorded."""
    try:
        if stamp["context"] != build_context(project):
            return None
        nvcc = first_nvcc(stamp["nvcc_places"])
        if nvcc is None or nvcc != stamp["nvcc"] or nvcc_identity(nvcc) != stamp["nvcc_identity"]:
            return None
        inputs = dict(stamp["inputs"])
        for name in _ALWAYS:
            inputs.setdefault(name, None)
        if any(path_digest(project / rel) != digest for rel, digest in inputs.items()):
            return None
        cmake_file = project / stamp["cmake_file"]
        if not cmake_file.is_file() or path_digest(cmake_file.parent) != stamp["outputs"]:
            return None
    except (OSError, TypeError, ValueError, AttributeError):  # unreadable, or a stamp of the wrong shape
        return None
    return cmake_file


def read_valid_stamp(project: Path, options: ResolveOptions) -> Path | None:
    """The generated CMake file when a stamp proves the last locked resolution still holds for a build with
    ``options``; else None."""
    if not options.locked:
        return None
    stamp = _load(project)
    if stamp is None or stamp["options"] != repr(options):
        return None
    return _holds(project, stamp)


def read_warm_stamp(project: Path, given: Given) -> tuple[Path, str] | None:
    """The generated CMake file and the nvcc when a stamp proves the last locked resolution still holds for a
    build given the ``r1build.*`` config settings ``given`` (options not parsed: the stamp's were the same
    settings in the same context, and locked); else None."""
    stamp = _load(project)
    if stamp is None or stamp["given"] is None or stamp["given"] != _given(given):
        return None
    cmake_file = _holds(project, stamp)
    return None if cmake_file is None else (cmake_file, stamp["nvcc"])


def write_stamp(
    project: Path,
    options: ResolveOptions,
    given: Given | None,
    inputs: Iterable[Path],
    cmake_file: Path,
    nvcc: tuple[str, Sequence[Sequence[str]]],
) -> bool:
    """Record a successful locked resolution that gated with ``nvcc`` (the path and the places it was found
    from); False (and no stamp) when unlocked or something cannot be recorded."""
    from ..toolchain.nvcc import version_digest

    target = _stamp_file(project)
    path, places = nvcc
    rel_cmake = _relative(project, cmake_file)
    identity = nvcc_identity(path)
    toolchain = version_digest(path)
    recorded: dict[str, str | None] = {name: path_digest(project / name) for name in _ALWAYS}
    for input_path in inputs:
        rel = _relative(project, input_path)
        if rel is None:  # outside the project: cannot be watched from here
            target.unlink(missing_ok=True)
            return False
        recorded[rel] = path_digest(input_path)
    outputs = path_digest(cmake_file.parent)
    if (
        not options.locked
        or rel_cmake is None
        or toolchain is None
        or outputs is None
        or identity is None
        or identity != nvcc_identity(path)  # replaced while it was asked
        or first_nvcc(places) != path
    ):
        target.unlink(missing_ok=True)
        return False
    stamp = Stamp(
        format=_FORMAT,
        context=build_context(project),
        given=_given(given),
        options=repr(options),
        nvcc=path,
        nvcc_places=[list(place) for place in places],
        nvcc_identity=identity,
        toolchain=toolchain,
        inputs=dict(sorted(recorded.items())),
        outputs=outputs,
        cmake_file=rel_cmake,
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    from ..filemode import write_atomically  # here: a warm build reads stamps, and imports only what it needs

    write_atomically(target, json.dumps(stamp, indent=1, sort_keys=True) + "\n")
    return True


def forget_stamp(project: Path) -> None:
    """Remove the project's stamp (before resolving: a failed or unstamped resolution leaves none behind);
    :class:`~r1build.errors.UserError` where a folder is in its place."""
    path = _stamp_file(project)
    try:
        path.unlink(missing_ok=True)
    except IsADirectoryError:
        from ..errors import UserError

        raise UserError(f"{path} is a folder where r1build keeps its build stamp: remove it and build again") from None
