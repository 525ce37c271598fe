"""Cache stage: content-addressed blobs and decision records on diskcache; stats, gc, bundles.

The names below are imported on first use (PEP 562), so a module of this package that needs neither diskcache
nor the records (:mod:`.rows`, read by the CLI's warm path) costs only itself.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_WHERE = {
    "BundleEntry": "bundle", "BundleSummary": "bundle", "export_bundle": "bundle", "import_bundle": "bundle",
    "read_bundle": "bundle", "referenced_blobs": "bundle",
    "RepairReport": "repair", "repair_cache": "repair",
    "DEFAULT_SIZE_LIMIT": "store", "KINDS": "store", "BadEntry": "store", "Cache": "store", "CacheStats": "store",
    "Entry": "store", "GcReport": "store", "default_cache_dir": "store", "open_usable": "store",
    "resolve_cache_dir": "store",
}

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


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
