"""Keys: the decision key of a kernel on an arch.

The decision key says *which question* a cached decision answers: the normalized spec (with the digest of the
reference's source, the baseline and hand-written candidates' sources), the arch, and the generation settings
that shape the search. The toolchain and the GPU are recorded with each result, not keyed on: a lock made with
one CUDA release still builds with another (see :mod:`r1build.lock`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .digests import canonical_json, digest_bytes, digest_json

if TYPE_CHECKING:
    from .manifest.model import Generation, KernelSpec, Manifest

__all__ = [
    "KEY_SCHEMA",
    "canonical_json",
    "decision_key",
    "digest_bytes",
    "digest_json",
    "normalized_spec",
    "variant_digest",
]

KEY_SCHEMA = 1
"""Bumped whenever what goes into a key changes meaning; old records then simply stop matching."""


def _file_digest(root: Path, rel: str | None) -> str | None:
    return None if rel is None else digest_bytes((root / rel).read_bytes())


def normalized_spec(manifest: Manifest, spec: KernelSpec) -> dict[str, Any]:
    """The spec as plain data, paths replaced by the digests of the files they name."""
    data = dataclasses.asdict(spec)
    data.pop("archs")
    data.pop("budget")  # part of the generation settings below
    # judge the winner against the library and torch, never pick it
    for verdict_only in ("gpu_reference", "torch_reference", "must_beat", "margin"):
        data.pop(verdict_only)
    data.pop("timing_regime")
    regime = manifest.timing_regime_of(spec)
    if regime != "back-to-back":  # it picks the winner; the default leaves every earlier key as it was
        data["timing_regime"] = regime
    data["reference"] = {"name": spec.reference, "source": manifest.reference_digests.get(spec.name)}
    data["baseline"] = _file_digest(manifest.root, spec.baseline)
    data["candidates"] = [_file_digest(manifest.root, c) for c in spec.candidates]
    return data


def generation_settings(generation: Generation, spec: KernelSpec) -> dict[str, Any]:
    """What of the generation settings shapes the search's outcome (not endpoints, keys or prices)."""
    return {
        "provider": generation.provider,
        "model": generation.model,
        "temperatures": list(generation.temperatures),
        "top_p": generation.top_p,
        "max_tokens": generation.max_tokens,
        "directions": list(generation.directions),
        "budget": dataclasses.asdict(spec.budget),
    }


def decision_key(manifest: Manifest, spec: KernelSpec, arch: str) -> str:
    """sha256 of (key schema, normalized spec, arch, generation settings, nvcc flags)."""
    return digest_json(
        {
            "schema": KEY_SCHEMA,
            "spec": normalized_spec(manifest, spec),
            "arch": arch,
            "generation": generation_settings(manifest.settings.generation, spec),
            "nvcc_flags": list(manifest.settings.nvcc_flags),
        }
    )


def variant_digest(source_digest: str, defines: dict[str, int | str]) -> str:
    """Identity of one variant: a source and one value set of its tunable parameters."""
    if not defines:
        return source_digest
    return digest_json({"source": source_digest, "defines": {k: defines[k] for k in sorted(defines)}})
