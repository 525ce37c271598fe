"""Gate stage: compile each candidate variant with nvcc per arch, read the ptxas report, check host symbols.

The names below are imported on first use (PEP 562): a run that only reads cached verdicts (:mod:`.verdicts`)
imports none of the compile machinery.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .nvcc import Compilation, compile_variant, gencode, parse_ptxas_report
    from .static import StaticGate, gate_for_archs
    from .symbols import SymbolCheck, check_object, is_allowed
    from .verdicts import ALLOWLIST_VERSION, GATE_SCHEMA, gate_key, gate_key_of, limit_violations

_WHERE = {
    "ALLOWLIST_VERSION": "verdicts",
    "GATE_SCHEMA": "verdicts",
    "Compilation": "nvcc",
    "StaticGate": "static",
    "SymbolCheck": "symbols",
    "check_object": "symbols",
    "compile_variant": "nvcc",
    "gate_for_archs": "static",
    "gate_key": "verdicts",
    "gate_key_of": "verdicts",
    "gencode": "nvcc",
    "is_allowed": "symbols",
    "limit_violations": "verdicts",
    "parse_ptxas_report": "nvcc",
}

__all__ = [
    "ALLOWLIST_VERSION",
    "GATE_SCHEMA",
    "Compilation",
    "StaticGate",
    "SymbolCheck",
    "check_object",
    "compile_variant",
    "gate_for_archs",
    "gate_key",
    "gate_key_of",
    "gencode",
    "is_allowed",
    "limit_violations",
    "parse_ptxas_report",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
