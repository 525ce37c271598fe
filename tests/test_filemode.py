"""The lock and bundles r1build writes get the mode of any file the user writes (0666 less the umask), not the
0600 of the temporary file they are renamed from."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from r1build.cache import Cache, export_bundle
from r1build.filemode import umask
from r1build.lock import read_lock, write_lock

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(params=[0o022, 0o002, 0o077])
def user_umask(request: pytest.FixtureRequest) -> Iterator[int]:
    mask: int = request.param
    old = os.umask(mask)
    try:
        yield mask
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_umask_is_read_without_changing_it(user_umask: int) -> None:
    assert umask() == user_umask
    assert umask() == user_umask


def test_the_lock_is_written_with_the_users_umask(user_umask: int, tmp_path: Path) -> None:
    lock = read_lock(ROOT / "kernels.lock")
    assert lock is not None
    path = tmp_path / "kernels.lock"
    assert write_lock(path, lock)
    assert _mode(path) == 0o666 & ~user_umask
    assert not list(tmp_path.glob(".kernels.lock.*"))


def test_a_bundle_is_written_with_the_users_umask(user_umask: int, tmp_path: Path) -> None:
    with Cache(tmp_path / "cache") as cache:
        cache.put_text("__global__ void k() {}\n")
        summary = export_bundle(cache, tmp_path / "team.r1b")
    assert summary.total == 1
    assert _mode(tmp_path / "team.r1b") == 0o666 & ~user_umask
