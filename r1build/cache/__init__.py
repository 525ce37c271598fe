"""Cache stage: content-addressed blobs and decision records on diskcache; stats, gc, bundles."""

from __future__ import annotations

from .bundle import BundleEntry, BundleSummary, export_bundle, import_bundle, read_bundle, referenced_blobs
from .repair import RepairReport, repair_cache
from .store import (
    DEFAULT_SIZE_LIMIT,
    KINDS,
    BadEntry,
    Cache,
    CacheStats,
    Entry,
    GcReport,
    default_cache_dir,
    open_usable,
    resolve_cache_dir,
)

__all__ = [
    "DEFAULT_SIZE_LIMIT",
    "KINDS",
    "BadEntry",
    "BundleEntry",
    "BundleSummary",
    "Cache",
    "CacheStats",
    "Entry",
    "GcReport",
    "RepairReport",
    "default_cache_dir",
    "export_bundle",
    "import_bundle",
    "open_usable",
    "read_bundle",
    "referenced_blobs",
    "repair_cache",
    "resolve_cache_dir",
]
