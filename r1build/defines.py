"""Tunable parameter values as they reach the preprocessor: ``-DNAME=value`` for the gate, ``#define NAME value``
in the generated sources. One rule for every place that accepts or writes one (manifest, lock, gate, emit).

A name is a C identifier; a value is an integer, or one token of text that is a plain numeric literal
(``128``, ``-4``, ``0x80``, ``1.5e-3f``, ``64u``) or an identifier (``true``, ``kWide``). Nothing else: no spaces,
no newlines, no quotes, no flags (``128 -DEVIL=1``), no code (``64\\n#error``). Such a value reaching a
``#define`` line or a CMake file would be code the person building never wrote.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["check_defines", "define_problem"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_EXPONENT = r"(?:[eE][+-]?[0-9]+)?"
_NUMBER = rf"[+-]?(?:0[xX][0-9A-Fa-f]+|[0-9]+(?:\.[0-9]*)?{_EXPONENT}|\.[0-9]+{_EXPONENT})[uUlLfF]{{0,3}}"
_VALUE = re.compile(rf"{_NUMBER}|[A-Za-z_][A-Za-z0-9_]{{0,63}}")
_MAX_CHARS = 64


def define_problem(name: object, value: object) -> str | None:
    """Why ``-D<name>=<value>`` is not allowed, or None when it is."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        return f"name {name!r} is not a C identifier"
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return f"{name}: value {value!r} is neither an integer nor a numeric literal or identifier"
    if isinstance(value, int):
        return None
    if len(value) > _MAX_CHARS or not _VALUE.fullmatch(value):
        return (f"{name}: value {value!r} is not a plain numeric literal or identifier (no spaces, flags, "
                "quotes or code)")
    return None


def check_defines(defines: Mapping[str, object]) -> None:
    """:class:`ValueError` naming the first define that is not allowed (callers validated their input: this is
    the last line of defence where a value is written)."""
    for name, value in defines.items():
        problem = define_problem(name, value)
        if problem:
            raise ValueError(f"refusing to write define {problem}")
