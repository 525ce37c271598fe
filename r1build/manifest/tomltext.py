"""Parsing the TOML r1build reads (``kernels.toml``, ``pyproject.toml``, ``kernels.lock``) into one error type.

tomllib raises :class:`tomllib.TOMLDecodeError` for bad syntax, but lets other exceptions escape for input that is
valid TOML yet beyond what Python parses: arrays or inline tables nested deeper than the recursion limit
(:class:`RecursionError`) and integers with more digits than ``int()`` converts (a plain :class:`ValueError`). A
byte-order mark at the start is no TOML either. :func:`parse_toml` turns each of these into a
:class:`TomlProblem` that says what is wrong and, where it is known, on which line, so every reader reports bad
TOML as bad input, never as a traceback.
"""

from __future__ import annotations

import re
import sys
from typing import Any

if sys.version_info >= (3, 11):
    try:  # tomli's wheels are compiled (mypyc): a 150-entry lock parses in 4 ms against tomllib's 7 (its source)
        import tomli as tomllib
    except ImportError:  # pragma: no cover - a machine without the dependency: the same parser, in Python
        import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

__all__ = ["TomlProblem", "parse_toml"]

_AT = re.compile(r"\s*\(at line (\d+), column \d+\)")
_LONG_INTEGER = re.compile(r"[0-9_]{4000,}")


class TomlProblem(ValueError):
    """TOML text that cannot be parsed: ``message`` says why, ``line`` (1-based) where, when known."""

    def __init__(self, message: str, line: int | None = None) -> None:
        self.message = message
        self.line = line
        super().__init__(message)


def parse_toml(text: str) -> dict[str, Any]:
    """The document ``text`` holds; :class:`TomlProblem` for anything tomllib cannot turn into one."""
    if text.startswith("\ufeff"):
        raise TomlProblem("invalid TOML: the file starts with a byte-order mark (BOM); save it as UTF-8 without one", 1)
    try:
        data: dict[str, Any] = tomllib.loads(text)
        return data
    except tomllib.TOMLDecodeError as exc:
        m = _AT.search(str(exc))
        raise TomlProblem(f"invalid TOML: {_AT.sub('', str(exc))}", int(m.group(1)) if m else None) from None
    except RecursionError:
        raise TomlProblem("invalid TOML: arrays or inline tables nested too deeply to read") from None
    except ValueError:  # int() refusing a literal of thousands of digits
        m = _LONG_INTEGER.search(text)
        line = text.count("\n", 0, m.start()) + 1 if m else None
        message = "invalid TOML: an integer with thousands of digits, more than any setting takes"
        raise TomlProblem(message, line) from None
