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


def test_write_atomically_gives_the_user_mode_and_leaves_no_temporary_file(tmp_path: Path, user_umask: int) -> None:
    from r1build.filemode import write_atomically

    target = tmp_path / "out.json"
    write_atomically(target, "one\n")
    write_atomically(target, b"two\n")
    assert target.read_bytes() == b"two\n" and _mode(target) == 0o666 & ~user_umask
    (tmp_path / "folder").mkdir()
    with pytest.raises(OSError):  # the rename cannot replace a folder: the error is the caller's, the temp file gone
        write_atomically(tmp_path / "folder", "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder", "out.json"]


def test_threads_writing_one_path_never_leave_it_torn(tmp_path: Path) -> None:
    # each writer has a temporary file of its own (a name per process, as before, let two threads write into the
    # same temporary file and rename each other's half-written bytes into place)
    import threading

    from r1build.filemode import write_atomically

    target = tmp_path / "memo.json"
    payloads = [bytes([k]) * (1 << 20) for k in range(6)]
    errors: list[BaseException] = []
    seen: set[bytes] = set()
    done = threading.Event()

    def writer(data: bytes) -> None:
        try:
            for _ in range(15):
                write_atomically(target, data)
        except BaseException as exc:
            errors.append(exc)

    def reader() -> None:
        while not done.is_set():
            if target.exists():
                data = target.read_bytes()
                seen.add(data if data in payloads else b"torn")

    threads = [threading.Thread(target=writer, args=(p,)) for p in payloads]
    watch = threading.Thread(target=reader)
    watch.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    watch.join()
    assert not errors and b"torn" not in seen and target.read_bytes() in payloads
    assert [p.name for p in tmp_path.iterdir()] == ["memo.json"]
