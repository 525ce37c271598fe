"""Where a winner's source text is found, verified by its digest: the cache, the vendored folder, or the
manifest's own files (what a build without a cache, say from an sdist, can find)."""

from __future__ import annotations

import weakref
from typing import NamedTuple

from ..cache import Cache
from ..digests import read_plain
from ..keys import digest_bytes
from ..lock import find_vendored, vendor_file_name
from ..manifest import KernelSpec, Manifest
from ..records import SourceFrom

_FILES: dict[int, tuple[weakref.ref[Manifest], dict[str, tuple[bytes, str]]]] = {}
"""Per loaded manifest (by identity), each source file of it read so far, with its sha256: a manifest is the
project as it was loaded, and its files are read once (a kernel's baseline was read and hashed once per arch),
as the decision keys read them once (:func:`~r1build.keys.decision_key`)."""


def _project_file(manifest: Manifest, rel: str) -> tuple[bytes, str]:
    found = _FILES.get(id(manifest))
    if found is None or found[0]() is not manifest:
        if len(_FILES) >= 64:
            _FILES.clear()
        found = _FILES[id(manifest)] = (weakref.ref(manifest), {})
    known = found[1].get(rel)
    if known is None:
        data = (manifest.root / rel).read_bytes()
        known = found[1][rel] = (data, digest_bytes(data))
    return known


def _manifest_file_with_digest(manifest: Manifest, spec: KernelSpec, digest: str) -> str | None:
    for rel in [spec.baseline, *spec.candidates]:
        if rel is None:
            continue
        data, found = _project_file(manifest, rel)
        if found == digest:
            return data.decode()
    return None


class WinnerSource(NamedTuple):
    """A winner's source text, verified by its digest, and where it was read from."""

    text: str
    where: SourceFrom


def source_for(manifest: Manifest, spec: KernelSpec, cache: Cache, digest: str) -> WinnerSource | None:
    text = cache.get_text(digest)
    if text is not None:
        return WinnerSource(text, "cache")
    return project_source(manifest, spec, digest)


def project_source(manifest: Manifest, spec: KernelSpec, digest: str) -> WinnerSource | None:
    """The source with ``digest`` from the project alone (the vendored folder, the manifest's own files), verified:
    what a build with no cache, say from an sdist, can find."""
    vendored = find_vendored(manifest.root / manifest.settings.vendor_dir, spec.name, digest)
    if vendored is not None:
        return WinnerSource(vendored, "vendored")
    own = _manifest_file_with_digest(manifest, spec, digest)
    if own is not None:
        return WinnerSource(own, "repo")
    return None


def vendored_mismatch(manifest: Manifest, spec: KernelSpec, digest: str) -> str:
    """Why the vendored copy of the source ``digest`` could not be used where a file of its name is there (it was
    edited since `r1build vendor` wrote it), as a clause to add to a message; empty otherwise."""
    path = manifest.root / manifest.settings.vendor_dir / vendor_file_name(spec.name, digest)
    try:
        data = read_plain(path)
    except OSError:
        return ""
    found = digest_bytes(data)
    if found == digest:
        return ""
    return (
        f" ({manifest.settings.vendor_dir}/{path.name} is there but was edited: its sha256 is {found[:16]}, "
        "not the locked source's)"
    )
