"""Lock stage: ``kernels.lock`` read/write, staleness, ``--locked`` rules, vendoring."""

from __future__ import annotations

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
from .salvage import salvage_lock
from .vendor import Vendored, find_vendored, vendor_file_name, vendor_winners
from .verify import entry_problem, manifest_problem

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
