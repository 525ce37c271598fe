"""The cache store: verified blobs and records, corruption found where diskcache really keeps the bytes,
eviction, statistics, location, two processes at once, and the ``r1build cache`` commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import platformdirs
import pytest

from r1build.cache import Cache, resolve_cache_dir
from r1build.cli.main import main
from r1build.errors import CacheError
from r1build.events import Note
from r1build.records import CandidateRef, Decision, GateReport, Origin, Result, Timing

ROOT = Path(__file__).resolve().parents[2]
SMALL = 1500  # kept inside cache.db by diskcache (values under 32 KiB)
LARGE = 40_000  # kept as a file by diskcache


def make_decision(
    cache: Cache, key: str, kernel: str = "matmul", arch: str = "sm_90", measured: bool = True
) -> Decision:
    source = cache.put_text(f'// {kernel} {key}\nextern "C" int f() {{ return 1; }}\n')
    transcript = cache.put_text(f"transcript for {kernel} {key}")
    ref = CandidateRef(source, source, Origin("generated", model="r1", round=0, sample=2, transcript=transcript))
    timing = Timing(median_us=12.5, spread=0.02, samples=50) if measured else None
    result = Result(
        candidate=source,
        arch=arch,
        status="passed",
        stage="evaluate" if measured else "gate",
        gate=GateReport(registers=40),
        timing=timing,
        device="H200" if measured else None,
    )
    decision = Decision(
        key=key,
        kernel=kernel,
        arch=arch,
        winner=ref,
        candidates=[ref],
        results=[result],
        transcripts=[transcript],
        measured=measured,
        device="H200" if measured else None,
        toolchain="nvcc 13.0",
        created="2026-01-02T03:04:05+00:00",
    )
    cache.put_decision(decision)
    return decision


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[Cache]:
    c = Cache(tmp_path / "cache")
    yield c
    c.close()


def flip_byte_in(paths: list[Path], needle: bytes) -> Path:
    """Flip one byte in the middle of ``needle`` wherever it occurs in ``paths``; returns the file it was in."""
    found = []
    for path in paths:
        if not path.exists():
            continue
        data = bytearray(path.read_bytes())
        at = data.find(needle)
        while at >= 0:
            data[at + len(needle) // 2] ^= 0x20
            found.append(path)
            at = data.find(needle, at + 1)
        path.write_bytes(bytes(data))
    assert len(found) == 1, f"expected the bytes stored once, found them {len(found)} times"
    return found[0]


# -- round trips ----------------------------------------------------------------------------------------------
def test_blob_round_trip(cache: Cache) -> None:
    small, large = os.urandom(4096), os.urandom(256 * 1024)
    d_small, d_large = cache.put_blob(small), cache.put_blob(large)
    assert cache.put_blob(small) == d_small  # idempotent
    assert cache.get_blob(d_small) == small
    assert cache.get_blob(d_large) == large
    assert cache.get_blob("0" * 64) is None
    text = cache.put_text("héllo")
    assert cache.get_text(text) == "héllo"
    assert [e.key for e in cache.entries("blob")] == sorted(f"blob/{d}" for d in (d_small, d_large, text))
    assert {e.key: e.size for e in cache.entries()}[f"blob/{d_large}"] == len(large)
    stats = cache.stats()
    assert stats.entries["blob"] == 3
    assert stats.hits["blob"] == 3 and stats.misses["blob"] == 1
    assert stats.bytes["blob"] == 4096 + 256 * 1024 + len("héllo".encode())


def test_records_round_trip(cache: Cache) -> None:
    decision = make_decision(cache, "k1")
    assert cache.get_decision("k1") == decision
    assert cache.decisions() == [decision]
    gate = Result(candidate="v" * 64, arch="sm_80", status="compile_error", detail="error: expected ';'")
    cache.put_gate("g1", gate)
    assert cache.get_gate("g1") == gate
    cache.put_json("floors", "H200", {"bandwidth_gbs": 4800.0, "archs": ["sm_90"]})
    assert cache.get_json("floors", "H200") == {"bandwidth_gbs": 4800.0, "archs": ["sm_90"]}
    assert cache.get_decision("nope") is None and cache.get_gate("nope") is None
    assert cache.get_json("floors", "nope") is None
    assert cache.verify() == []


# -- corruption where diskcache keeps the bytes ---------------------------------------------------------------
def test_flipped_byte_in_sqlite_blob(tmp_path: Path, notes: list[Note]) -> None:
    d = tmp_path / "cache"
    data = os.urandom(SMALL)
    with Cache(d) as cache:
        digest = cache.put_blob(data)
    where = flip_byte_in([d / "cache.db", d / "cache.db-wal"], data)
    assert where.name.startswith("cache.db")  # the small blob lived inside SQLite
    assert not list(d.rglob("*.val"))
    with Cache(d) as cache:
        assert cache.verify() == [f"blob/{digest}"]
        assert [p.reason for p in cache.audit()] == ["digest mismatch"]
        assert cache.get_blob(digest) is None
        assert any(n.level == "warning" and digest in n.message for n in notes)
        assert cache.stats().corrupt["blob"] == 1
        assert cache.put_blob(data) == digest  # storing it again heals it
        assert cache.get_blob(digest) == data
        assert cache.verify() == []


def test_flipped_byte_in_file_blob(tmp_path: Path, notes: list[Note]) -> None:
    d = tmp_path / "cache"
    data = os.urandom(LARGE)
    with Cache(d) as cache:
        digest = cache.put_blob(data)
        cache.put_text("a neighbour that stays intact")
    where = flip_byte_in([*d.rglob("*.val"), d / "cache.db"], data)
    assert where.suffix == ".val"  # the large blob lived in a file of its own
    with Cache(d) as cache:
        assert cache.verify() == [f"blob/{digest}"]
        assert cache.get_blob(digest) is None
        assert [n for n in notes if n.level == "warning" and f"blob/{digest}" in n.message]
        assert cache.verify(repair=True) == [f"blob/{digest}"]
        assert cache.verify() == []
        assert [e.kind for e in cache.entries()] == ["blob"]
        assert not where.exists()


def test_missing_value_file_and_bad_decision(tmp_path: Path, notes: list[Note]) -> None:
    d = tmp_path / "cache"
    with Cache(d) as cache:
        digest = cache.put_blob(os.urandom(LARGE))
        decision = make_decision(cache, "k1")
    next(d.rglob("*.val")).unlink()
    flip_byte_in([d / "cache.db"], decision.created.encode())
    with Cache(d) as cache:
        problems = {p.key: p.reason for p in cache.audit()}
        assert problems == {f"blob/{digest}": "its value file is missing", "decision/k1": "digest mismatch"}
        assert cache.get_decision(decision.key) is None
        assert cache.stats().misses["decision"] == 1


def test_record_filed_under_another_key_is_refused(cache: Cache, notes: list[Note]) -> None:
    decision = make_decision(cache, "k1")
    with pytest.raises(ValueError, match="holds the decision for key k1"):
        cache.put_raw("decision/k2", cache.peek("decision/k1") or b"")
    with pytest.raises(ValueError, match="does not match the blob's digest"):
        cache.put_raw("blob/" + "0" * 64, b"x")
    assert cache.get_decision("k1") == decision


# -- LRU, size limit, statistics, location ---------------------------------------------------------------------
def test_inspection_does_not_refresh_lru_order(tmp_path: Path) -> None:
    with Cache(tmp_path / "cache", touch_after=0) as cache:
        digest = cache.put_blob(b"x" * 100)
        before = cache.entries()[0].used
        time.sleep(0.01)
        cache.entries()
        cache.audit()
        cache.peek(f"blob/{digest}")
        cache.stats()
        cache.decisions()
        assert cache.entries()[0].used == before
        cache.get_blob(digest)
        assert cache.entries()[0].used > before


def test_warm_reads_write_nothing(cache: Cache) -> None:
    digest = cache.put_blob(b"x" * 100)
    decision = make_decision(cache, "k1")
    before = {e.key: e.used for e in cache.entries()}
    assert cache.get_blob(digest) == b"x" * 100 and cache.get_decision("k1") == decision
    assert {e.key: e.used for e in cache.entries()} == before  # used within the last minute: not rewritten
    with Cache(cache.directory, touch_after=0) as exact:
        exact.get_blob(digest)
        assert exact.entries()[0].used > before[f"blob/{digest}"]


def test_remembered_decision_is_still_verified(tmp_path: Path, notes: list[Note]) -> None:
    d = tmp_path / "cache"
    with Cache(d) as cache:
        decision = make_decision(cache, "k1")
        assert cache.get_decision("k1") == decision
        assert cache.get_decision("k1") is cache.get_decision("k1")  # parsed once
        cache.close()
        flip_byte_in([d / "cache.db"], decision.created.encode())
        assert cache.get_decision("k1") is None  # same process, same memo: the bytes are checked first
        assert any("decision/k1" in n.message for n in notes)


def test_writes_evict_least_recently_used(tmp_path: Path) -> None:
    limit = 2 * 1024 * 1024
    with Cache(tmp_path / "cache", size_limit=limit, touch_after=0) as cache:
        blobs = [cache.put_blob(os.urandom(LARGE)) for _ in range(20)]
        time.sleep(0.01)
        assert cache.get_blob(blobs[0]) is not None  # now the most recently used of the twenty
        blobs += [cache.put_blob(os.urandom(LARGE)) for _ in range(35)]  # over the limit once: ten go
        assert cache.volume() <= limit
        assert len(cache.entries()) < len(blobs)
        assert cache.has_blob(blobs[0])
        assert not cache.has_blob(blobs[1])
        assert cache.has_blob(blobs[-1])


def test_gc_evicts_down_to_max_size(tmp_path: Path) -> None:
    with Cache(tmp_path / "cache", touch_after=0) as cache:
        blobs = [cache.put_blob(os.urandom(LARGE)) for _ in range(12)]
        for digest in blobs[6:]:
            time.sleep(0.002)
            cache.get_blob(digest)
        report = cache.gc(size_limit=400_000)
        assert report.volume <= 400_000 < report.volume_before
        assert report.size_limit == cache.size_limit == 400_000
        evicted = [d for d in blobs if not cache.has_blob(d)]
        assert evicted and evicted == blobs[: len(evicted)]  # the least recently used went first
        assert report.evicted == len(evicted)
    with Cache(tmp_path / "cache") as cache:
        assert cache.size_limit == 400_000  # the limit is kept for later runs


def test_gc_removes_orphan_value_files(tmp_path: Path) -> None:
    d = tmp_path / "cache"
    with Cache(d) as cache:
        cache.put_blob(os.urandom(LARGE))
    orphan = d / "ab" / "cd" / "0123456789abcdef0123456789ab.val"
    orphan.parent.mkdir(parents=True)
    orphan.write_bytes(b"left behind by a crash")
    with Cache(d) as cache:
        report = cache.gc()
        assert report.repaired >= 1 and report.evicted == 0 and report.corrupt == 0
        assert not orphan.exists()
        assert len(cache.entries()) == 1 and cache.verify() == []


def test_lifetime_statistics_add_up_across_processes(tmp_path: Path) -> None:
    d = tmp_path / "cache"
    with Cache(d) as cache:
        digest = cache.put_blob(b"abc")
        cache.get_blob(digest)
        cache.get_blob("1" * 64)
    with Cache(d) as cache:
        cache.get_blob(digest)
        stats = cache.stats()
        assert stats.hits["blob"] == 1 and stats.misses["blob"] == 0
        assert stats.lifetime_hits["blob"] == 2 and stats.lifetime_misses["blob"] == 1
        assert stats.rate(stats.lifetime_hits, stats.lifetime_misses) == pytest.approx(2 / 3)
    with Cache(d) as cache:
        assert cache.stats().lifetime_hits["blob"] == 2  # flushed once, not twice


def test_location(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("R1BUILD_CACHE_DIR", raising=False)
    assert resolve_cache_dir() == Path(platformdirs.user_cache_dir("r1build", appauthor=False))
    monkeypatch.setenv("R1BUILD_CACHE_DIR", str(tmp_path / "env"))
    assert resolve_cache_dir() == tmp_path / "env"
    assert resolve_cache_dir(tmp_path / "flag") == tmp_path / "flag"
    with Cache() as cache:
        assert cache.directory == tmp_path / "env"
    assert (tmp_path / "env" / "cache.db").is_file()


def test_refuses_a_directory_that_is_not_a_cache(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "notes.txt").write_text("mine")
    with pytest.raises(CacheError, match="holds no r1build cache"):
        Cache(tmp_path / "home")
    (tmp_path / "file").write_text("x")
    with pytest.raises(CacheError, match="not a directory") as info:
        Cache(tmp_path / "file")
    assert info.value.exit_code == 2  # a wrong location is the user's to fix
    assert (tmp_path / "home" / "notes.txt").read_text() == "mine"
    assert main(["cache", "stats", "--cache-dir", str(tmp_path / "home")]) == 2


# -- two processes at once ------------------------------------------------------------------------------------
WORKER = r"""
import json, os, sys, time
from r1build.cache import Cache
from r1build.records import Decision

directory, name, other, start, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
while time.time() < start:
    time.sleep(0.001)
cache = Cache(directory, timeout=30)  # both open a directory that does not exist yet at the same moment
counts = {"writes": 0, "reads": 0, "other_reads": 0, "iterations": 0}
end = time.time() + seconds
i = 0
while time.time() < end:
    small = (f"{name} {i} " * 40).encode()
    digest = cache.put_blob(small)
    cache.put_blob(b"shared by both processes")
    cache.put_decision(Decision(key=f"{name}-{i}", kernel=name, arch="sm_90", winner=None, created=str(i)))
    cache.put_json("hammer", "shared", {"writer": name, "i": i})
    counts["writes"] += 4
    if i % 4 == 0:
        big = os.urandom(40_000)
        assert cache.get_blob(cache.put_blob(big)) == big
        counts["writes"] += 1
        counts["reads"] += 1
    assert cache.get_blob(digest) == small, "own blob"
    assert cache.get_decision(f"{name}-{i}") is not None, "own decision"
    assert cache.get_json("hammer", "shared")["writer"] in (name, other), "shared document"
    counts["reads"] += 3
    cache.put_json("progress", name, i)  # after this iteration's decision
    seen = cache.get_json("progress", other)
    if seen is not None:  # whatever the other process says it wrote must be readable here
        assert cache.get_decision(f"{other}-{seen}") is not None, "other's decision"
        counts["other_reads"] += 1
    if i % 50 == 0:
        assert cache.audit() == []
    i += 1
counts["iterations"] = i
cache.close()
print(json.dumps(counts))
"""


@pytest.mark.slow
def test_two_processes_hammer_one_cache(tmp_path: Path) -> None:
    d = tmp_path / "fresh" / "cache"  # neither process finds it: both create it at the same time
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    start = time.time() + 2.0
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(d), me, other, str(start), "2.0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for me, other in (("a", "b"), ("b", "a"))
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    for proc, (_, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
    counts = [json.loads(out) for out, _ in outputs]
    for c in counts:
        assert c["iterations"] > 20 and c["other_reads"] > 0, counts
    with Cache(d) as cache:
        assert cache.verify() == []
        decisions = cache.decisions()
        assert len(decisions) == sum(c["iterations"] for c in counts)
        assert {x.kernel for x in decisions} == {"a", "b"}
        stats = cache.stats()
        assert stats.lifetime_hits["decision"] >= sum(c["iterations"] for c in counts)
        assert sum(stats.lifetime_corrupt.values()) == 0


def test_threads_share_one_cache(cache: Cache) -> None:
    from concurrent.futures import ThreadPoolExecutor

    def work(n: int) -> bool:
        data = f"thread {n}".encode() * 100
        return cache.get_blob(cache.put_blob(data)) == data

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(work, range(200)))
    assert cache.stats().hits["blob"] == 200 and cache.verify() == []


# -- the CLI --------------------------------------------------------------------------------------------------
Cli = Callable[..., tuple[int, str, str]]


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Cli:
    """``r1build`` through :func:`r1build.cli.main.main`."""
    from r1build.cli import main as cli_main

    monkeypatch.setenv("COLUMNS", "250")

    def run(*argv: str) -> tuple[int, str, str]:
        code = cli_main.main(list(argv))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


def test_cli_stats_and_ls(tmp_path: Path, cli: Cli) -> None:
    d = tmp_path / "cache"
    with Cache(d) as cache:
        decision = make_decision(cache, "k" * 64)
        cache.put_json("floors", "H200", {"gbs": 1})
        cache.get_decision(decision.key)
    code, out, _ = cli("cache", "stats", "--json", "--cache-dir", str(d))
    assert code == 0
    stats = json.loads(out)
    assert stats["entries"] == {"blob": 2, "decision": 1, "gate": 0, "json": 1}
    assert stats["lifetime_hits"]["decision"] == 1 and stats["lifetime_hit_rate"] == 1.0
    code, out, _ = cli("cache", "stats", "--cache-dir", str(d))
    assert code == 0 and "hit rate: 100.0%" in out
    code, out, _ = cli("cache", "ls", "--kind", "decision", "--json", "--cache-dir", str(d))
    assert code == 0
    (row,) = json.loads(out)
    assert (row["kernel"], row["arch"], row["provenance"], row["created"]) == (
        "matmul",
        "sm_90",
        "generated",
        "2026-01-02T03:04:05+00:00",
    )
    assert row["checks"] is None  # judged before versions were kept
    code, out, _ = cli("cache", "ls", "--kind", "decision", "--cache-dir", str(d))
    assert code == 0 and "matmul" in out and "generated" in out and "2026-01-02" in out
    assert "v0 (stale: now v" in out  # measured by checks older than these
    code, out, _ = cli("cache", "ls", "--cache-dir", str(d))
    assert code == 0 and "4 entries" in out and "json/floors/H200" in out


def test_cli_uses_environment_cache_dir(tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("R1BUILD_CACHE_DIR", str(tmp_path / "env"))
    with Cache() as cache:
        cache.put_text("x")
    code, out, _ = cli("cache", "ls", "--json")
    assert code == 0 and len(json.loads(out)) == 1


def test_cli_verify_exit_codes(tmp_path: Path, cli: Cli) -> None:
    d = tmp_path / "cache"
    data = os.urandom(SMALL)
    with Cache(d) as cache:
        digest = cache.put_blob(data)
        cache.put_text("fine")
    assert cli("cache", "verify", "--cache-dir", str(d))[0] == 0
    flip_byte_in([d / "cache.db"], data)
    code, out, _ = cli("cache", "verify", "--cache-dir", str(d))
    assert code == 1 and f"blob/{digest}" in out and "digest mismatch" in out
    code, out, _ = cli("cache", "verify", "--repair", "--cache-dir", str(d))
    assert code == 1 and f"blob/{digest}" in out and "deleted 1 of 2" in out
    code, out, _ = cli("cache", "verify", "--cache-dir", str(d))
    assert code == 0 and "1 entries verified" in out


def test_cli_gc_and_bad_arguments(tmp_path: Path, cli: Cli) -> None:
    d = tmp_path / "cache"
    with Cache(d) as cache:
        for _ in range(8):
            cache.put_blob(os.urandom(LARGE))
    code, out, _ = cli("cache", "gc", "--max-size", "200K", "--cache-dir", str(d))
    assert code == 0 and "limit 200.0 KiB" in out
    with Cache(d) as cache:
        assert cache.volume() <= 200 * 1024 and len(cache.entries()) < 8
    assert cli("cache", "gc", "--max-size", "2G", "--cache-dir", str(d))[0] == 0
    code, _, err = cli("cache", "gc", "--max-size", "lots", "--cache-dir", str(d))
    assert code == 2 and "not a size" in err
    assert cli("cache", "frobnicate")[0] == 2
    assert cli("cache", "ls", "--kind", "nope", "--cache-dir", str(d))[0] == 2


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("2G", 2 * 1024**3),
        ("500M", 500 * 1024**2),
        ("1.5GiB", 3 * 1024**3 // 2),
        ("64k", 65536),
        ("4096", 4096),
        ("10MB", 10 * 1024**2),
    ],
)
def test_parse_size(text: str, size: int) -> None:
    from r1build.cli.cache_cmd import parse_size

    assert parse_size(text) == size


def test_full_cli_has_the_cache_command(capsys: pytest.CaptureFixture[str]) -> None:
    from r1build.cli import main as cli_main

    with pytest.raises(SystemExit) as info:
        cli_main.main(["cache", "--help"])
    assert info.value.code == 0
    assert "export" in capsys.readouterr().out


@pytest.mark.slow
def test_many_opens_of_one_fresh_directory_at_once(tmp_path: Path) -> None:
    """Builds that start together all open a cache directory nobody has created yet: none may mistake the
    half-made cache of another for a folder of foreign files."""
    import threading

    for round_ in range(25):
        d = tmp_path / f"fresh-{round_}"
        barrier = threading.Barrier(6)
        errors: list[BaseException] = []

        def open_it(d: Path = d, barrier: threading.Barrier = barrier, errors: list[BaseException] = errors) -> None:
            barrier.wait()
            try:
                Cache(d).close()
            except BaseException as exc:  # collected and asserted below
                errors.append(exc)

        threads = [threading.Thread(target=open_it) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
