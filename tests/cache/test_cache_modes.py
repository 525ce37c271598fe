"""The cache folder holds transcripts, prompts and compiler logs: r1build creates it private (folders 0700, files
0600, whatever the umask), and follows the mode of a folder the user made to share it (``mkdir -m 2770``)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from r1build.cache import Cache, export_bundle
from r1build.cache.claim import claim
from tests.cache.bundle_support import filled
from tests.cache.conftest import Cli


@pytest.fixture
def loose_umask() -> Iterator[None]:
    """The usual umask, under which a plain ``mkdir`` or ``open`` makes folders 0755 and files 0644."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def modes(folder: Path) -> dict[str, int]:
    """The permission bits of ``folder`` and of everything under it, by path relative to it."""
    found = {".": stat.S_IMODE(folder.stat().st_mode)}
    for path in folder.rglob("*"):
        found[path.relative_to(folder).as_posix()] = stat.S_IMODE(path.lstat().st_mode)
    return found


def use(cache_dir: Path, tmp_path: Path, run_cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fill ``cache_dir`` through real commands: an import (index, WAL, value files in their two folders), the
    nvcc version memo, a claim."""
    bundle = tmp_path / "b.r1b"
    with filled(Cache(tmp_path / "source")) as source:
        export_bundle(source, bundle)
    monkeypatch.setenv("R1BUILD_CACHE_DIR", str(cache_dir))
    monkeypatch.chdir(tmp_path)
    code, out = run_cli("cache", "import", str(bundle))
    assert code == 0, out
    with Cache(cache_dir) as cache, claim(cache.directory, "k" * 64, what="a kernel"):
        from r1build.toolchain.nvcc import _remember

        _remember("some nvcc", "nvcc: release 13.0")
        held = modes(cache_dir)
    assert "cache.db" in held and "cache.db-wal" in held and "nvcc-versions.json" in held
    assert any(name.endswith(".val") for name in held) and any(name.startswith("claims/") for name in held)


def test_a_new_cache_is_private(
    tmp_path: Path, run_cli: Cli, monkeypatch: pytest.MonkeyPatch, loose_umask: None
) -> None:
    cache_dir = tmp_path / "new" / "cache"
    use(cache_dir, tmp_path, run_cli, monkeypatch)
    loose = {name: oct(mode) for name, mode in modes(cache_dir).items() if mode & 0o077}
    assert loose == {}
    assert all(mode & 0o600 == 0o600 for mode in modes(cache_dir).values())


def test_a_folder_made_to_share_is_followed(
    tmp_path: Path, run_cli: Cli, monkeypatch: pytest.MonkeyPatch, loose_umask: None
) -> None:
    cache_dir = tmp_path / "team"
    cache_dir.mkdir()
    cache_dir.chmod(0o2770)  # the team's folder: its group reads and writes, others nothing
    use(cache_dir, tmp_path, run_cli, monkeypatch)
    for name, mode in modes(cache_dir).items():
        is_dir = (cache_dir / name).is_dir()
        assert mode & 0o007 == 0, name
        assert mode & 0o070 == (0o070 if is_dir else 0o060), f"{name}: {oct(mode)}"
