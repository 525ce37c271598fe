"""Finding the line of a key path in TOML text, so errors can say ``kernels.toml:12: kernel[2].args[1].dtype``.

tomllib gives no positions, so this walks the text: table headers narrow the search to a block, ``key =``
narrows it to a line, an index picks the n-th ``[[array]]`` header or the n-th inline table of an array. It is a
best effort: it returns the closest line it can prove, never a wrong file.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..convert import KeyPath
from ..errors import ManifestError

__all__ = ["Validator", "format_path", "locate"]

_HEADER = re.compile(r"^\s*(\[\[?)\s*([A-Za-z0-9_.\-\"' ]+?)\s*\]\]?")


def format_path(path: KeyPath, prefix: str = "") -> str:
    """``kernel[2].args[1].dtype`` for a key path."""
    out = prefix
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out


def _headers(lines: list[str]) -> list[tuple[int, bool, list[str]]]:
    found = []
    for i, line in enumerate(lines):
        m = _HEADER.match(line)
        if m:
            names = [p.strip().strip("\"'") for p in m.group(2).split(".")]
            found.append((i, m.group(1) == "[[", names))
    return found


def _block_end(headers: list[tuple[int, bool, list[str]]], start: int, dotted: list[str], default: int) -> int:
    """0-based line where the table block opened at ``start`` ends: the next header not inside this table."""
    return next(
        (
            h[0]
            for h in headers
            if (h[0] > start and h[2][: len(dotted)] != dotted) or (h[0] > start and h[1] and h[2] == dotted)
        ),
        default,
    )


def _key_line(lines: list[str], start: int, end: int, key: str) -> int | None:
    """0-based line in ``lines[start:end]`` where ``key`` is set, or None."""
    key_re = re.compile(rf"(^|[{{,\s])[\"']?{re.escape(key)}[\"']?\s*=")
    return next((j for j in range(start, end) if key_re.search(lines[j])), None)


def _inline_table_line(lines: list[str], start: int, end: int, index: int) -> int | None:
    """0-based line of the ``index``-th inline table of the array set at line ``start``: its n-th '{' from the
    key's line on; None when there are fewer."""
    count = -1
    for j in range(start, end):
        count += lines[j][(0 if j != start else lines[j].find("=") + 1) :].count("{")
        if count >= index:
            return j
    return None


def locate(text: str, path: KeyPath, table: tuple[str, ...] = ()) -> int | None:
    """1-based line of ``path`` (relative to ``table``, e.g. ``("tool", "r1build")``), or None."""
    lines = text.splitlines()
    headers = _headers(lines)
    prefix = list(table)
    # block: (first line, end line exclusive, current dotted table it represents)
    start, end = 0, len(lines)
    if prefix:
        hit = next((h for h in headers if h[2][: len(prefix)] == prefix), None)
        if hit is None:
            return None
        start = hit[0]
    current = list(prefix)
    best: int | None = start + 1 if prefix else None
    i = 0
    while i < len(path):
        part = path[i]
        nxt = path[i + 1] if i + 1 < len(path) else None
        if isinstance(part, str):
            dotted = [*current, part]
            matching = [h for h in headers if h[2] == dotted and start <= h[0] < end]
            if matching:
                if matching[0][1] and isinstance(nxt, int):  # [[array.of.tables]]
                    if nxt >= len(matching):
                        return best
                    start = matching[nxt][0]
                    i += 1
                else:
                    start = matching[0][0]
                end = _block_end(headers, start, dotted, len(lines))
                current = dotted
                best = start + 1
                i += 1
                continue
            found = _key_line(lines, start, end, part)
            if found is None:
                return best
            start, best = found, found + 1
            current = [*current, part]
            i += 1
            continue
        if not isinstance(nxt, str):  # an index into an array of scalars: the key's line it is
            i += 1
            continue
        found = _inline_table_line(lines, start, end, part)
        if found is not None:
            start, best = found, found + 1
        i += 1
    return best


class Validator:
    """Makes the :class:`~r1build.errors.ManifestError` of a key path in one manifest's text: its file, line and
    key (``table`` is the manifest's own table: ``("tool", "r1build")`` in pyproject.toml)."""

    def __init__(self, path: Path, text: str, table: tuple[str, ...]) -> None:
        self.path = path
        self.text = text
        self.table = table

    def fail(self, path: KeyPath, message: str) -> ManifestError:
        return ManifestError(
            message,
            file=str(self.path),
            line=locate(self.text, path, self.table),
            key=format_path(path, ".".join(self.table)),
        )
