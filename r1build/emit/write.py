"""Writing the generated files: only what changed, atomically, and nothing stale left behind.

The same winners give byte-identical files (stable order, no timestamps, no absolute paths), and a file whose
content is unchanged is not touched, so its modification time stays and a warm build rebuilds nothing. Files
this run no longer produces are removed from the output directory, but only files r1build wrote: the known
names, or ``.cu`` / ``.h`` / ``.cmake`` files whose first line carries the generated-file marker.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import R1BuildError
from ..filemode import write_atomically
from ..manifest.model import Manifest
from .cmake import CMAKE_NAME, render_cmake
from .header import HEADER_NAME, render_header
from .plan import MARKER, Winner, plan
from .sources import DISPATCH_NAME, render_dispatcher, render_variant

__all__ = ["Emitted", "render_files", "write_generated"]

_KNOWN = frozenset({CMAKE_NAME, HEADER_NAME, DISPATCH_NAME})
_SUFFIXES = frozenset({".cu", ".h", ".cmake"})


@dataclass(frozen=True, kw_only=True)
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
    return files


def _is_generated(path: Path) -> bool:
    if path.name in _KNOWN:
        return True
    if path.suffix not in _SUFFIXES or not path.is_file():
        return False
    try:
        with path.open("rb") as fh:
            first = fh.readline(400)
    except OSError:
        return False
    return MARKER.encode() in first


def _write_if_changed(path: Path, data: bytes) -> bool:
    try:
        if path.read_bytes() == data:
            return False
    except FileNotFoundError:
        pass
    write_atomically(path, data)
    return True


def write_generated(out_dir: Path, manifest: Manifest, winners: Sequence[Winner]) -> Emitted:
    """Write the kernels' sources, header and CMake file into ``out_dir`` (created if missing).

    :class:`ValueError` for inconsistent winners (two for one kernel and arch); :class:`~r1build.errors.R1BuildError`
    when the directory cannot be written.
    """
    files = render_files(manifest, winners, out_dir)
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
