"""Recovering from a damaged lock: keep every entry that still verifies, drop the rest, and say which.

A lock can be truncated (a crash, a bad copy), hold git's conflict markers (two branches each locked a kernel),
or have an entry that fails verification (edited by hand or by someone else). Every command but ``r1build lock``
refuses such a lock and names that command; ``r1build lock`` reads it here, entry by entry:

* a text with git's conflict markers (``<<<<<<<``, ``|||||||``, ``=======``, ``>>>>>>>``) is read twice, as
  each side wrote it ("ours", then "theirs");
* each ``[[kernel]]`` table is parsed and verified on its own (:func:`~r1build.lock.verify.entry_problem`, and
  against the manifest for a current entry): one that does not parse or verify is dropped;
* of two different verified entries for one kernel × arch, one whose key is current wins over a stale one,
  then "ours" over "theirs".

The resolver then treats the kept entries as the lock: what they name is used where its source is found, and
every other kernel × arch is resolved again from the cache and the manifest, so the rewritten lock is whole.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..convert import ConversionProblem, convert, record
from ..errors import LockError
from ..events import Note, emit
from ..keys import decision_key
from ..manifest.model import Manifest
from ..manifest.tomltext import TomlProblem, parse_toml
from .lockfile import Lock, LockEntry, lock_path, upgrade_v1_entry
from .verify import entry_problem, manifest_problem

__all__ = ["Salvage", "salvage_lock"]

_MARKER = re.compile(r"^(<{7}|\|{7}|={7}|>{7})(\s|$)")
_TABLE = re.compile(r"^\s*\[\[\s*kernel\s*\]\]\s*(#.*)?$")


@record(frozen=True)
class Salvage:
    """What was read from a damaged lock."""

    lock: Lock
    """The entries that verify, as a lock."""
    kept: list[LockEntry]
    """Entries kept."""
    dropped: list[tuple[int, str]]
    """(line, why) of every table dropped."""


Lines = list[tuple[int, str]]
"""(line number in the lock file, text) pairs."""


def _sides(text: str) -> list[Lines]:
    """The lines as each side of a merge conflict wrote them (git's "ours" first, then "theirs"; a diff3 base is
    left out); the file's own lines when it holds no conflict markers."""
    ours: Lines = []
    theirs: Lines = []
    section = "both"
    conflicted = False
    for number, line in enumerate(text.splitlines(), start=1):
        m = _MARKER.match(line)
        if m:
            conflicted = True
            section = {"<": "ours", "|": "base", "=": "theirs", ">": "both"}[m.group(1)[0]]
            continue
        if section in ("both", "ours"):
            ours.append((number, line))
        if section in ("both", "theirs"):
            theirs.append((number, line))
    return [ours, theirs] if conflicted else [ours]


def _tables(lines: Lines) -> list[tuple[int, str]]:
    """(first line, text) of each ``[[kernel]]`` table."""
    tables: list[tuple[int, list[str]]] = []
    for number, line in lines:
        if _TABLE.match(line):
            tables.append((number, [line]))
        elif tables:
            tables[-1][1].append(line)
    return [(number, "\n".join(body) + "\n") for number, body in tables]


def _read_table(manifest: Manifest, table: str) -> LockEntry | str:
    """The verified entry of one table, or why it cannot be used."""
    try:
        data = parse_toml(table)
        (item,) = data["kernel"]
        upgrade_v1_entry(item)  # the damaged lock may be a version 1 lock
        entry: LockEntry = convert(LockEntry, item)
    except TomlProblem as exc:
        return f"unreadable ({exc.message})"
    except ConversionProblem as exc:
        return f"{'.'.join(str(p) for p in exc.path) or 'entry'}: {exc.message}"
    except (KeyError, ValueError):
        return "not one [[kernel]] table"
    problem = entry_problem(entry)
    if problem is None:
        spec = next((s for s in manifest.kernels if s.name == entry.name), None)
        if (
            spec is not None
            and entry.arch in manifest.archs_of(spec)
            and entry.key == decision_key(manifest, spec, entry.arch)
        ):
            problem = manifest_problem(manifest, spec, entry)
    if problem is not None:
        return f"{entry.name}/{entry.arch}: {problem[0]}: {problem[1]}"
    return entry


def salvage_lock(manifest: Manifest, damage: LockError) -> Salvage:
    """Read the manifest's damaged lock entry by entry; notes say what is kept and what is dropped."""
    path: Path = lock_path(manifest)
    first_line = str(damage).splitlines()[0] if str(damage) else type(damage).__name__
    emit(
        Note(
            "warning",
            f"the lock cannot be used as it is ({first_line}); rebuilding it from the entries that "
            "still verify, the cache and the manifest",
        )
    )
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise LockError(f"{path}: cannot read the lock: {exc}") from None
    sides = _sides(text)
    found: dict[tuple[str, str], list[tuple[bool, int, int, LockEntry]]] = {}
    dropped: list[tuple[int, str]] = []
    for side, version in enumerate(sides):
        where = "" if len(sides) == 1 else (" (ours)", " (theirs)")[side]
        for line, table in _tables(version):
            entry = _read_table(manifest, table)
            if isinstance(entry, str):
                dropped.append((line, entry + where))
                continue
            spec = next((s for s in manifest.kernels if s.name == entry.name), None)
            current = spec is not None and entry.key == decision_key(manifest, spec, entry.arch)
            found.setdefault((entry.name, entry.arch), []).append((not current, side, line, entry))
    kept: dict[tuple[str, str], LockEntry] = {}
    for (name, arch), options in found.items():
        options.sort(key=lambda o: (o[0], o[1]))
        kept[(name, arch)] = first = options[0][3]
        for _, side, line, other in options[1:]:
            if other != first:
                what = "the other side of a merge conflict" if side != options[0][1] else "a second entry"
                dropped.append(
                    (
                        line,
                        f"{name}/{arch}: {what} (winner {other.winner[:12]}); kept winner "
                        f"{first.winner[:12]}{' (current)' if not options[0][0] else ''}",
                    )
                )
    for line, why in dict(dropped).items():
        emit(Note("warning", f"{path.name}:{line}: dropped {why}"))
    for e in kept.values():
        emit(Note("info", f"{path.name}: kept {e.provenance} winner {e.winner[:12]}", e.name, e.arch))
    entries = sorted(kept.values(), key=lambda e: (e.name, e.arch))
    return Salvage(Lock(manifest=manifest.path.name, kernel=entries), entries, sorted(dict(dropped).items()))
