"""Finding the line of a key path in TOML text, so errors can say ``kernels.toml:12: kernel[2].args[1].dtype``.

tomllib gives no positions, so this walks the text: table headers narrow the search to a block, ``key =``
narrows it to a line, an index picks the n-th ``[[array]]`` header or the n-th inline table of an array. It is a
best effort: it returns the closest line it can prove, never a wrong file.
"""

from __future__ import annotations

import re

from ..convert import KeyPath

__all__ = ["format_path", "locate"]

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
                # block ends at the next header that is not inside this table
                end = next(
                    (
                        h[0]
                        for h in headers
                        if (h[0] > start and h[2][: len(dotted)] != dotted)
                        or (h[0] > start and h[1] and h[2] == dotted)
                    ),
                    len(lines),
                )
                current = dotted
                best = start + 1
                i += 1
                continue
            key_re = re.compile(rf"(^|[{{,\s])[\"']?{re.escape(part)}[\"']?\s*=")
            for j in range(start, end):
                if key_re.search(lines[j]):
                    start = j
                    best = j + 1
                    break
            else:
                return best
            current = [*current, part]
            i += 1
            continue
        if not isinstance(nxt, str):  # an index into an array of scalars: the key's line it is
            i += 1
            continue
        # an index into an array of inline tables: the n-th '{' from the key's line on
        count = -1
        for j in range(start, end):
            count += lines[j][(0 if j != start else lines[j].find("=") + 1) :].count("{")
            if count >= part:
                start = j
                best = j + 1
                break
        i += 1
    return best
