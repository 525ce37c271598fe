"""A cache that is damaged, read-only, missing or mistyped: it costs a warning, never a build, and the cache
commands say what is wrong and repair what can be repaired. A real killed import leaves nothing behind."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from r1build.cache import Cache, export_bundle, open_usable
from r1build.errors import CacheError, CacheLocationError
from r1build.events import Note
from r1build.keys import digest_bytes
from r1build.records import CandidateRef, Decision, Origin, Result
from tests.cache.conftest import Cli
from tests.damage import read_only_tree, wreck_index

pytestmark = pytest.mark.slow  # seconds a test: nvcc, resolves, processes or servers

LARGE = 40_000  # kept as a file by diskcache
SMALL = 1500  # kept inside cache.db


def _warnings(notes: list[Note]) -> list[str]:
    return [n.message for n in notes if n.level == "warning"]


def _fill(d: Path) -> tuple[list[str], list[str], Decision]:
    """A cache with large blobs (value files), small blobs (inside cache.db) and a large decision."""
    with Cache(d) as cache:
        large = [cache.put_blob(os.urandom(LARGE)) for _ in range(3)]
        small = [cache.put_blob(os.urandom(SMALL)) for _ in range(3)]
        source = cache.put_text("// a winner\n")
        ref = CandidateRef(source, source, Origin("baseline", path="k.cu"))
        padding = [
            CandidateRef(
                digest_bytes(str(i).encode()),
                digest_bytes(str(i).encode()),
                Origin("generated", model="r1", round=0, sample=i),
            )
            for i in range(300)
        ]
        decision = Decision(
            key="k" * 64,
            kernel="k",
            arch="sm_90",
            winner=ref,
            candidates=[ref, *padding],
            results=[Result(candidate=source, arch="sm_90", status="passed")],
            transcripts=[],
            measured=False,
            device=None,
            toolchain="nvcc 13.0",
            created="2026-01-02T03:04:05+00:00",
        )
        cache.put_decision(decision)
    return large, small, decision


# -- damaged index --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["random", "truncated"])
def test_a_damaged_index_costs_a_run_one_warning_and_loses_nothing(tmp_path: Path, notes: list[Note], how: str) -> None:
    d = tmp_path / "cache"
    large, small, decision = _fill(d)
    left = wreck_index(d, how)  # type: ignore[arg-type]
    with open_usable(d) as cache:
        for digest in [*large, *small]:
            cache.get_blob(digest)  # a hit or a miss, never an error
        cache.get_decision(decision.key)
        digest = cache.put_text("stored during the run")
        cache.get_text(digest)
        assert cache.degraded is not None
        scratch = cache._scratch
    assert len(_warnings(notes)) == 1, notes
    assert scratch is None or not scratch.exists()
    assert (d / "cache.db").read_bytes() == left  # the damaged store is left for repair, untouched


def test_repair_rebuilds_a_random_bytes_index_from_the_value_files(tmp_path: Path, run_cli: Cli) -> None:
    d = tmp_path / "cache"
    large, _small, decision = _fill(d)
    wreck_index(d, "random")
    code, out = run_cli("cache", "verify", "--cache-dir", str(d))
    assert code == 1 and "damaged" in out and "cache repair" in out
    code, out = run_cli("cache", "gc", "--cache-dir", str(d))
    assert code == 1 and "cache repair" in out

    code, out = run_cli("cache", "repair", "--cache-dir", str(d))
    assert code == 0, out
    assert "moved it aside to" in out and "kept 3 blobs, 1 decision" in out, out
    (aside,) = d.glob("cache.db.damaged-*[0-9Z]")
    assert aside.stat().st_size > 0
    with Cache(d, create=False) as cache:
        for digest in large:
            assert cache.get_blob(digest) is not None
        assert cache.get_decision(decision.key) == decision
    code, out = run_cli("cache", "verify", "--cache-dir", str(d))
    assert code == 0 and "all intact" in out
    # no value file is left that the new index does not name
    with Cache(d) as cache:
        assert cache.gc().repaired == 0


def test_verify_repair_rebuilds_a_truncated_index(tmp_path: Path, run_cli: Cli) -> None:
    d = tmp_path / "cache"
    large, _, _ = _fill(d)
    wreck_index(d, "truncated")
    code, out = run_cli("cache", "verify", "--repair", "--cache-dir", str(d))
    assert code == 1 and "rebuilt the index" in out, out
    code, out = run_cli("cache", "verify", "--cache-dir", str(d))
    assert code == 0, out
    with Cache(d) as cache:
        assert all(cache.get_blob(digest) is not None for digest in large)


def test_repair_of_a_sound_index_deletes_only_bad_entries(tmp_path: Path, run_cli: Cli) -> None:
    d = tmp_path / "cache"
    large, small, _ = _fill(d)
    victim = next(p for p in d.rglob("*.val") if digest_bytes(p.read_bytes()[65:]) == large[0])
    data = bytearray(victim.read_bytes())
    data[-1] ^= 1
    victim.write_bytes(bytes(data))
    code, out = run_cli("cache", "repair", "--cache-dir", str(d))
    assert code == 0 and "index sound; deleted 1 of" in out, out
    with Cache(d) as cache:
        assert [cache.get_blob(x) is not None for x in large] == [False, True, True]
        assert all(cache.get_blob(x) is not None for x in small)


@pytest.mark.heavy  # every project command in a process of its own: 12 s
def test_project_commands_run_with_a_damaged_cache(tmp_path: Path) -> None:
    """Each command in a process of its own, as a user runs them."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    project = tmp_path / "tiny"
    shutil.copytree(Path(__file__).resolve().parents[1] / "packages" / "tiny", project)
    d = tmp_path / "cache"
    where = ["-m", str(project), "--cache-dir", str(d)]

    def r1build(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "r1build.cli.main", *argv, *where],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    assert r1build("lock", "--offline").returncode == 0
    assert r1build("vendor").returncode == 0
    wreck_index(d, "random")
    for command in (["status"], ["resolve", "--locked", "--offline"], ["check", "--locked"]):
        proc = r1build(*command)
        assert proc.returncode == 0, (command, proc.stdout, proc.stderr)
        assert proc.stderr.count("damaged") == 1, (command, proc.stderr)
        assert "Traceback" not in proc.stderr


# -- read-only, missing, mistyped -----------------------------------------------------------------------------
def test_a_read_only_cache_is_read_and_never_written(tmp_path: Path, notes: list[Note], run_cli: Cli) -> None:
    d = tmp_path / "cache"
    large, small, decision = _fill(d)
    with read_only_tree(d):
        with open_usable(d) as cache:
            assert cache.read_only
            assert all(cache.get_blob(x) is not None for x in [*large, *small])
            assert cache.get_decision(decision.key) == decision
            cache.put_text("cannot be stored")  # skipped, no error
            with ThreadPoolExecutor(4) as pool:  # each thread reads through its own read-only connection
                assert all(pool.map(lambda x: cache.get_blob(x) is not None, large * 4))
            with pytest.raises(CacheError, match="read-only"):
                cache.gc()
        assert len(_warnings(notes)) == 1, notes
        code, out = run_cli("cache", "verify", "--cache-dir", str(d))
        assert code == 0 and "all intact" in out, out
        code, out = run_cli("cache", "gc", "--cache-dir", str(d))
        assert code == 1 and "read-only" in out
        code, out = run_cli("cache", "repair", "--cache-dir", str(d))
        assert code == 1 and "read-only" in out


def test_a_cache_that_cannot_be_created_is_replaced_for_the_run(tmp_path: Path, notes: list[Note]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with open_usable(blocker / "cache") as cache:
        assert cache.degraded is not None and cache.get_text(cache.put_text("x")) == "x"
    assert len(_warnings(notes)) == 1 and "cannot create" in _warnings(notes)[0]
    assert blocker.read_text() == "not a folder"


@pytest.mark.parametrize("command", ["stats", "ls", "verify", "gc", "repair", "export"])
def test_cache_commands_on_a_path_without_a_cache_say_so(tmp_path: Path, run_cli: Cli, command: str) -> None:
    typo = tmp_path / "cahce"
    extra = [str(tmp_path / "out.r1b")] if command == "export" else []
    code, out = run_cli("cache", command, *extra, "--cache-dir", str(typo))
    assert code == 2 and "holds no r1build cache" in out and "mistyped" in out, out
    assert not typo.exists()
    with pytest.raises(CacheLocationError):
        Cache(typo, create=False)


# -- a killed import ------------------------------------------------------------------------------------------
def test_a_killed_import_leaves_no_orphans_after_the_next_open(tmp_path: Path, notes: list[Note]) -> None:
    source = tmp_path / "source"
    with Cache(source) as cache:
        for _ in range(60):
            cache.put_blob(os.urandom(2 * 1024 * 1024))
        export_bundle(cache, tmp_path / "big.r1b")
    target = tmp_path / "target"
    with Cache(target) as cache:
        kept = cache.put_blob(os.urandom(LARGE))
    before = {p for p in target.rglob("*.val")}

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "r1build.cli.main",
            "cache",
            "import",
            str(tmp_path / "big.r1b"),
            "--cache-dir",
            str(target),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    pattern = f"*.p{proc.pid}.val"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None and len(list(target.rglob(pattern))) < 3:
        time.sleep(0.002)
    assert proc.poll() is None, "the import ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    orphans = list(target.rglob(pattern))
    assert len(orphans) >= 3  # what the killed process left behind

    with Cache(target) as cache:
        assert {e.key for e in cache.entries()} == {f"blob/{kept}"}  # the import's transaction rolled back
        assert cache.get_blob(kept) is not None
    assert not list(target.rglob(pattern))
    assert {p for p in target.rglob("*.val")} == before
    assert any("interrupted cache import" in n.message for n in notes)


def test_odd_process_ids_in_the_index_or_beside_a_bundle_are_left_alone(tmp_path: Path, run_cli: Cli) -> None:
    """An import in progress is marked ``import/<pid>`` in the index, an export's temporary file
    ``.<name>.p<pid>.*.tmp``; each is swept once its process is gone. A pid no process can have (20 digits:
    ``os.kill`` raised OverflowError) or in digits ``int`` refuses (``'²'``, which ``str.isdigit`` takes) ended every
    command that opened the cache, or `cache export`, in a traceback. Such marks are no process of ours: left."""
    d = tmp_path / "cache"
    _, small, _ = _fill(d)
    con = sqlite3.connect(d / "cache.db")
    con.executemany("INSERT INTO R1Meta VALUES (?, 1.0)", [("import/99999999999999999999",), ("import/\u00b2",)])
    con.commit()
    con.close()
    out = tmp_path / "out"
    out.mkdir()
    odd = [out / ".team.r1b.p99999999999999999999.x.tmp", out / ".team.r1b.p\u00b2\u00b3.x.tmp"]
    for path in odd:
        path.write_bytes(b"")
    for argv in (["cache", "stats"], ["cache", "verify"], ["cache", "export", str(out / "team.r1b")]):
        code, output = run_cli(*argv, "--cache-dir", str(d))
        assert code == 0 and "Traceback" not in output, output
    assert all(path.exists() for path in odd)
    with Cache(d) as cache:
        assert all(cache.get_blob(digest) is not None for digest in small)


def test_lifetime_counts_damaged_into_text_count_as_none(tmp_path: Path, run_cli: Cli) -> None:
    """``cache stats`` adds up the lifetime hit and miss counts kept in the index: one edited into text (SQLite
    keeps 'x' in an INTEGER column) ended it with a ValueError traceback."""
    d = tmp_path / "cache"
    _fill(d)
    con = sqlite3.connect(d / "cache.db")
    con.executemany("INSERT OR REPLACE INTO R1Stats VALUES (?, ?)", [("hit/blob", "x"), ("miss/decision", 2)])
    con.commit()
    con.close()
    code, output = run_cli("cache", "stats", "--cache-dir", str(d), "--json")
    assert code == 0 and "Traceback" not in output, output
    doc = json.loads(output)
    assert doc["lifetime_misses"]["decision"] >= 2 and doc["lifetime_hits"]["blob"] < 10, doc


def test_a_cache_owned_by_another_user_is_read(tmp_path: Path) -> None:
    """The shared cache of the issue: owned by one user, read by another (here: root's cache, read by nobody)."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv to run a reader as another user (the permission test covers others)")
    shared = Path(tempfile.mkdtemp(prefix="r1build-shared-"))
    try:
        shared.chmod(0o755)
        d = shared / "cache"
        large, small, _ = _fill(d)
        for path in [d, *d.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        code = (
            "import sys\n"
            "from r1build.cache import open_usable\n"
            "with open_usable(sys.argv[1]) as cache:\n"
            "    assert cache.read_only, cache.degraded\n"
            "    found = [cache.get_blob(d) is not None for d in sys.argv[2:]]\n"
            "    cache.put_text('not stored')\n"
            "print(sum(found), len(found))\n"
        )
        proc = subprocess.run(
            [
                setpriv,
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                sys.executable,
                "-c",
                code,
                str(d),
                *large,
                *small,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env={**os.environ, "HOME": str(shared), "PYTHONDONTWRITEBYTECODE": "1"},
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == ["6", "6"]
        assert proc.stderr.count("read-only") <= 1
        with Cache(d) as cache:  # the owner's cache is as it was
            assert len(cache.entries()) == 8
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_a_killed_export_leaves_its_temporary_file_only_until_the_next_export(
    tmp_path: Path, notes: list[Note]
) -> None:
    d = tmp_path / "cache"
    with Cache(d) as cache:
        for _ in range(40):
            cache.put_blob(os.urandom(2 * 1024 * 1024))
    target = tmp_path / "out" / "team.r1b"
    target.parent.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "r1build.cli.main", "cache", "export", str(target), "--cache-dir", str(d)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    pattern = f".team.r1b.p{proc.pid}.*.tmp"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None and not list(target.parent.glob(pattern)):
        time.sleep(0.002)
    assert proc.poll() is None, "the export ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert list(target.parent.glob(pattern)) and not target.exists()

    with Cache(d) as cache:
        export_bundle(cache, target)
    assert sorted(p.name for p in target.parent.iterdir()) == ["team.r1b"]
    assert any("interrupted export" in n.message for n in notes)


def test_a_value_file_replaced_by_a_fifo_is_unreadable_at_once(
    tmp_path: Path, notes: list[Note], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A FIFO where a value file was (planted, or a tool's mistake) must never hold a read until someone writes to
    it (a build would hang): found before the read, it is an unreadable entry that `cache verify` names; swapped
    in between that look and the open, the open does not wait and the read refuses it."""
    from r1build.cache import rows

    with Cache(tmp_path / "c") as cache:
        digest = cache.put_blob(os.urandom(LARGE))
    (value,) = [p for p in (tmp_path / "c").rglob("*.val")]
    value.unlink()
    os.mkfifo(value)
    name = str(value.relative_to(tmp_path / "c"))
    with ThreadPoolExecutor(2) as pool:
        try:
            with Cache(tmp_path / "c") as cache:  # another process's read: nothing of it remembered
                assert pool.submit(cache.get_blob, digest).result(timeout=10) is None
                assert any("not a plain file" in b.reason for b in cache.audit())
            monkeypatch.setattr(rows, "value_file_problem", lambda *_: None)  # the swap came after the look
            found = pool.submit(rows.read_value_file, tmp_path / "c", name).result(timeout=10)
            assert found == f"its value file {name} is not a plain file"
        finally:
            for _ in range(2):  # (before the fix: let blocked reads go, so the test fails instead of hanging)
                with contextlib.suppress(OSError):
                    os.close(os.open(value, os.O_WRONLY | os.O_NONBLOCK))


def test_a_cache_of_another_layout_answers_no_stored_values(tmp_path: Path) -> None:
    """The warm replay reads stored values this way: a damaged layout row (every other command refuses that cache)
    reads as no cache, so nothing is replayed from it."""
    from r1build.cache import Cache, stored_values

    with Cache(tmp_path / "c") as cache:
        digest = cache.put_text("some source\n")
    assert stored_values(tmp_path / "c", [f"text/{digest}"]) is not None
    con = sqlite3.connect(tmp_path / "c" / "cache.db")
    con.execute("UPDATE R1Meta SET value = 'garbage' WHERE name = 'format'")
    con.commit()
    con.close()
    assert stored_values(tmp_path / "c", [f"text/{digest}"]) is None


@pytest.mark.parametrize("command", [["ls"], ["verify"], ["repair"]])
def test_an_index_that_is_a_folder_is_named_as_such(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    from r1build.cli.main import main

    (tmp_path / "c" / "cache.db").mkdir(parents=True)
    assert main(["cache", *command, "--cache-dir", str(tmp_path / "c")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{tmp_path / 'c' / 'cache.db'} is there but is no file" in err, err


@pytest.mark.parametrize(
    "damage",
    [
        "UPDATE Cache SET access_time = 'x', store_time = 'soon'",
        "UPDATE Cache SET size = NULL",
        "UPDATE Cache SET size = 'big', access_time = X'00ff'",
        "UPDATE Cache SET mode = 'raw'",
    ],
)
def test_rows_whose_numbers_were_edited_into_text_cost_nothing(tmp_path: Path, run_cli: Cli, damage: str) -> None:
    """A row's times and size are hints (eviction order, sizes shown) and its mode says where its bytes are: one
    edited into text or nothing (SQLite keeps 'x' in an INTEGER column) ended status, cache ls, verify and repair
    with a ValueError traceback. Reads still verify every value's digest."""
    d = tmp_path / "cache"
    large, small, _ = _fill(d)
    con = sqlite3.connect(d / "cache.db")
    con.execute(damage)
    con.commit()
    con.close()
    for argv in (("cache", "ls"), ("cache", "stats"), ("cache", "verify"), ("cache", "gc", "--max-size", "10MB")):
        code, output = run_cli(*argv, "--cache-dir", str(d))
        assert code in (0, 1) and "Traceback" not in output, (argv, output)
    if "mode" not in damage:  # (a row whose mode is text no longer says where its bytes are: a miss)
        with Cache(d) as cache:
            assert all(cache.get_blob(digest) is not None for digest in [*small, *large])
    code, output = run_cli("cache", "repair", "--cache-dir", str(d))
    assert code in (0, 1) and "Traceback" not in output, output
    code, output = run_cli("cache", "verify", "--cache-dir", str(d))
    assert code == 0, output
