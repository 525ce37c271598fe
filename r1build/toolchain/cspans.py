"""C and C++ source text split into spans of code, comments and string or character literals, for the checks that
must not read a comment or a literal as code (the gate's directive scan, the extraction's normalized digest).

The rules are the ones both callers had written by hand: a literal runs from its quote to the same quote or the
end of its line (a backslash escapes the next character; an unterminated literal takes its newline with it); a
``//`` comment ends before its newline; a ``/*`` comment at ``*/`` or the end of the text.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

SpanKind = Literal["code", "comment", "literal"]

__all__ = ["SpanKind", "spans"]


def spans(text: str) -> Iterator[tuple[SpanKind, int, int]]:
    """``(kind, start, end)`` of each span of ``text`` in order; together they cover it exactly."""
    i, n = 0, len(text)
    start = 0  # where the current run of code began
    while i < n:
        c = text[i]
        if c in "\"'":
            end = i + 1
            while end < n and text[end] != c and text[end] != "\n":
                end += 2 if text[end] == "\\" else 1
            end = min(end + 1, n)
        elif text.startswith("//", i):
            found = text.find("\n", i)
            end = n if found < 0 else found
        elif text.startswith("/*", i):
            found = text.find("*/", i + 2)
            end = n if found < 0 else found + 2
        else:
            i += 1
            continue
        if start < i:
            yield "code", start, i
        yield ("literal" if c in "\"'" else "comment"), i, end
        i = start = end
    if start < n:
        yield "code", start, n
