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

from ..manifest.values import tunable_value_problem

__all__ = ["check_defines", "define_problem"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def define_problem(name: object, value: object) -> str | None:
    """Why ``-D<name>=<value>`` is not allowed, or None when it is (values: the manifest's rule for tunables,
    :func:`~r1build.manifest.values.tunable_value_problem`)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        return f"name {name!r} is not a C identifier"
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return f"{name}: value {value!r} is neither an integer nor a numeric literal or identifier"
    problem = tunable_value_problem(value)
    return f"{name}: value {problem}" if problem else None


def check_defines(defines: Mapping[str, object]) -> None:
    """:class:`ValueError` naming the first define that is not allowed (callers validated their input: this is
    the last line of defence where a value is written)."""
    for name, value in defines.items():
        problem = define_problem(name, value)
        if problem:
            raise ValueError(f"refusing to write define {problem}")
