"""What a remote cache costs a run that needs little or nothing of it, against real servers on 127.0.0.1 that
count what they are asked: a warm locked run asks nothing (and is still recorded for the warm path), a miss is
asked once per run, and a remote that accepts connections and never answers holds up no local work."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from r1build.trust.signing import KeyPair
from tests.cache.remote.remote_servers import FaultServer
from tests.cache.remote.remote_support import measured_root, root_project, tiny_project

pytestmark = pytest.mark.slow  # nvcc, resolves in processes of their own, servers

NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


def _cli(project: Path, cache_dir: Path, *args: str, url: str | None = None) -> tuple[int, str, set[str], float]:
    """``r1build ARGS -m project --cache-dir cache_dir [--remote-cache url]`` in a process of its own, as a user
    runs it: exit code, its output, the modules it imported (the full path ran where the manifest loader is among
    them), seconds."""
    argv = [*args, "-m", str(project), "--cache-dir", str(cache_dir)]
    if url is not None:
        argv += ["--remote-cache", url]
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "r1build.cli.main", *argv],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        cwd=project,
        check=False,
    )
    elapsed = time.monotonic() - t0
    imported = {line.rpartition("|")[2].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    err = "\n".join(line for line in proc.stderr.splitlines() if not line.startswith("import time:"))
    return proc.returncode, proc.stdout + err, imported, elapsed


@pytest.mark.heavy  # 15 s
def test_a_warm_locked_run_asks_the_remote_nothing_and_replays(team_key: KeyPair, tmp_path: Path) -> None:
    """The root manifest, its lock and a warm local cache: half its entries were chosen by the gate alone (no
    decision anywhere). Before, each of those was asked of the remote on every run (6 GETs) and, having missed,
    the run was never recorded for the warm path."""
    project = root_project(tmp_path / "root", team_key.public.line)
    measured_root(project, tmp_path / "cache")
    with FaultServer(lambda _: NOT_FOUND) as server:
        url = f"http://127.0.0.1:{server.port}/team"
        code, out, imported, _ = _cli(project, tmp_path / "cache", "resolve", "--locked", "--no-gpu", url=url)
        assert code == 0 and "r1build.manifest.load" in imported, out
        assert server.requests == []
        # nothing to ask, so nothing to ask with: no HTTP client, socket or IDNA codec (~12 ms of the full path)
        assert not imported & {"http.client", "ssl", "socket", "encodings.idna"}, imported
        code, again, imported, _ = _cli(project, tmp_path / "cache", "resolve", "--locked", "--no-gpu", url=url)
        assert code == 0 and again == out
        assert "r1build.manifest.load" not in imported, "the second run did not take the warm path"
        assert server.requests == []


def test_a_miss_is_asked_of_the_remote_once_per_run(team_key: KeyPair, tmp_path: Path) -> None:
    """A cold resolve of tiny, no lock: its decision is looked up, then looked up again where the work is done
    (one stored meanwhile by another process is used); the remote said it has none the first time."""
    project = tiny_project(tmp_path / "tiny", team_key.public.line)
    (project / "kernels.lock").unlink(missing_ok=True)
    with FaultServer(lambda _: NOT_FOUND) as server:
        url = f"http://127.0.0.1:{server.port}/team"
        code, out, _, _ = _cli(project, tmp_path / "cache", "resolve", "--no-gpu", "--offline", url=url)
        assert code == 0, out
        asked = Counter(server.requests)
    assert asked, "the cold run asked the remote nothing"
    assert [line for line, n in asked.items() if n > 1] == []


class _BlackHole:
    """A socket on 127.0.0.1 that accepts every connection and never answers: each connection's arrival time
    (wall clock) is noted. A context manager."""

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self._sock.settimeout(0.1)
        self.port = int(self._sock.getsockname()[1])
        self.arrivals: list[float] = []
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            self.arrivals.append(time.time())
            self._held.append(conn)

    def __enter__(self) -> _BlackHole:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        for conn in self._held:
            conn.close()
        self._sock.close()


TIMEOUT_S = 15
"""The remote's timeout in these runs: long enough that the load of a 2-core CI machine, which stretches the first
verdict by up to 6.4 s in one run and not the other, stays well inside half of it (at 10 s it failed once so)."""


@pytest.fixture
def cold_root(team_key: KeyPair, tmp_path: Path) -> Iterator[Path]:
    """The root manifest and its lock with a ``timeout-s`` of :data:`TIMEOUT_S`, for caches that start empty
    (every locked winner gated by nvcc: seconds of local work)."""
    project = root_project(tmp_path / "root", team_key.public.line)
    toml = project / "kernels.toml"
    toml.write_text(toml.read_text(encoding="utf-8") + f"timeout-s = {TIMEOUT_S}\n", encoding="utf-8")
    yield project


def _gate_store_times(cache_dir: Path) -> list[float]:
    """When each static-gate verdict was stored in the cache (its index's own ``store_time``, wall clock)."""
    with sqlite3.connect(cache_dir / "cache.db") as db:
        return sorted(t for (t,) in db.execute("SELECT store_time FROM Cache WHERE key LIKE 'gate/%'"))


@pytest.mark.heavy  # a cold resolve of the root beside a remote that never answers: 27 s
def test_a_remote_that_never_answers_holds_up_no_local_work(cold_root: Path, tmp_path: Path) -> None:
    """A cold resolve (the gate compiles every locked winner) with a remote that accepts and never answers:
    before, its first request held the run for the whole timeout and the compiles began after it; now they run
    while it waits (the first verdict is stored about as soon as without it), and it costs its timeout once,
    in parallel."""
    args = ("resolve", "--no-gpu", "--offline")
    began = time.time()
    code, out, _, without = _cli(cold_root, tmp_path / "c0", *args)
    first_without = _gate_store_times(tmp_path / "c0")[0] - began
    assert code == 0, out
    with _BlackHole() as hole:
        began = time.time()
        code, out, _, elapsed = _cli(cold_root, tmp_path / "c1", *args, url=f"http://127.0.0.1:{hole.port}/team")
    assert code == 0, out
    warnings = [line for line in out.splitlines() if line.startswith("warning:") and "remote cache" in line]
    assert len(warnings) == 1 and f"no answer within {TIMEOUT_S} s" in warnings[0], out
    assert hole.arrivals, "the remote was never asked"
    stored = _gate_store_times(tmp_path / "c1")
    assert len(stored) == 12
    # local work went on while the remote's first request hung: the first verdict is stored about as soon as in the
    # run without the remote, not a whole timeout later (the timeout is long so that the machine's load, which
    # stretches compiles in both runs, stays well inside half of it)
    first_verdict = _gate_store_times(tmp_path / "c1")[0] - began
    late = first_verdict - first_without
    assert late < TIMEOUT_S / 2, f"the first verdict came {late:.1f} s later than without the remote"
    # the run waited for the hung request once, beside its work: not once per entry (12 entries)
    assert elapsed < without + 2 * TIMEOUT_S, f"{elapsed:.1f} s with it, {without:.1f} s without"
