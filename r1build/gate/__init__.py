"""Gate stage: compile each candidate variant with nvcc per arch, read the ptxas report, check host symbols."""

from __future__ import annotations

from .nvcc import Compilation, compile_variant, gencode, parse_ptxas_report
from .static import GATE_SCHEMA, StaticGate, gate_for_archs, gate_key, limit_violations
from .symbols import ALLOWLIST_VERSION, SymbolCheck, check_object, is_allowed

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
    "gencode",
    "is_allowed",
    "limit_violations",
    "parse_ptxas_report",
]
