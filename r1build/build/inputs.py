"""The files a resolution reads: what an sdist must carry and what a warm-build stamp watches."""

from __future__ import annotations

from pathlib import Path

from ..manifest import Manifest
from ..manifest.reference import ReferenceProblem, reference_file

__all__ = ["manifest_inputs"]


def manifest_inputs(manifest: Manifest) -> list[Path]:
    """Every existing file or folder the resolver reads, absolute: manifest, lock, references, sources, vendor."""
    root = manifest.root
    found: list[Path] = [manifest.path, root / manifest.settings.lock_file, root / manifest.settings.vendor_dir]
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
            unique.setdefault(path.resolve(), None)
    return list(unique)
