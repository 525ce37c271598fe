"""What a value in the manifest may be for the C code it ends up in: scalar argument values in their dtype's
range, and tunable values that are one C token (an integer or an identifier or a numeric literal)."""

from __future__ import annotations

import math
import re

from .model import INTEGER_DTYPES

__all__ = ["FLOAT_MAX", "integer_range", "tunable_value_problem", "value_problem"]

FLOAT_MAX: dict[str, float] = {
    "float16": 65504.0,
    "bfloat16": 3.3895313892515355e38,
    "float32": 3.4028234663852886e38,
    "float64": 1.7976931348623157e308,
}
"""Largest finite value of each floating-point dtype."""

_NUMERIC_LITERAL = re.compile(
    r"[+-]?(?:0[xX][0-9a-fA-F]+|0[bB][01]+|\d+)[uU]?(?:ll|LL|l|L)?[uU]?"
    r"|[+-]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?[fFlL]?",
    re.ASCII,
)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def integer_range(dtype: str) -> tuple[int, int]:
    """Smallest and largest value of an integer dtype (``int8`` → -128..127)."""
    bits = int(dtype.removeprefix("u").removeprefix("int"))
    if dtype.startswith("u"):
        return 0, 2**bits - 1
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


def value_problem(dtype: str, value: bool | float | int) -> str | None:
    """Why ``value`` cannot be passed as a scalar of ``dtype``, or None."""
    if dtype == "bool":
        return None if isinstance(value, bool) else f"bool scalar values must be true or false, got {value!r}"
    if isinstance(value, bool):
        return f"{dtype} scalar values must be numbers, got {str(value).lower()}"
    if not math.isfinite(value):
        return f"must be a finite number, got {value}"
    if dtype in INTEGER_DTYPES:
        if isinstance(value, float) and not value.is_integer():
            return f"{dtype} scalar values must be integers, got {value!r}"
        lo, hi = integer_range(dtype)
        if not lo <= int(value) <= hi:
            return f"{int(value)} is out of range for {dtype} ({lo}..{hi})"
        return None
    limit = FLOAT_MAX[dtype]
    if abs(value) > limit:
        return f"{value!r} is out of range for {dtype} (largest finite value {limit:g})"
    return None


def tunable_value_problem(value: int | str) -> str | None:
    """Why ``value`` cannot be a tunable's value (``-DNAME=value``, ``#define NAME value``), or None: it must be
    an integer, or a string holding one numeric literal (``128``, ``0x80``, ``1.5f``) or identifier (``float``)."""
    if isinstance(value, int):
        if not -(2**63) <= value < 2**64:
            return f"{value} does not fit in 64 bits: no C integer type holds it"
        return None
    if _NUMERIC_LITERAL.fullmatch(value) or _IDENT.fullmatch(value):
        return None
    return (
        f"{value!r} is not an integer, a numeric literal or an identifier (a tunable's value is pasted into "
        "the compile line and the generated source as one token)"
    )
