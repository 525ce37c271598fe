"""Where a winner's source text is found, verified by its digest: the cache, the vendored folder, or the
manifest's own files (what a build without a cache, say from an sdist, can find)."""

from __future__ import annotations

from typing import NamedTuple

from ..cache import Cache
from ..digests import read_plain
from ..keys import digest_bytes, project_file
from ..lock import find_vendored, vendor_file_name
from ..manifest import KernelSpec, Manifest
from ..records import SourceFrom


def _manifest_file_with_digest(manifest: Manifest, spec: KernelSpec, digest: str) -> str | None:
    for rel in [spec.baseline, *spec.candidates]:
        if rel is None:
            continue
        data, found = project_file(manifest, rel)
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
