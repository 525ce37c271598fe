"""A build folder kept across nvccs: CMake configures afresh when the project's nvcc changed.

When ``CMAKE_CUDA_COMPILER`` differs from the one in a build folder's cache, CMake deletes that cache and configures
again without the ``-D`` definitions it was given, ``R1BUILD_KERNELS_CMAKE`` among them: the build fails
(``include called with wrong number of arguments``) and only the next one works. That is the lot of a
``-Cbuild-dir`` reused after switching CUDA (``R1BUILD_NVCC``, ``CUDA_HOME``, a cu12/cu13 recipe whose
``build/{wheel_tag}`` is one folder for both). r1build keeps the nvcc of each build of a project
(:data:`RECORD_NAME` in its ``.r1build`` folder); a build with another one asks scikit-build-core for a fresh
configure (``cmake.fresh``, scikit-build-core 1.1 and later) and says so. The build folder itself is
scikit-build-core's to place (its ``build-dir`` template), so the record is the project's, not the folder's: a
project built into one folder per CUDA release configures afresh once per switch, which costs a configure.
"""

from __future__ import annotations

import contextlib
import json
import re
from importlib import metadata
from pathlib import Path

from ..events import Note, emit
from ..filemode import write_atomically

__all__ = ["FRESH_SETTING", "RECORD_NAME", "fresh_if_nvcc_changed"]

RECORD_NAME = "last-nvcc.json"
"""The nvcc of the project's last build, in its ``.r1build`` folder."""
FRESH_SETTING = "cmake.fresh"
"""scikit-build-core's config setting for a configure from scratch."""


def _fresh_supported() -> bool:
    """Whether the installed scikit-build-core takes ``cmake.fresh`` (1.1 and later)."""
    try:
        found = re.match(r"(\d+)\.(\d+)", metadata.version("scikit-build-core"))
    except metadata.PackageNotFoundError:
        return False
    return found is not None and (int(found.group(1)), int(found.group(2))) >= (1, 1)


def fresh_if_nvcc_changed(project: Path, compiler: str, settings: dict[str, str | list[str]]) -> None:
    """Add ``cmake.fresh`` to ``settings`` (scikit-build-core's config settings) when the last build of
    ``project`` gave CMake another nvcc than ``compiler``, unless they set it already; then remember
    ``compiler``. Nothing is remembered where the project's folder cannot be written."""
    folder = project / ".r1build"
    record = folder / RECORD_NAME
    try:
        last = json.loads(record.read_text(encoding="utf-8")).get("nvcc")
    except (OSError, ValueError, AttributeError, RecursionError):
        last = None
    if isinstance(last, str) and last != compiler and FRESH_SETTING not in settings:
        if _fresh_supported():
            settings[FRESH_SETTING] = "true"
            emit(
                Note(
                    "info",
                    f"the nvcc changed since this project's last build ({last} -> {compiler}): CMake configures a "
                    f"kept build folder afresh ({FRESH_SETTING})",
                )
            )
        else:
            emit(
                Note(
                    "warning",
                    f"the nvcc changed since this project's last build ({last} -> {compiler}): a build folder kept "
                    "from it fails to configure once; remove it, or use scikit-build-core 1.1 or later (r1build "
                    f"then asks for {FRESH_SETTING})",
                )
            )
    if last != compiler:
        with contextlib.suppress(OSError):
            folder.mkdir(exist_ok=True)
            write_atomically(record, json.dumps({"nvcc": compiler}) + "\n")
