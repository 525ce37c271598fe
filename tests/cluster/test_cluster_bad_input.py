"""Cluster addresses that cannot work, refused at once with exit 2: a ``tls://`` scheduler without Dask TLS
settings was a TypeError traceback from deep in Dask's connect (exit 1, then 20 s of the half-made client closing
itself), and a worker whose scheduler is unreachable was Dask's RuntimeError('Nanny failed to start.') traceback,
though both are documented as exit 2."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from r1build.cli.main import main
from tests.cluster.cluster_support import tiny_project


def test_resolve_on_a_tls_scheduler_without_tls_settings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = tiny_project(tmp_path / "p", ["sm_90"], variants=False)
    started = time.monotonic()
    argv = ["resolve", "-m", str(project), "--cache-dir", str(tmp_path / "c"), "--offline", "--no-gpu"]
    assert main([*argv, "--cluster", "tls://127.0.0.1:1"]) == 2
    assert time.monotonic() - started < 10
    err = capsys.readouterr().err
    assert "cluster: tls://127.0.0.1:1 is a tls:// address, and Dask's configuration holds no TLS settings" in err


def test_a_worker_for_a_tls_scheduler_without_tls_settings(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["worker", "--scheduler", "tls://127.0.0.1:1", "--compile-slots", "1"]) == 2
    assert "holds no TLS settings for a worker" in capsys.readouterr().err


@pytest.mark.slow
def test_a_worker_whose_scheduler_is_unreachable_within_dasks_own_timeout() -> None:
    """Dask's connect timeout (30 s by default) ending before --timeout-s (60 s by default): the nanny fails with
    RuntimeError('Nanny failed to start.') from the OSError, which escaped as a traceback. Run as its own process
    (it re-executes itself with a scrubbed environment, which keeps Dask's settings)."""
    env = {**os.environ, "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "1s"}
    argv = ["worker", "--scheduler", "tcp://127.0.0.1:1", "--insecure", "--compile-slots", "1", "--timeout-s", "30"]
    done = subprocess.run(
        [sys.executable, "-m", "r1build.cli.main", *argv],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr  # nothing listens on port 1
    err = done.stderr
    assert "the Dask scheduler at tcp://127.0.0.1:1 is unreachable (Timed out trying to connect" in err, err
    assert "Traceback" not in err


@contextmanager
def _listener(answer: Callable[[socket.socket], None]) -> Iterator[int]:
    """A port on 127.0.0.1 where something that is no Dask scheduler takes each connection and ``answer``s it."""
    held: list[socket.socket] = []
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)

        def serve() -> None:
            while True:
                try:
                    conn, _ = server.accept()
                except OSError:  # closed: the test is over
                    return
                held.append(conn)
                answer(conn)

        threading.Thread(target=serve, daemon=True).start()
        try:
            yield server.getsockname()[1]
        finally:
            for conn in held:
                conn.close()


def _http(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")


def _resolve_on(tmp_path: Path, port: int) -> list[str]:
    project = tiny_project(
        tmp_path / "p",
        ["sm_90"],
        variants=False,
        evaluation=f'cluster = "tcp://127.0.0.1:{port}"\nconnect-timeout-s = 1',
    )
    return ["resolve", "-m", str(project), "--cache-dir", str(tmp_path / "c"), "--offline", "--no-gpu"]


def _refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], answer: Callable[[socket.socket], None]
) -> tuple[int, str]:
    """A resolve against a listener that deals with each connection by ``answer``: exit 2 within 10 s and no
    traceback; the port and what was said on stderr, on one line."""
    with _listener(answer) as port:
        started = time.monotonic()
        assert main(_resolve_on(tmp_path, port)) == 2
        assert time.monotonic() - started < 10
    err = " ".join(capsys.readouterr().err.split())
    assert "Traceback" not in err
    return port, err


def test_a_port_where_something_else_answers_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An HTTP server at the address: Dask read its reply as a frame length and failed allocating exabytes, a
    MemoryError traceback (exit 1) after 20 s of the half-made client closing itself."""
    port, err = _refused(tmp_path, capsys, _http)
    assert f"what answers at tcp://127.0.0.1:{port} is no Dask scheduler" in err, err


@pytest.mark.slow  # waits out the connect timeout (1 s, and 2 s of margin)
def test_a_port_that_accepts_and_never_answers_is_exit_2_in_bounded_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A port that takes the connection and says nothing: Dask's client waits for the handshake without a limit,
    and the resolve hung for good."""
    port, err = _refused(tmp_path, capsys, lambda conn: None)
    assert f"the scheduler at tcp://127.0.0.1:{port} took the connection but gave no Dask handshake" in err, err


def test_a_scheduler_of_other_dask_versions_is_one_warning_not_pythons(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dask's VersionMismatchWarning was printed by Python's warnings as it came: Dask's file and line, an ASCII
    table and the source line, on stderr of a library that prints nothing."""
    import warnings

    import distributed.versions
    from distributed.utils import asciitable
    from distributed.versions import VersionMismatchWarning

    from r1build.cluster.session import connect
    from r1build.events import Event, Note, sink
    from tests.cluster.cluster_support import TestCluster

    table = asciitable(["Package", "Client", "Scheduler", "Workers"], [("distributed", "2026.8.0", "2023.1.0", None)])
    said = {"warning": f"Mismatched versions found\n\n{table}\nNotes: \n-  lz4: a note", "error": ""}
    monkeypatch.setattr(distributed.versions, "error_message", lambda *a, **k: said)  # as the scheduler calls it
    events: list[Event] = []
    with TestCluster({}) as cluster, warnings.catch_warnings(record=True) as caught, sink(events.append):
        warnings.simplefilter("always")
        connect(cluster.address, timeout_s=10).close()
    assert not [w for w in caught if issubclass(w.category, VersionMismatchWarning)]
    notes = [e.message for e in events if isinstance(e, Note) and e.level == "warning"]
    assert notes == [
        f"the Dask cluster at {cluster.address} mixes package versions (distributed: client 2026.8.0, scheduler "
        "2023.1.0, workers None): Dask may fail in ways it does not explain; install the same dask and distributed "
        "on every host"
    ]
