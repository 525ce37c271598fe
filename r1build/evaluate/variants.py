"""The candidates a manifest itself provides: the baseline, hand-written files, and every tunable value set."""

from __future__ import annotations

import itertools

from ..manifest.model import KernelSpec, Manifest
from ..records import Candidate, Origin

__all__ = ["expand_variants", "tunable_value_sets"]


def tunable_value_sets(spec: KernelSpec) -> list[dict[str, int | str]]:
    """Cartesian product of the tunables, in declaration order; ``[{}]`` when there are none."""
    names = list(spec.tunables)
    if not names:
        return [{}]
    return [dict(zip(names, values, strict=True)) for values in itertools.product(*(spec.tunables[n] for n in names))]


def expand_variants(manifest: Manifest, spec: KernelSpec) -> list[Candidate]:
    """Baseline first, then hand-written files, each with every tunable value set, in preference order.

    The baseline's first variant has no defines (its own defaults), so an untuned baseline is always there.
    """
    sources: list[tuple[str, Origin]] = []
    if spec.baseline is not None:
        sources.append(((manifest.root / spec.baseline).read_text(encoding="utf-8"), Origin("baseline", spec.baseline)))
    for rel in spec.candidates:
        sources.append(((manifest.root / rel).read_text(encoding="utf-8"), Origin("file", rel)))
    out: list[Candidate] = []
    seen: set[str] = set()
    for source, origin in sources:
        sets = tunable_value_sets(spec)
        if origin.kind == "baseline" and sets != [{}]:
            sets = [{}, *sets]
        for defines in sets:
            candidate = Candidate(source=source, origin=origin, defines=defines)
            if candidate.digest not in seen:
                seen.add(candidate.digest)
                out.append(candidate)
    return out
