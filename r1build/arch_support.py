"""Whether the installed nvcc compiles for a manifest's archs, asked of nvcc itself.

r1build keeps no list of valid archs: what ``nvcc --list-gpu-code`` / ``--list-gpu-arch`` (and, for ``a``
archs, ``nvcc --help``) name is what a manifest may target, so an arch a newer CUDA adds works as soon as that
nvcc is installed, and one an older CUDA still has (``sm_70`` on CUDA 12) works with it. An arch the nvcc in
use lacks is a :class:`~r1build.errors.ManifestError` at the line that names it, listing what that nvcc offers.
"""

from __future__ import annotations

from collections.abc import Sequence

from .errors import ManifestError, UsageError
from .manifest import Manifest
from .manifest.load import located_error
from .toolchain import Toolchain, gpu_archs

__all__ = ["require_supported_archs"]


def require_supported_archs(manifest: Manifest, tc: Toolchain, only: Sequence[str] | None = None) -> None:
    """:class:`~r1build.errors.ManifestError` naming the first target arch of ``manifest`` (or of ``only``, a
    subset asked on the command line) that ``tc`` cannot compile with the code asked for it;
    :class:`~r1build.errors.UsageError` for an arch of ``only`` that no kernel targets and ``tc`` lacks."""
    known = gpu_archs(tc)
    offered = f"nvcc {tc.release} ({tc.nvcc}) compiles for {known.describe()}"
    targeted = {arch for spec in manifest.kernels for arch in manifest.archs_of(spec)}
    for arch in only or ():
        if arch not in targeted and not known.supports(arch, sass=True, ptx=False):
            raise UsageError(f"--arch {arch} is not supported by the installed CUDA: {offered}")
    for spec in manifest.kernels:
        for arch in manifest.archs_of(spec):
            if only is not None and arch not in only:
                continue
            target = manifest.target(spec, arch)
            # the gate compiles machine code of every target, so that is needed even for PTX alone
            if known.supports(arch, sass=True, ptx=target.ptx):
                continue
            what = f"{arch} (PTX)" if target.ptx and known.supports(arch, sass=True, ptx=False) else arch
            message = f"{what} is not supported by the installed CUDA: {offered}"
            if target.key:
                raise located_error(manifest, target.key, message)
            raise ManifestError(message, file=str(manifest.path))
