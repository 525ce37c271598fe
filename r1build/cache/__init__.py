"""Cache stage: content-addressed blobs and decision records on diskcache; stats, gc, bundles."""

from __future__ import annotations

from .bundle import BundleEntry, BundleSummary, export_bundle, import_bundle, read_bundle, referenced_blobs
from .store import (
    DEFAULT_SIZE_LIMIT,
    KINDS,
    Cache,
    CacheStats,
    Entry,
    GcReport,
    Problem,
    default_cache_dir,
    open_usable,
    resolve_cache_dir,
)

__all__ = [
    "DEFAULT_SIZE_LIMIT",
    "KINDS",
    "BundleEntry",
    "BundleSummary",
    "Cache",
    "CacheStats",
    "Entry",
    "GcReport",
    "Problem",
    "default_cache_dir",
    "export_bundle",
    "import_bundle",
    "open_usable",
    "read_bundle",
    "referenced_blobs",
    "resolve_cache_dir",
]
