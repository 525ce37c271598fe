"""Command lines many tests run."""

from __future__ import annotations

from pathlib import Path


def cluster_resolve(project: Path, cache_dir: Path, address: str, *flags: str) -> list[str]:
    """``r1build resolve`` of ``project`` into ``cache_dir``, offline, through the cluster at ``address``, with
    ``flags`` added."""
    return ["resolve", "-m", str(project), "--cache-dir", str(cache_dir), "--offline", *flags, "--cluster", address]
