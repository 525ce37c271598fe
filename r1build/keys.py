"""Keys: the decision key of a kernel on an arch.

The decision key says *which question* a cached decision answers: the normalized spec (with the digest of the
reference's source, the baseline and hand-written candidates' sources), the arch, and the generation settings
that shape the search. The toolchain and the GPU are recorded with each result, not keyed on: a lock made with
one CUDA release still builds with another (see :mod:`r1build.lock`).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from .convert import fields, is_record
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
    "project_file",
    "variant_digest",
]

KEY_SCHEMA = 1
"""Bumped whenever what goes into a key changes meaning; old records then simply stop matching."""


_NOT_KEYED = frozenset({"archs", "budget", "gpu_reference", "torch_reference", "must_beat", "margin", "timing_regime"})
"""Fields of a spec that are no part of its normalized form: its archs (keyed on their own), its budget (part of
the generation settings), what judges the winner against the library and torch without ever picking it, and its
timing regime (keyed below only where it is not the default)."""

_FIELDS: dict[type, tuple[str, ...]] = {}
_SCALARS = (str, int, float, bool, type(None))


def _fields(value: Any) -> tuple[str, ...] | None:
    """The field names of a dataclass instance (found once per class); None for anything else."""
    cls = type(value)
    names = _FIELDS.get(cls)
    if names is None and is_record(value) and not isinstance(value, type):
        names = _FIELDS.setdefault(cls, tuple(f.name for f in fields(value)))
    return names


def _plain(value: Any) -> Any:
    """``value`` as the plain data :func:`dataclasses.asdict` makes of it, for JSON (where a tuple is a list),
    without its deep copies: nothing here is kept or changed, only written out."""
    cls = type(value)
    if cls in _SCALARS:
        return value
    if cls is list or cls is tuple:
        return [_plain(v) for v in value]
    if cls is dict:
        return {k: _plain(v) for k, v in value.items()}
    names = _fields(value)
    if names is not None:
        return {name: _plain(getattr(value, name)) for name in names}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


_PLAIN_SPECS: dict[int, tuple[weakref.ref[KernelSpec], dict[str, Any]]] = {}
"""The keyed fields of each spec as plain data, by the spec's identity (a spec is frozen): the same spec's key for
each of its archs writes them once."""


def _plain_spec(spec: KernelSpec) -> dict[str, Any]:
    found = _PLAIN_SPECS.get(id(spec))
    if found is not None and found[0]() is spec:
        return found[1]
    names = _fields(spec) or ()
    plain = {name: _plain(getattr(spec, name)) for name in names if name not in _NOT_KEYED}
    if len(_PLAIN_SPECS) >= 1024:
        _PLAIN_SPECS.clear()
    _PLAIN_SPECS[id(spec)] = (weakref.ref(spec), plain)
    return plain


def normalized_spec(manifest: Manifest, spec: KernelSpec) -> dict[str, Any]:
    """The spec as plain data, paths replaced by the digests of the files they name."""
    data = dict(_plain_spec(spec))
    regime = manifest.timing_regime_of(spec)
    if regime != "back-to-back":  # it picks the winner; the default leaves every earlier key as it was
        data["timing_regime"] = regime
    data["reference"] = {"name": spec.reference, "source": manifest.reference_digests.get(spec.name)}
    data["baseline"] = None if spec.baseline is None else project_file(manifest, spec.baseline)[1]
    data["candidates"] = [project_file(manifest, c)[1] for c in spec.candidates]
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
        "budget": _plain(spec.budget),
    }


class _ManifestKeys:
    """One loaded manifest's decision keys by (spec identity, arch), the part of each spec's key document that
    follows its arch (:func:`_after_arch`) by spec identity, and the source files read for them."""

    __slots__ = ("files", "keys", "manifest", "parts")

    def __init__(self, manifest: weakref.ref[Manifest]) -> None:
        self.manifest = manifest
        self.keys: dict[tuple[int, str], tuple[KernelSpec, str]] = {}
        self.parts: dict[int, tuple[KernelSpec, bytes]] = {}
        self.files: dict[str, tuple[bytes, str]] = {}


_DECISION_KEYS: dict[int, _ManifestKeys] = {}
"""Each loaded manifest's decision keys, by the manifest's identity."""


def _of(manifest: Manifest) -> _ManifestKeys:
    found = _DECISION_KEYS.get(id(manifest))
    if found is None or found.manifest() is not manifest:
        found = _DECISION_KEYS[id(manifest)] = _ManifestKeys(weakref.ref(manifest, _forget(id(manifest))))
    return found


def project_file(manifest: Manifest, rel: str) -> tuple[bytes, str]:
    """A source file of the project (a baseline or candidate, by its path relative to the manifest) and its sha256,
    read once per loaded manifest: a manifest is the project as it was loaded, and the keys, the lock's inputs and
    the winners found in the project's own files all see the same bytes."""
    files = _of(manifest).files
    known = files.get(rel)
    if known is None:
        data = (manifest.root / rel).read_bytes()
        known = files[rel] = (data, digest_bytes(data))
    return known


def decision_key(manifest: Manifest, spec: KernelSpec, arch: str) -> str:
    """sha256 of (key schema, normalized spec, arch, generation settings, nvcc flags).

    Worked out once per manifest object, spec and arch: a :class:`~r1build.manifest.model.Manifest` is the project
    as it was loaded, so the files a key digests are read once however often a run asks (the lookup, the lock's
    checks, the report), not once per asking."""
    found = _of(manifest)
    known = found.keys.get((id(spec), arch))
    if known is not None and known[0] is spec:
        return known[1]
    part = found.parts.get(id(spec))
    if part is None or part[0] is not spec:
        part = found.parts[id(spec)] = (spec, _after_arch(manifest, spec))
    key = digest_bytes(b'{"arch":' + canonical_json(arch) + part[1])
    found.keys[(id(spec), arch)] = (spec, key)
    return key


def _decision_document(manifest: Manifest, spec: KernelSpec, arch: str) -> dict[str, Any]:
    """What :func:`decision_key` digests, as one document (its canonical JSON is what is hashed)."""
    return {
        "schema": KEY_SCHEMA,
        "spec": normalized_spec(manifest, spec),
        "arch": arch,
        "generation": generation_settings(manifest.settings.generation, spec),
        "nvcc_flags": list(manifest.settings.nvcc_flags),
    }


def _after_arch(manifest: Manifest, spec: KernelSpec) -> bytes:
    """The canonical JSON of :func:`_decision_document` after its first member, ``"arch"`` (keys sort): the same for
    each arch of a spec, so a spec's files are read and its fields written once, not once per arch (150 keys of
    50 kernels x 3 archs took ~4 ms). Members joined as :func:`canonical_json` joins them; a test holds the two
    equal."""
    document = _decision_document(manifest, spec, "")
    members = [canonical_json(name) + b":" + canonical_json(document[name]) for name in sorted(document)]
    assert members[0].startswith(b'"arch":')
    return b"".join(b"," + m for m in members[1:]) + b"}"


def _forget(manifest_id: int) -> Any:
    """A callback that drops the keys of a manifest once it is gone (its id may then be another's)."""

    def forget(ref: weakref.ref[Any]) -> None:
        found = _DECISION_KEYS.get(manifest_id)
        if found is not None and found.manifest is ref:
            del _DECISION_KEYS[manifest_id]

    return forget


def variant_digest(source_digest: str, defines: dict[str, int | str]) -> str:
    """Identity of one variant: a source and one value set of its tunable parameters."""
    if not defines:
        return source_digest
    return digest_json({"source": source_digest, "defines": {k: defines[k] for k in sorted(defines)}})
