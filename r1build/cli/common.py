"""Arguments and set-up shared by the CLI's commands: finding the manifest, opening the cache, archs."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..cache import Cache, open_usable
from ..errors import UsageError
from ..manifest import Manifest, find_manifest, load_manifest, parse_arch

__all__ = ["add_cache_arg", "add_manifest_arg", "load_from_args", "open_cache", "parse_archs"]


def add_manifest_arg(parser: argparse.ArgumentParser) -> None:
    """``-m/--manifest``: a manifest file or a directory holding one."""
    parser.add_argument("-m", "--manifest", type=Path, default=Path.cwd(), metavar="PATH",
                        help="kernels.toml, a pyproject.toml with [tool.r1build], or a folder with one (default: .)")


def add_cache_arg(parser: argparse.ArgumentParser) -> None:
    """``--cache-dir``."""
    parser.add_argument("--cache-dir", type=Path, default=None, metavar="DIR",
                        help="cache directory (default: $R1BUILD_CACHE_DIR or the user cache folder)")


def load_from_args(args: argparse.Namespace, *, check_references: bool = True) -> Manifest:
    """The manifest named by ``--manifest``."""
    return load_manifest(find_manifest(args.manifest), check_references=check_references)


def open_cache(args: argparse.Namespace, *, existing: bool = False) -> Cache:
    """The cache named by ``--cache-dir`` (or the default), as project commands use it: damaged or unwritable,
    it costs a warning, not the command (:func:`~r1build.cache.open_usable`). ``existing``: the cache as
    maintenance commands need it, which must already exist and raise what is wrong with it."""
    directory = getattr(args, "cache_dir", None)
    return Cache(directory, create=False) if existing else open_usable(directory)


def parse_archs(values: list[str] | None) -> list[str] | None:
    """Canonical archs from ``--arch`` values (each may be comma separated)."""
    if not values:
        return None
    out: list[str] = []
    for value in values:
        for part in value.split(","):
            if not part.strip():
                continue
            try:
                arch = parse_arch(part)
            except ValueError as exc:
                raise UsageError(f"--arch: {exc}") from None
            if arch not in out:
                out.append(arch)
    return out
