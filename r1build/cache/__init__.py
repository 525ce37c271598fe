"""Cache stage: content-addressed blobs and decision records on diskcache; stats, gc, bundles.

The names below are imported on first use (PEP 562), so a name that needs neither diskcache nor the records
(:func:`stored_values`, :func:`resolve_cache_dir`, read by the CLI's warm path) costs only its own module, and
every module outside this package imports from here, not from the modules inside.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .bundle import BundleEntry, BundleSummary, export_bundle, import_bundle, read_bundle, referenced_blobs
    from .claim import claim
    from .codec import KINDS
    from .listing import Listed, list_entries
    from .location import default_cache_dir, resolve_cache_dir
    from .opening import DEFAULT_SIZE_LIMIT
    from .prune import Cleaned, Pruned, clean_cache, prune_cache
    from .repair import RepairReport, repair_cache
    from .reports import BadEntry, CacheStats, Entry, GcReport
    from .rows import stored_values
    from .store import Cache, open_usable
    from .transcript_doc import LINKS_NAMESPACE, SearchLinks, parse_transcript, read_links, token_count

_WHERE = {
    "LINKS_NAMESPACE": "transcript_doc",
    "SearchLinks": "transcript_doc",
    "parse_transcript": "transcript_doc",
    "read_links": "transcript_doc",
    "token_count": "transcript_doc",
    "BundleEntry": "bundle",
    "BundleSummary": "bundle",
    "export_bundle": "bundle",
    "import_bundle": "bundle",
    "read_bundle": "bundle",
    "referenced_blobs": "bundle",
    "RepairReport": "repair",
    "repair_cache": "repair",
    "DEFAULT_SIZE_LIMIT": "opening",
    "KINDS": "codec",
    "BadEntry": "reports",
    "Cache": "store",
    "CacheStats": "reports",
    "Entry": "reports",
    "GcReport": "reports",
    "open_usable": "store",
    "default_cache_dir": "location",
    "resolve_cache_dir": "location",
    "claim": "claim",
    "Cleaned": "prune",
    "Pruned": "prune",
    "clean_cache": "prune",
    "prune_cache": "prune",
    "stored_values": "rows",
    "Listed": "listing",
    "list_entries": "listing",
}

__all__ = [
    "DEFAULT_SIZE_LIMIT",
    "KINDS",
    "LINKS_NAMESPACE",
    "BadEntry",
    "BundleEntry",
    "BundleSummary",
    "Cache",
    "CacheStats",
    "Cleaned",
    "Entry",
    "GcReport",
    "Listed",
    "Pruned",
    "RepairReport",
    "SearchLinks",
    "claim",
    "clean_cache",
    "default_cache_dir",
    "export_bundle",
    "import_bundle",
    "list_entries",
    "open_usable",
    "parse_transcript",
    "prune_cache",
    "read_bundle",
    "read_links",
    "referenced_blobs",
    "repair_cache",
    "resolve_cache_dir",
    "stored_values",
    "token_count",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
