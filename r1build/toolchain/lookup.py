"""Where nvcc is looked for, and which binary a path is: the standard library only, so that the warm-build stamp
(:mod:`r1build.build.stamp`) can check both before anything else of r1build is imported. The places come from
:func:`r1build.toolchain.nvcc.find_nvcc`, which reads the environment; a stamp keeps them and looks again."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Sequence

__all__ = ["NvccPlace", "first_nvcc", "nvcc_identity", "nvcc_places"]

NvccPlace = tuple[str, str]
"""``(test, path)``: ``given`` (a path named by the user, taken as it is), ``file`` (taken when it is a file) or
``program`` (a name looked up on ``PATH``)."""

_FALLBACK = "/usr/local/cuda/bin/nvcc"


def nvcc_places(given: str | None, homes: Iterable[str | None]) -> list[NvccPlace]:
    """The places to look for nvcc, in order: ``given`` alone when there is one, else ``bin/nvcc`` of each CUDA
    folder in ``homes``, ``nvcc`` on ``PATH``, and the usual install folder."""
    if given:
        return [("given", given)]
    places = [("file", os.path.join(home, "bin", "nvcc")) for home in homes if home]  # noqa: PTH118
    return [*places, ("program", "nvcc"), ("file", _FALLBACK)]


def first_nvcc(places: Sequence[Sequence[str]]) -> str | None:
    """The nvcc of the first place that holds one; None when none does (or a place is not understood)."""
    for test, path in places:
        if test == "given":
            return path
        if test == "file" and os.path.isfile(path):  # noqa: PTH113
            return path
        if test == "program":
            found = shutil.which(path)
            if found:
                return found
        elif test not in ("file", "program"):
            return None
    return None


def nvcc_identity(nvcc: str) -> str | None:
    """The identity of the nvcc at ``nvcc``: the path, the file it resolves to, its size, modification and change
    times and inode; None when it cannot be read."""
    try:
        real = os.path.realpath(nvcc if os.sep in nvcc else (shutil.which(nvcc) or nvcc), strict=True)
        st = os.stat(real)  # noqa: PTH116
    except OSError:
        return None
    return f"{nvcc}\0{real}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0{st.st_ino}"
