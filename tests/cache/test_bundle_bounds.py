"""Bundles that inflate hugely (decompression bombs): import bounds every entry, the payloads' total and their
expansion over the bundle file before it writes anything, and streams large entries (never holding the bundle)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from r1build.cache import Cache, export_bundle
from r1build.cache.bundle import EXPANSION_ALLOWANCE, MAX_ENTRY_BYTES, MAX_EXPANSION
from r1build.keys import canonical_json
from tests.cache.bundle_support import contents, filled

_MIB = 1 << 20
_PEAK = """
import resource, subprocess, sys, time
start = time.monotonic()
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(f"{done.returncode} {peak} {time.monotonic() - start:.2f}")
sys.stderr.write(done.stdout + done.stderr)
"""


def bomb(path: Path, *, entries: int, size: int = MAX_ENTRY_BYTES) -> Path:
    """A real bundle (version 1, r1build.cache.bundle's layout) of ``entries`` blobs of ``size`` bytes each, all
    zeros after an 8-byte head: each deflates about a thousandfold."""
    zeros = bytes(_MIB)
    tail = [zeros] * ((size - 8) // _MIB) + [bytes((size - 8) % _MIB)]
    index = []
    with zipfile.ZipFile(path, "w") as zf:
        for i in range(entries):
            head = i.to_bytes(8, "big")
            digest = hashlib.sha256(head)
            for chunk in tail:
                digest.update(chunk)
            sha = digest.hexdigest()
            index.append({"key": f"blob/{sha}", "kind": "blob", "sha256": sha, "size": size})
            info = zipfile.ZipInfo(f"entries/{sha}", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            with zf.open(info, "w") as member:
                member.write(head)
                for chunk in tail:
                    member.write(chunk)
        doc = {"format": "r1build-bundle", "version": 1, "created": "2026-01-01T00:00:00+00:00", "entries": index}
        index_bytes = canonical_json(doc)
        zf.writestr(zipfile.ZipInfo("index.json", date_time=(1980, 1, 1, 0, 0, 0)), index_bytes)
        zf.comment = b"r1build-bundle index sha256=" + hashlib.sha256(index_bytes).hexdigest().encode()
    return path


def import_measured(bundle: Path, cache_dir: Path) -> tuple[int, int, float, str]:
    """``r1build cache import`` in a process of its own: exit code, peak RSS (bytes), seconds, its output."""
    argv = ["cache", "import", str(bundle), "--cache-dir", str(cache_dir)]
    code = f"import sys; from r1build.cli.main import main; sys.exit(main({argv!r}))"
    done = subprocess.run(
        [sys.executable, "-c", _PEAK, sys.executable, "-c", code], check=False, capture_output=True, text=True
    )
    rc, peak_kib, seconds = done.stdout.split()
    return int(rc), int(peak_kib) * 1024, float(seconds), done.stderr


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


@pytest.mark.slow
def test_a_decompression_bomb_is_refused_whole_quickly_and_in_little_memory(tmp_path: Path) -> None:
    """A 1.2 MB bundle of 18 blobs of 64 MiB of zeros took 1.39 GB of memory and 1.2 GB of disk to import."""
    path = bomb(tmp_path / "bomb.r1b", entries=18)
    assert path.stat().st_size < 2 * _MIB
    cache_dir = tmp_path / "cache"
    with filled(Cache(cache_dir)) as cache:
        before = contents(cache)
        export_bundle(cache, tmp_path / "normal.r1b")
    size_before = folder_bytes(cache_dir)
    rc, peak, seconds, out = import_measured(path, cache_dir)
    assert rc == 2, out
    assert str(path) in out and "Traceback" not in out
    assert f"{MAX_EXPANSION}" in out and "nothing was imported" in out
    assert peak < 300 * _MIB, f"peak RSS {peak / _MIB:.0f} MiB"
    assert seconds < 10
    assert folder_bytes(cache_dir) < size_before + 4 * _MIB  # nothing large written
    with Cache(cache_dir) as cache:
        assert contents(cache) == before  # nothing already cached lost
    rc, _, _, out = import_measured(tmp_path / "normal.r1b", tmp_path / "other")  # a normal bundle still imports
    assert rc == 0 and "added 11" in out, out


@pytest.mark.slow
def test_large_entries_within_the_bounds_are_streamed(tmp_path: Path) -> None:
    """Three blobs of 64 MiB (192 MiB, inside the expansion allowance): imported without holding them in memory."""
    assert 3 * MAX_ENTRY_BYTES <= EXPANSION_ALLOWANCE
    path = bomb(tmp_path / "large.r1b", entries=3)
    rc, peak, _, out = import_measured(path, tmp_path / "cache")
    assert rc == 0 and "added 3" in out, out
    assert peak < 150 * _MIB, f"peak RSS {peak / _MIB:.0f} MiB"
    with Cache(tmp_path / "cache") as cache:
        assert len(cache.entries()) == 3 and cache.audit() == []
        index = json.loads(zipfile.ZipFile(path).read("index.json"))
        assert {e["key"] for e in index["entries"]} == {e.key for e in cache.entries()}
