"""Cache stage: content-addressed blobs and decision records on diskcache; stats, gc, bundles."""

from __future__ import annotations

from .store import Cache, CacheStats, Entry, default_cache_dir

__all__ = ["Cache", "CacheStats", "Entry", "default_cache_dir"]
