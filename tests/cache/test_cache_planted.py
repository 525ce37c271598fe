"""A cache folder with things planted in it (a teammate's copied cache, a restored CI cache): a row of
``cache.db`` naming a file outside the cache, symbolic links leading out of it. Reading, repairing, collecting
garbage and storing again never read from or delete anything outside the cache folder."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from r1build.cache import Cache
from r1build.events import Note
from r1build.records import CandidateRef, Decision, Origin, Result
from tests.cache.conftest import Cli
from tests.damage import wreck_index

LARGE = 40_000  # kept as a value file by diskcache


def _value_file(d: Path, key: str) -> str:
    con = sqlite3.connect(d / "cache.db")
    try:
        (filename,) = con.execute("SELECT filename FROM Cache WHERE key = ?", (key,)).fetchone()
    finally:
        con.close()
    return str(filename)


def _point_row_at(d: Path, key: str, filename: str) -> None:
    con = sqlite3.connect(d / "cache.db")
    try:
        con.execute("UPDATE Cache SET filename = ? WHERE key = ?", (filename, key))
        con.commit()
    finally:
        con.close()


@pytest.mark.parametrize("how", ["absolute", "relative"])
def test_a_row_naming_a_file_outside_the_cache_never_deletes_it(
    tmp_path: Path, run_cli: Cli, notes: list[Note], how: str
) -> None:
    d = tmp_path / "cache"
    victim = tmp_path / "precious.txt"
    victim.write_text("the user's file\n", encoding="utf-8")
    data = [os.urandom(LARGE) for _ in range(3)]
    with Cache(d) as cache:
        digests = [cache.put_blob(b) for b in data]
    named = str(victim) if how == "absolute" else "../precious.txt"
    for digest in digests:
        _point_row_at(d, f"blob/{digest}", named)

    with Cache(d) as cache:
        assert cache.get_blob(digests[0]) is None  # refused, never read from outside
        cache.put_blob(data[0])  # storing it again replaces the row (diskcache deletes the file it named)
        assert cache.get_blob(digests[0]) == data[0]
    assert victim.read_text(encoding="utf-8") == "the user's file\n"
    assert any("is not a file of the cache" in n.message and digests[0] in n.message for n in notes), notes

    code, out = run_cli("cache", "verify", "--cache-dir", str(d))
    assert code == 1 and "is not a file of the cache" in out, out
    code, out = run_cli("cache", "repair", "--cache-dir", str(d))  # deletes the bad entry, not what it names
    assert victim.exists(), out
    with Cache(d) as cache:
        _point_row_at(d, f"blob/{digests[0]}", named)
        cache.gc(size_limit=1)  # evicts everything
    assert victim.read_text(encoding="utf-8") == "the user's file\n"


def test_a_value_file_that_is_a_symbolic_link_is_not_read(tmp_path: Path, notes: list[Note], run_cli: Cli) -> None:
    d = tmp_path / "cache"
    data = os.urandom(LARGE)
    with Cache(d) as cache:
        digest = cache.put_blob(data)
    value = d / _value_file(d, f"blob/{digest}")
    outside = tmp_path / "elsewhere.val"
    value.replace(outside)  # the very bytes, so only the link gives it away
    value.symlink_to(outside)
    with Cache(d) as cache:
        assert cache.get_blob(digest) is None
    assert any("symbolic link" in n.message for n in notes), notes
    code, out = run_cli("cache", "repair", "--cache-dir", str(d))
    assert code == 0 and "symbolic link" in out and outside.exists(), out


def test_a_rebuilt_index_never_deletes_through_a_planted_folder_link(tmp_path: Path, run_cli: Cli) -> None:
    d = tmp_path / "cache"
    with Cache(d) as cache:
        digest = cache.put_blob(os.urandom(LARGE))
    first = _value_file(d, f"blob/{digest}").split("/")[0]
    outside = tmp_path / "another-cache-folder"
    (d / first).replace(outside)  # a folder of value files that verify, somewhere else
    (d / first).symlink_to(outside, target_is_directory=True)
    kept = sorted(p.relative_to(outside) for p in outside.rglob("*.val"))
    assert kept
    wreck_index(d, "random")
    code, out = run_cli("cache", "repair", "--cache-dir", str(d))
    assert code == 0, out
    assert sorted(p.relative_to(outside) for p in outside.rglob("*.val")) == kept


def test_verify_names_a_decision_that_contradicts_itself_and_repair_removes_only_it(
    tmp_path: Path, run_cli: Cli
) -> None:
    """A decision whose winner counts as validated on a GPU with no time measured: its digest verifies, but
    resolve never uses it, and verify said the cache was intact."""
    d = tmp_path / "cache"
    with Cache(d) as cache:
        source = cache.put_text("// a winner\n")
        keep = cache.put_blob(os.urandom(LARGE))
        ref = CandidateRef(source, source, Origin("generated", model="m", round=0, sample=0))
        cache.put_decision(
            Decision(
                key="c" * 64,
                kernel="k",
                arch="sm_90",
                winner=ref,
                candidates=[ref],
                results=[Result(candidate=source, arch="sm_90", status="passed", stage="evaluate", device="H200")],
                measured=True,
                device="H200",
            )
        )
    code, out = run_cli("cache", "verify", "--cache-dir", str(d))
    assert code == 1 and "decision/" + "c" * 64 in out and "validated on a GPU, but no time measured" in out, out
    code, out = run_cli("cache", "repair", "--cache-dir", str(d))
    assert code == 0, out
    with Cache(d) as cache:
        assert cache.peek("decision/" + "c" * 64) is None
        assert cache.get_blob(keep) is not None and cache.get_text(source) == "// a winner\n"
