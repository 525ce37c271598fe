"""Manifest stage: parsing, validation, did-you-mean and the typed spec."""

from __future__ import annotations

from .addresses import cluster_address_problem, remote_url_problem
from .archs import ARCHS, DEFAULT_ARCHS, Arch, ArchInfo, arch_info, parse_arch
from .load import find_manifest, load_manifest, named_variables, nearest_manifest
from .model import DTYPES, Arg, Budget, Generation, KernelSpec, Limits, Manifest, ProjectSettings, Tolerance
from .reference import load_reference

__all__ = [
    "ARCHS",
    "DEFAULT_ARCHS",
    "DTYPES",
    "Arch",
    "ArchInfo",
    "Arg",
    "Budget",
    "Generation",
    "KernelSpec",
    "Limits",
    "Manifest",
    "ProjectSettings",
    "Tolerance",
    "arch_info",
    "cluster_address_problem",
    "find_manifest",
    "load_manifest",
    "load_reference",
    "named_variables",
    "nearest_manifest",
    "parse_arch",
    "remote_url_problem",
]
