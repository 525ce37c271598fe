"""Whether the installed nvcc compiles for a manifest's archs, asked of nvcc itself.

r1build keeps no list of valid archs: what ``nvcc --list-gpu-code`` / ``--list-gpu-arch`` (and, for ``a``
archs, ``nvcc --help``) name is what a manifest may target, so an arch a newer CUDA adds works as soon as that
nvcc is installed, and one an older CUDA still has (``sm_70`` on CUDA 12) works with it. An arch the nvcc in
use lacks is a :class:`~r1build.errors.ManifestError` at the line that names it, listing what that nvcc offers.
The answer is kept in the cache under the nvcc's identity (its path and ``--version`` text), so a warm
``resolve`` does not ask nvcc again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..convert import asdict
from ..errors import ManifestError, UsageError
from ..keys import digest_json
from ..manifest import Manifest
from ..manifest.load import located_error
from .nvcc import GpuArchs, Toolchain, gpu_archs, gpu_archs_from_json

if TYPE_CHECKING:
    from ..cache import Cache

__all__ = ["ARCHS_NAMESPACE", "known_archs", "require_supported_archs"]

ARCHS_NAMESPACE = "nvcc-archs"
"""The cache's JSON documents of what each nvcc (by identity) compiles for."""


def known_archs(tc: Toolchain, cache: Cache | None = None) -> GpuArchs:
    """What ``tc`` compiles for: from ``cache`` where it holds this nvcc's answer, else asked (and stored)."""
    key = digest_json({"nvcc": tc.nvcc, "version": tc.version_text})
    if cache is not None:
        stored = gpu_archs_from_json(cache.get_json(ARCHS_NAMESPACE, key))
        if stored is not None:
            return stored
    known = gpu_archs(tc)
    if cache is not None:
        cache.put_json(ARCHS_NAMESPACE, key, asdict(known))
    return known


def require_supported_archs(
    manifest: Manifest, tc: Toolchain, only: Sequence[str] | None = None, cache: Cache | None = None
) -> None:
    """:class:`~r1build.errors.ManifestError` naming the first target arch of ``manifest`` (or of ``only``, a
    subset asked on the command line) that ``tc`` cannot compile with the code asked for it;
    :class:`~r1build.errors.UsageError` for an arch of ``only`` that no kernel targets and ``tc`` lacks."""
    known = known_archs(tc, cache)
    offered = f"nvcc {tc.release} ({tc.nvcc}) compiles for {known.describe()}"
    targeted = {arch for spec in manifest.kernels for arch in manifest.archs_of(spec)}
    for arch in only or ():
        if arch not in targeted and not known.supports(arch, sass=True, ptx=False):
            raise UsageError(f"--arch {arch} is not supported by the installed CUDA: {offered}")
    for j, arch in enumerate(manifest.settings.archs):  # the defaults, even where every kernel names its own
        if only is None and arch not in targeted and not known.supports(arch, sass=True, ptx=False):
            raise located_error(manifest, ("archs", j), f"{arch} is not supported by the installed CUDA: {offered}")
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
