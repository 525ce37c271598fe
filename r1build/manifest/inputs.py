"""The files a resolution reads: what an sdist must carry and what a warm-build stamp watches."""

from __future__ import annotations

import os
from pathlib import Path

from .flags import include_flag
from .model import Manifest
from .reference import ReferenceProblem, reference_file

__all__ = ["manifest_inputs"]


def manifest_inputs(manifest: Manifest, *, resolve: bool = True) -> list[Path]:
    """Every existing file or folder the resolver reads, absolute: manifest, lock, references, sources, vendor,
    and the folders of relative include paths in ``nvcc-flags`` (``-Iinclude``: the headers the sources include;
    not the manifest's folder itself or one above it). ``resolve=False``: each as the manifest names it (absolute,
    symbolic links not followed), as an sdist packs it: a link inside the project to a file elsewhere is packed
    as that file's bytes."""
    root = manifest.root
    found: list[Path] = [manifest.path, root / manifest.settings.lock_file, root / manifest.settings.vendor_dir]
    real_root = root.resolve()
    for flag in manifest.settings.nvcc_flags:
        for folder in (include_flag(flag) or ("", []))[1]:
            path = (root / folder).resolve()
            if not Path(folder).is_absolute() and path != real_root and path not in real_root.parents:
                found.append(root / folder)
    for spec in manifest.kernels:
        found.extend(root / rel for rel in [spec.baseline, *spec.candidates] if rel is not None)
        try:
            ref = reference_file(root, spec.reference)
        except ReferenceProblem:
            continue
        found.append(ref)
        # a dotted module lives in packages: their __init__.py files are needed to import it
        module = spec.reference.partition(":")[0]
        for depth in range(1, module.count(".") + 1):
            init = root.joinpath(*module.split(".")[:depth], "__init__.py")
            found.append(init)
    unique: dict[Path, None] = {}
    for path in found:
        if path.exists():
            unique.setdefault(path.resolve() if resolve else Path(os.path.abspath(path)), None)  # noqa: PTH100
    return list(unique)
