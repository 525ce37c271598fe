"""A cluster resolve costs no more than a local one: its gate compiles each candidate once for all its archs (one
nvcc with a ``-gencode`` per arch, as the local gate does), and a warm ``resolve --locked --cluster`` that needs no
worker never connects to the scheduler.

Before, the cluster gate sent one compile per candidate and arch to the compile slots (twice the nvcc runs of the
local gate for two archs), and every cluster resolve connected to the scheduler and surveyed its workers, a warm
``--locked`` one included (where the scheduler was down, a run that needed nothing of it failed with exit 2).
"""

from __future__ import annotations

import shutil
import socket
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from r1build.cache import Cache
from r1build.cli.main import main
from r1build.gate.static import StaticGate
from r1build.lock import read_lock
from tests.cluster.cluster_support import TestCluster, tiny_project
from tests.support.commands import cluster_resolve

pytestmark = [
    pytest.mark.usefixtures("no_endpoint"),
    pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed"),
]


def _logging_nvcc(where: Path, log: Path) -> Path:
    """A wrapper of the real nvcc that appends each command line it runs to ``log``, then runs the real one."""
    real = shutil.which("nvcc")
    assert real is not None
    where.mkdir(parents=True, exist_ok=True)
    wrapper = where / "nvcc"
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> "{log}"\nexec "{real}" "$@"\n', encoding="utf-8")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return wrapper


def _gate_compiles(log: Path) -> list[str]:
    """The gate's compiles among the logged nvcc runs (a ptxas report asked for, an object out), each with its
    archs."""
    lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    return [line for line in lines if "-Xptxas -v" in line and " -c " in line]


def _resolve(project: Path, cache: Path, *flags: str) -> int:
    return main(["resolve", "-m", str(project), "--cache-dir", str(cache), "--offline", "--no-gpu", *flags])


@pytest.mark.slow  # nvcc compiles and worker processes: 20-40 s on 2 shared cores
def test_the_cluster_gate_runs_as_many_nvcc_as_the_local_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "nvcc.log"
    monkeypatch.setenv("R1BUILD_NVCC", str(_logging_nvcc(tmp_path / "bin", log)))  # here and in the workers
    local = tiny_project(tmp_path / "local", ["sm_80", "sm_90"])
    assert _resolve(local, tmp_path / "c1") == 0, capsys.readouterr().err
    here = _gate_compiles(log)
    assert here and all(line.count("-gencode") == 2 for line in here), here  # one nvcc per candidate, both archs
    log.unlink()

    remote = tiny_project(tmp_path / "remote", ["sm_80", "sm_90"])

    def compiled_here(*args: object, **kwargs: object) -> object:
        raise AssertionError("a gate compile ran on the resolving machine")

    with TestCluster({"cc": {"compile": 1}}) as cluster, monkeypatch.context() as m:
        m.setattr(StaticGate, "_compile_one", compiled_here)  # this process only: the worker compiles
        assert main(cluster_resolve(remote, tmp_path / "c2", cluster.address, "--no-gpu")) == 0, capsys.readouterr().err
    there = _gate_compiles(log)
    assert len(there) == len(here), there
    assert all(line.count("-gencode") == 2 for line in there), there
    # the same verdicts under the same keys: a later local run of the cluster's cache compiles nothing
    with Cache(tmp_path / "c1") as c1, Cache(tmp_path / "c2") as c2:
        keys = sorted(e.key for e in c1.entries("gate"))
        assert keys == sorted(e.key for e in c2.entries("gate"))
        for key in keys:
            one, two = c1.get_gate(key.partition("/")[2]), c2.get_gate(key.partition("/")[2])
            assert one is not None and two is not None
            assert (one.candidate, one.arch, one.status, one.gate and one.gate.registers) == (
                two.candidate,
                two.arch,
                two.status,
                two.gate and two.gate.registers,
            )
    log.unlink()
    (remote / "kernels.lock").unlink()
    assert _resolve(remote, tmp_path / "c2") == 0, capsys.readouterr().err
    assert _gate_compiles(log) == []


@pytest.fixture
def listening() -> Iterator[tuple[str, list[str]]]:
    """A TCP port on 127.0.0.1 that takes connections and records each peer (it never answers)."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    peers: list[str] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, peer = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            peers.append(f"{peer[0]}:{peer[1]}")
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{server.getsockname()[1]}", peers
    finally:
        stop.set()
        thread.join(5)
        server.close()


@pytest.mark.slow  # a gate-only resolve first (nvcc): a few seconds
def test_a_warm_locked_cluster_resolve_never_connects(
    tmp_path: Path, listening: tuple[str, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    address, peers = listening
    project = tiny_project(tmp_path / "p", ["sm_80", "sm_90"])
    assert _resolve(project, tmp_path / "cache") == 0, capsys.readouterr().err
    lock = (project / "kernels.lock").read_bytes()
    capsys.readouterr()
    assert main(cluster_resolve(project, tmp_path / "cache", address, "--no-gpu", "--locked")) == 0, (
        capsys.readouterr().err
    )
    assert peers == []  # nothing asked of the scheduler: not even a connection
    assert (project / "kernels.lock").read_bytes() == lock
    # and with nothing listening at all
    with socket.create_server(("127.0.0.1", 0)) as closed:
        gone = f"tcp://127.0.0.1:{closed.getsockname()[1]}"
    assert main(cluster_resolve(project, tmp_path / "cache", gone, "--no-gpu", "--locked")) == 0, (
        capsys.readouterr().err
    )
    assert read_lock(project / "kernels.lock") is not None
