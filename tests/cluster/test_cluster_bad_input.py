"""Cluster addresses that cannot work, refused at once with exit 2: a ``tls://`` scheduler without Dask TLS
settings was a TypeError traceback from deep in Dask's connect (exit 1, then 20 s of the half-made client closing
itself), and a worker whose scheduler is unreachable was Dask's RuntimeError('Nanny failed to start.') traceback,
though both are documented as exit 2."""

from __future__ import annotations

import time
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
def test_a_worker_whose_scheduler_is_unreachable_within_dasks_own_timeout(capsys: pytest.CaptureFixture[str]) -> None:
    """Dask's connect timeout (30 s by default) ending before --timeout-s (60 s by default): the nanny fails with
    RuntimeError('Nanny failed to start.') from the OSError, which escaped as a traceback."""
    import dask

    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        argv = ["worker", "--scheduler", "tcp://127.0.0.1:1", "--compile-slots", "1", "--timeout-s", "30"]
        assert main(argv) == 2  # nothing listens on port 1
    err = capsys.readouterr().err
    assert "the Dask scheduler at tcp://127.0.0.1:1 is unreachable (Timed out trying to connect" in err, err
