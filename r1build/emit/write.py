"""Writing the generated files: only what changed, atomically, and nothing stale left behind.

The same winners give byte-identical files (stable order, no timestamps, no absolute paths), and a file whose
content is unchanged is not touched, so its modification time stays and a warm build rebuilds nothing. Files
this run no longer produces are removed from the output directory, but only files r1build wrote: the known
names, or ``.cu`` / ``.h`` / ``.cmake`` / ``.cpp`` / ``.py`` / ``.pyi`` files whose first line carries the
generated-file marker. Into a folder
the user names (``resolve --out``), a file is replaced only when it carries the marker, unless ``--force``.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

from ..convert import record
from ..errors import R1BuildError, UsageError, UserError
from ..filemode import write_atomically
from ..manifest.model import Manifest
from .bound import bound_kernels, ext_name
from .cmake import CMAKE_NAME, render_cmake
from .header import HEADER_NAME, render_header
from .nbmodule import BINDINGS_CPP, render_nb_module
from .plan import MARKER, Winner, plan
from .pymodule import BINDINGS_PY, BINDINGS_PYI, render_py_module, render_stubs
from .sources import DISPATCH_NAME, render_dispatcher, render_variant

__all__ = ["Emitted", "render_files", "write_generated"]

_KNOWN = frozenset({CMAKE_NAME, HEADER_NAME, DISPATCH_NAME, BINDINGS_CPP, BINDINGS_PY, BINDINGS_PYI})
_SUFFIXES = frozenset({".cu", ".h", ".cmake", ".cpp", ".py", ".pyi"})


@record(frozen=True, kw_only=True)
class Emitted:
    """The generated files of one emission."""

    out_dir: Path
    """Where they are."""
    cmake_file: Path
    """``r1build_kernels.cmake``, for ``include()``."""
    header: Path
    """``r1build_kernels.h``."""
    sources: tuple[Path, ...]
    """The translation units: one per variant, then the dispatcher if any."""
    changed: bool
    """Whether any file was written or removed (False: the directory already held exactly this)."""
    updated: tuple[Path, ...] = ()
    """Files written because their content changed (or they were missing)."""
    removed: tuple[Path, ...] = ()
    """Stale generated files removed."""


def render_files(manifest: Manifest, winners: Sequence[Winner], out_dir: Path | None = None) -> dict[str, str]:
    """Every generated file's name and text, sources first in emission order, for the folder ``out_dir``;
    writes nothing."""
    plans = plan(manifest, winners)
    files = {variant.file_name: render_variant(variant) for p in plans for variant in p.variants}
    if any(p.dispatched for p in plans):
        files[DISPATCH_NAME] = render_dispatcher(plans)
    files[HEADER_NAME] = render_header(plans)
    files[CMAKE_NAME] = render_cmake(manifest, plans, out_dir)
    bindings = manifest.settings.bindings
    if bindings.python is not None:
        kernels, ext = bound_kernels(bindings, plans), ext_name(bindings)
        files[BINDINGS_CPP] = render_nb_module(bindings.python, ext, kernels)
        files[BINDINGS_PY] = render_py_module(bindings.python, ext, kernels, bindings.torch_namespace)
        files[BINDINGS_PYI] = render_stubs(bindings.python, kernels)
    return files


def _is_generated(path: Path) -> bool:
    if path.name in _KNOWN:
        return True
    return path.suffix in _SUFFIXES and _marked(path)


def _marked(path: Path) -> bool:
    """Whether ``path`` is a file whose first line carries the generated-file marker."""
    if not path.is_file():
        return False
    try:
        with path.open("rb") as fh:
            first = fh.readline(400)
    except OSError:
        return False
    return MARKER.encode() in first


def _write_if_changed(path: Path, data: bytes) -> bool:
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and stat.S_ISDIR(mode):
        raise UserError(f"{path} is a folder where r1build writes a generated file: remove it and build again")
    # only a plain file is read: a FIFO left in its place would hold the build waiting for a writer for ever;
    # anything else there (a link, a FIFO) is replaced by the written file
    if mode is not None and stat.S_ISREG(mode) and path.read_bytes() == data:
        return False
    write_atomically(path, data)
    return True


def write_generated(
    out_dir: Path, manifest: Manifest, winners: Sequence[Winner], *, replace_foreign: bool = True
) -> Emitted:
    """Write the kernels' sources, header and CMake file into ``out_dir`` (created if missing).

    :class:`ValueError` for inconsistent winners (two for one kernel and arch); :class:`~r1build.errors.R1BuildError`
    when the directory cannot be written. Without ``replace_foreign`` (a folder the user names), a
    :class:`~r1build.errors.UsageError` before anything is written when a file to write is there and does not
    carry the generated-file marker on its first line.
    """
    files = render_files(manifest, winners, out_dir)
    if not replace_foreign:
        for name in files:
            path = out_dir / name
            if os.path.lexists(path) and (path.is_symlink() or not _marked(path)):
                raise UsageError(
                    f"--out {out_dir}: {path} exists and was not generated by r1build; use --force to replace it, "
                    "or name another folder"
                )
    updated: list[Path] = []
    removed: list[Path] = []
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            path = out_dir / name
            if _write_if_changed(path, text.encode("utf-8")):
                updated.append(path)
        for path in sorted(out_dir.iterdir()):
            if path.name not in files and _is_generated(path):
                path.unlink()
                removed.append(path)
    except OSError as exc:
        raise R1BuildError(f"cannot write the generated kernels to {out_dir}: {exc}") from None
    return Emitted(
        out_dir=out_dir,
        cmake_file=out_dir / CMAKE_NAME,
        header=out_dir / HEADER_NAME,
        sources=tuple(out_dir / name for name in files if name.endswith(".cu")),
        changed=bool(updated or removed),
        updated=tuple(updated),
        removed=tuple(removed),
    )
