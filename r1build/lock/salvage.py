"""Recovering from a damaged lock: keep every entry that still verifies, drop the rest, and say which.

A lock can be truncated (a crash, a bad copy), hold git's conflict markers (two branches each locked a kernel),
or have an entry that fails verification (edited by hand or by someone else). Every command but ``r1build lock``
refuses such a lock and names that command; ``r1build lock`` reads it here, entry by entry:

* the text is cut into ``[[kernel]]`` tables; lines of conflict markers (``<<<<<<<``, ``|||||||``, ``=======``,
  ``>>>>>>>``) end a table and are dropped, so both sides of a conflict are read;
* each table is parsed and verified on its own (:func:`~r1build.lock.verify.entry_problem`, and against the
  manifest for a current entry): one that does not parse or verify is dropped;
* of two verified entries for one kernel × arch (the two sides of a conflict), the first (git's "ours") is kept.

The resolver then treats the kept entries as the lock: what they name is used where its source is found, and
every other kernel × arch is resolved again from the cache and the manifest, so the rewritten lock is whole.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import LockError
from ..events import Note, emit
from ..keys import decision_key
from ..manifest.convert import Problem, convert
from ..manifest.model import Manifest
from .lockfile import Lock, LockEntry, lock_path
from .verify import entry_problem, manifest_problem

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["Salvage", "salvage_lock"]

_MARKER = re.compile(r"^(<{7}|\|{7}|={7}|>{7})(\s|$)")
_TABLE = re.compile(r"^\s*\[\[\s*kernel\s*\]\]\s*(#.*)?$")


@dataclass(frozen=True)
class Salvage:
    """What was read from a damaged lock."""

    lock: Lock
    """The entries that verify, as a lock."""
    kept: list[LockEntry]
    """Entries kept."""
    dropped: list[tuple[int, str]]
    """(line, why) of every table dropped."""


def _tables(text: str) -> list[tuple[int, str]]:
    """(first line, text) of each ``[[kernel]]`` table, conflict-marker lines removed."""
    tables: list[tuple[int, list[str]]] = []
    current: list[str] | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if _MARKER.match(line):
            current = None
        elif _TABLE.match(line):
            current = [line]
            tables.append((number, current))
        elif current is not None:
            current.append(line)
    return [(number, "\n".join(lines) + "\n") for number, lines in tables]


def _read_table(manifest: Manifest, table: str) -> LockEntry | str:
    """The verified entry of one table, or why it cannot be used."""
    try:
        data = tomllib.loads(table)
        (item,) = data["kernel"]
        entry: LockEntry = convert(LockEntry, item)
    except tomllib.TOMLDecodeError as exc:
        return f"unreadable ({exc})"
    except Problem as exc:
        return f"{'.'.join(str(p) for p in exc.path) or 'entry'}: {exc.message}"
    except (KeyError, ValueError):
        return "not one [[kernel]] table"
    problem = entry_problem(entry)
    if problem is None:
        spec = next((s for s in manifest.kernels if s.name == entry.name), None)
        if spec is not None and entry.arch in manifest.archs_of(spec) \
                and entry.key == decision_key(manifest, spec, entry.arch):
            problem = manifest_problem(manifest, spec, entry)
    if problem is not None:
        return f"{entry.name}/{entry.arch}: {problem[0]}: {problem[1]}"
    return entry


def salvage_lock(manifest: Manifest, damage: LockError) -> Salvage:
    """Read the manifest's damaged lock entry by entry; notes say what is kept and what is dropped."""
    path: Path = lock_path(manifest)
    first_line = str(damage).splitlines()[0] if str(damage) else type(damage).__name__
    emit(Note("warning", f"the lock cannot be used as it is ({first_line}); rebuilding it from the entries that "
                         "still verify, the cache and the manifest"))
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise LockError(f"{path}: cannot read the lock: {exc}") from None
    kept: dict[tuple[str, str], LockEntry] = {}
    dropped: list[tuple[int, str]] = []
    for line, table in _tables(text):
        found = _read_table(manifest, table)
        if isinstance(found, str):
            dropped.append((line, found))
        elif (found.name, found.arch) in kept:
            dropped.append((line, f"{found.name}/{found.arch}: a second entry (a merge conflict's other side); "
                                  "the first one is kept"))
        else:
            kept[(found.name, found.arch)] = found
    for line, why in dropped:
        emit(Note("warning", f"{path.name}:{line}: dropped {why}"))
    for e in kept.values():
        emit(Note("info", f"{path.name}: kept {e.provenance} winner {e.winner[:12]}", e.name, e.arch))
    entries = sorted(kept.values(), key=lambda e: (e.name, e.arch))
    return Salvage(Lock(manifest=manifest.path.name, kernel=entries), entries, dropped)
