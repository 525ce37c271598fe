"""``r1build cache repair``: make a cache whole again, keeping every entry that still verifies.

When the index (``cache.db``) is sound, repair deletes the entries that fail verification and fixes the store's
consistency (value files without rows, rows without files), as ``gc`` does without evicting anything.

When the index is damaged (not a database, truncated, malformed), it is rebuilt:

1. every row that can still be read from the old index, and every value file under the cache folder, is
   checked against its digest header; what verifies is kept (a value file that no row names is filed by its
   content: a decision under its own decision key, anything else as a blob under its digest; a gate result or
   JSON document known only from such a file cannot be filed and is dropped, it is cheap to compute again);
2. the damaged index is moved aside to ``cache.db.damaged-<UTC time>`` (with its ``-wal`` / ``-shm`` files), so
   nothing is destroyed that someone may want to look at;
3. a new index is created and the kept entries are written into it in one transaction; the old value files are
   deleted once their contents are stored again.

Run it while no build uses the cache. A read-only cache is refused.
"""

from __future__ import annotations

import datetime as _dt
import sqlite3
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from ..convert import field, record
from ..errors import CacheDamagedError, CacheLocationError
from ..records import Decision, from_json
from .codec import KINDS, Corrupt, check_payload, kind_of, verified
from .location import resolve_cache_dir
from .reports import BadEntry
from .rows import DBNAME as _DBNAME
from .rows import MODE_BINARY, MODE_RAW, number, read_value_file, value_file_problem
from .store import Cache

__all__ = ["RepairReport", "repair_cache"]


@record(kw_only=True)
class RepairReport:
    """What :func:`repair_cache` did."""

    directory: str
    """The cache directory."""
    rebuilt: bool = False
    """Whether the index was damaged and rebuilt."""
    damage: str | None = None
    """What was wrong with the index."""
    moved_aside: str | None = None
    """Where the damaged index went."""
    recovered: dict[str, int] = field(default_factory=dict)
    """Entries per kind written into the new index."""
    dropped: int = 0
    """Rows or value files that failed verification, could not be read or could not be filed."""
    removed_files: int = 0
    """Old value files deleted after their contents were stored again (or because they were bad)."""
    checked: int = 0
    """Sound index: entries checked."""
    bad_entries: list[BadEntry] = field(default_factory=list)
    """Sound index: entries that failed verification, deleted."""
    fixed: int = 0
    """Sound index: inconsistencies of the store fixed."""


def repair_cache(directory: Path | str | None = None) -> RepairReport:
    """Repair the cache in ``directory`` (see the module doc). Raises
    :class:`~r1build.errors.CacheLocationError` where no cache is, :class:`~r1build.errors.CacheError` for a
    read-only one."""
    d = resolve_cache_dir(directory)
    if (d / _DBNAME).exists() and not (d / _DBNAME).is_file():
        raise CacheLocationError(
            f"{d / _DBNAME} is there but is no file (a folder, a device or a FIFO): nothing r1build can repair; "
            "move it away and start a new cache"
        )
    if not (d / _DBNAME).is_file():
        raise CacheLocationError(
            f"{d} holds no r1build cache (no {_DBNAME}): nothing to repair; is the path "
            "mistyped (--cache-dir, R1BUILD_CACHE_DIR)?"
        )
    try:
        cache = Cache(d, create=False)
    except CacheDamagedError as exc:
        return _rebuild(d, exc.reason or str(exc))
    with cache:
        cache._refuse_read_only("repair it")
        damage = cache.integrity()
        if damage is None:
            report = RepairReport(directory=str(d), checked=len(cache.entries()))
            report.bad_entries = cache.audit(repair=True)
            report.fixed = cache.gc(size_limit=None).repaired
            return report
    return _rebuild(d, damage)


def _old_rows(db: Path) -> Iterator[tuple[str, int, str | None, bytes | None]]:
    """(key, mode, filename, value) of every row that can still be read from a damaged index."""
    base = db.resolve().as_uri()
    for query in ("?mode=ro", "?immutable=1"):
        try:
            con = sqlite3.connect(base + query, uri=True)
        except sqlite3.Error:
            continue
        try:
            try:
                rowids = [r[0] for r in con.execute("SELECT rowid FROM Cache WHERE raw = 1").fetchall()]
            except sqlite3.Error:
                continue
            for rowid in rowids:
                try:
                    row = con.execute(
                        "SELECT key, mode, filename, value FROM Cache WHERE rowid = ?", (rowid,)
                    ).fetchone()
                except sqlite3.Error:
                    continue
                if row is not None and isinstance(row[0], str):
                    value = bytes(row[3]) if isinstance(row[3], bytes) else None
                    yield row[0], int(number(row[1])), row[2], value
            return
        finally:
            con.close()


def _filed(payload: bytes, digest: str) -> str:
    """The key of a value known only from its file: a decision under its own key, anything else a blob."""
    try:
        return f"decision/{from_json(Decision, payload).key}"
    except ValueError:
        return f"blob/{digest}"


def _rebuild(d: Path, damage: str) -> RepairReport:
    report = RepairReport(directory=str(d), rebuilt=True, damage=damage)
    old_files = sorted(  # never through a planted symbolic link: these files are deleted below
        p
        for p in d.glob("[0-9a-f][0-9a-f]/[0-9a-f][0-9a-f]/*.val")
        if value_file_problem(d, p.relative_to(d).as_posix()) is None
    )
    kept = _salvage(d, old_files, report)
    moves = _move_index_aside(d, report)
    counts = _refill(d, kept, moves)
    _remove_old_files(old_files, report)
    report.recovered = {k: counts[k] for k in KINDS}
    return report


def _salvage(d: Path, old_files: list[Path], report: RepairReport) -> dict[str, bytes]:
    """What verifies of the damaged index's rows and of the value files no row names, by key (counting what is
    dropped in ``report``)."""
    kept: dict[str, bytes] = {}
    named_files: set[str] = set()
    for key, mode, filename, value in _old_rows(d / _DBNAME):
        raw: bytes | None = None
        if mode == MODE_RAW and value is not None:
            raw = value
        elif mode == MODE_BINARY and filename:
            named_files.add(str(filename))
            try:
                found = read_value_file(d, filename)  # a row may name any path: only the cache's own files
            except OSError:
                found = None
            raw = found if isinstance(found, bytes) else None
        if raw is None or not _keep(kept, key, raw):
            report.dropped += 1
    for path in old_files:
        if path.relative_to(d).as_posix() in named_files:
            continue
        try:
            raw = path.read_bytes()
            digest, payload = verified(raw)
        except (OSError, Corrupt):
            report.dropped += 1
            continue
        if not _keep(kept, _filed(payload, digest), raw):
            report.dropped += 1
    return kept


def _move_index_aside(d: Path, report: RepairReport) -> list[tuple[Path, Path]]:
    """Move the damaged index (and its -wal and -shm) aside under a dated name; the moves made."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    aside = d / f"{_DBNAME}.damaged-{stamp}"
    moves = [(d / f"{_DBNAME}{suffix}", Path(f"{aside}{suffix}")) for suffix in ("", "-wal", "-shm")]
    moves = [(src, dst) for src, dst in moves if src.exists()]
    for src, dst in moves:
        src.replace(dst)
    report.moved_aside = str(aside)
    return moves


def _refill(d: Path, kept: dict[str, bytes], moves: list[tuple[Path, Path]]) -> Counter[str]:
    """Put what was kept into a new index (blobs first), counted by kind; on any failure the damaged index goes
    back in its place."""
    counts: Counter[str] = Counter()
    try:
        with Cache(d) as cache, cache.transaction():
            for key in sorted(kept, key=lambda k: (kind_of(k) != "blob", k)):
                cache.put_raw(key, kept[key][65:])
                counts[kind_of(key)] += 1
    except BaseException:  # leave the cache as it was: the damaged index back in its place
        for suffix in ("", "-wal", "-shm"):
            (d / f"{_DBNAME}{suffix}").unlink(missing_ok=True)
        for src, dst in moves:
            dst.replace(src)
        raise
    return counts


def _remove_old_files(old_files: list[Path], report: RepairReport) -> None:
    """Delete the old value files (their contents are in the new index) and diskcache's folders left empty."""
    for path in old_files:
        try:
            path.unlink()
            report.removed_files += 1
        except OSError:
            continue
        for folder in (path.parent, path.parent.parent):  # diskcache's two levels, once empty
            try:
                folder.rmdir()
            except OSError:
                break


def _keep(kept: dict[str, bytes], key: str, raw: bytes) -> bool:
    """Keep ``raw`` (header and payload) under ``key`` when it verifies and fits the key."""
    try:
        _, payload = verified(raw)
    except Corrupt:
        return False
    if check_payload(key, payload) is not None:
        return False
    kept.setdefault(key, raw)
    return True
