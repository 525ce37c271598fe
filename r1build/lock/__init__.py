"""Lock stage: ``kernels.lock`` read/write, staleness, ``--locked`` rules, vendoring."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .lockfile import (
    Lock,
    LockEntry,
    Staleness,
    check_lock,
    inputs_of,
    load_lock,
    lock_path,
    read_lock,
    require_fresh,
    unlockable,
    write_lock,
)
from .vendor import Vendored, find_vendored, vendor_file_name, vendor_winners
from .verify import entry_problem, manifest_problem

if TYPE_CHECKING:
    from .salvage import salvage_lock

__all__ = [
    "Lock",
    "LockEntry",
    "Staleness",
    "Vendored",
    "check_lock",
    "entry_problem",
    "find_vendored",
    "inputs_of",
    "load_lock",
    "lock_path",
    "manifest_problem",
    "read_lock",
    "require_fresh",
    "salvage_lock",
    "unlockable",
    "vendor_file_name",
    "vendor_winners",
    "write_lock",
]


def __getattr__(name: str) -> Any:
    """:func:`salvage_lock` imported on first use (PEP 562): only a damaged lock needs it."""
    if name != "salvage_lock":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from .salvage import salvage_lock

    globals()[name] = salvage_lock
    return salvage_lock
