"""The candidates a manifest itself provides: the baseline, hand-written files, and every tunable value set."""

from __future__ import annotations

import itertools
import re

from ..manifest.model import KernelSpec, Manifest
from ..records import Candidate, Origin

__all__ = ["expand_variants", "tunable_value_sets", "tunables_named"]


def tunable_value_sets(spec: KernelSpec, names: list[str] | None = None) -> list[dict[str, int | str]]:
    """Cartesian product of the tunables (only ``names`` when given), in declaration order; ``[{}]`` when
    there are none."""
    chosen = [n for n in spec.tunables if names is None or n in names]
    if not chosen:
        return [{}]
    return [dict(zip(chosen, values, strict=True)) for values in itertools.product(*(spec.tunables[n] for n in chosen))]


def tunables_named(spec: KernelSpec, source: str) -> list[str]:
    """The tunables a source mentions as an identifier: only these can change what it compiles to, so a
    source that names none is one variant, not one per value set."""
    return [n for n in spec.tunables if re.search(rf"\b{re.escape(n)}\b", source)]


def expand_variants(manifest: Manifest, spec: KernelSpec) -> list[Candidate]:
    """Baseline first, then hand-written files, each with every value set of the tunables it names, in
    preference order (ties in selection go to the earlier one).

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
        sets = tunable_value_sets(spec, tunables_named(spec, source))
        if origin.kind == "baseline" and sets != [{}]:
            sets = [{}, *sets]
        for defines in sets:
            candidate = Candidate(source=source, origin=origin, defines=defines)
            if candidate.digest not in seen:
                seen.add(candidate.digest)
                out.append(candidate)
    return out
