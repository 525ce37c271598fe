"""What a scheduler's clients can reach through ``r1build worker``: a plain ``tcp://`` scheduler (anyone who reaches
it, or a worker's port, runs code on the worker's host) is refused unless ``--insecure`` says so, and a task
finds no credential of the shell that started the worker, neither in ``os.environ`` nor in ``/proc/<pid>/environ``
of its process or of its nanny. A resolve refuses a plain ``tcp://`` scheduler off the loopback interface unless
``--insecure-cluster`` says so."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from distributed import Client

from r1build.cli.main import main
from r1build.cluster import cluster_address
from r1build.errors import ClusterRefusedError
from r1build.manifest import load_manifest
from tests.cluster.cluster_support import TestCluster, tiny_project

pytestmark = pytest.mark.usefixtures("no_endpoint")

CANARIES = {
    "OPENAI_API_KEY": "canary-123",
    "AWS_SECRET_ACCESS_KEY": "canary-456",
    "R1BUILD_SIGNING_KEY": "canary-789",
    "R1BUILD_REMOTE_HEADER": "X-Api: canary-abc",
    "GITHUB_TOKEN": "canary-def",
}


@pytest.mark.parametrize("address", ["tcp://127.0.0.1:1", "sched.lan:8786", "tcp://10.0.0.7:8786"])
def test_worker_refuses_a_plain_tcp_scheduler_without_insecure(
    address: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for extra in ([], ["--dry-run"]):
        assert main(["worker", "--scheduler", address, "--compile-slots", "1", *extra]) == 2
        out, err = capsys.readouterr()
        assert "dask worker" not in out and "Traceback" not in err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "--insecure" in lines[0] and "plain TCP" in lines[0], err


def test_worker_insecure_dry_run_warns_once(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["worker", "--scheduler", "tcp://10.0.0.7:8786", "--insecure", "--compile-slots", "1", "--dry-run"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "dask worker tcp://10.0.0.7:8786" in out
    assert err.count("can run code on this host") == 1, err


def test_the_worker_environment_holds_no_credential() -> None:
    from r1build.cluster.workers import worker_process_environment

    base = {
        **CANARIES,
        "PATH": "/usr/bin",
        "HOME": "/home/u",
        "TMPDIR": "/scratch",
        "LANG": "C.UTF-8",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "DASK_DISTRIBUTED__COMM__TLS__WORKER__KEY": "/etc/r1build/worker.key",
        "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "true",
        "R1BUILD_NVCC": "/usr/local/cuda/bin/nvcc",
        "R1BUILD_COMPUTE_SANITIZER": "/opt/cs",
        "R1BUILD_REMOTE_TOKEN": "canary-tok",
        "SSH_AUTH_SOCK": "/tmp/agent",
        "PYTHONPATH": "/src",
    }
    env = worker_process_environment(base)
    assert not [k for k, v in env.items() if "canary" in v], env
    assert "SSH_AUTH_SOCK" not in env
    for kept in ("PATH", "HOME", "TMPDIR", "LANG", "CUDA_VISIBLE_DEVICES", "R1BUILD_NVCC", "R1BUILD_COMPUTE_SANITIZER"):
        assert env[kept] == base[kept], kept
    # Dask's settings (the TLS key file's path among them) are in every task's reach through dask.config anyway
    assert env["DASK_DISTRIBUTED__COMM__TLS__WORKER__KEY"] == "/etc/r1build/worker.key"
    assert env["PYTHONPATH"].split(os.pathsep)[-1] == "/src"
    assert "PYTHONNOUSERSITE" not in env  # a worker installed with pip --user still imports
    assert worker_process_environment(env) == env


def _what_a_task_sees() -> dict[str, Any]:
    """Runs on a worker: its environment, as Python and as /proc has it, and its nanny's."""
    import os as os_
    from pathlib import Path as Path_

    def proc(pid: int) -> str:
        try:
            return Path_(f"/proc/{pid}/environ").read_bytes().replace(b"\0", b"\n").decode(errors="replace")
        except OSError as exc:
            return f"unreadable: {exc}"

    return {"environ": dict(os_.environ), "self": proc(os_.getpid()), "parent": proc(os_.getppid())}


@pytest.mark.slow  # a worker process (re-executed) joining a scheduler: about 10 s on 2 shared cores
def test_a_task_on_r1build_worker_finds_no_secret() -> None:
    with TestCluster({}) as cluster:
        env = {**os.environ, **CANARIES, "CUDA_VISIBLE_DEVICES": "", "DASK_R1BUILD_TEST__MARK": "kept"}
        argv = ["worker", "--scheduler", cluster.address, "--insecure", "--compile-slots", "1"]
        worker = subprocess.Popen(
            [sys.executable, "-m", "r1build.cli.main", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
        )
        try:
            with Client(cluster.address, set_as_default=False) as client:
                client.wait_for_workers(1, timeout=60)
                seen = client.submit(_what_a_task_sees, resources={"compile": 1}, pure=False).result(timeout=60)
        finally:
            worker.send_signal(signal.SIGTERM)
            output = worker.communicate(timeout=60)[0].decode()
    assert worker.returncode == 0, output
    assert "unreadable" not in seen["self"] + seen["parent"], seen
    for where, text in (("os.environ", repr(seen["environ"])), ("self", seen["self"]), ("parent", seen["parent"])):
        assert "canary" not in text, (where, text)
    assert seen["environ"]["DASK_R1BUILD_TEST__MARK"] == "kept" and "PATH" in seen["environ"]
    assert output.count("can run code on this host") == 1, output


def test_resolve_refuses_plain_tcp_off_loopback_without_opt_in(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tiny_project(tmp_path / "p", ["sm_90"], variants=False, evaluation='cluster = "tcp://10.0.0.7:8786"')
    manifest = load_manifest(project / "kernels.toml")
    for flag, env, named in (
        (None, {}, "[evaluation] cluster"),
        (None, {"R1BUILD_CLUSTER": "tcp://sched.lan:8786"}, "R1BUILD_CLUSTER"),
        ("sched.lan:8786", {}, "--cluster"),
    ):
        with pytest.raises(ClusterRefusedError) as caught:
            cluster_address(manifest, flag, env)
        assert str(caught.value).startswith(named) and "--insecure-cluster" in str(caught.value), caught.value
        assert cluster_address(manifest, flag, env, insecure=True) is not None
    assert cluster_address(manifest, "tcp://127.0.0.1:8786", {}) == "tcp://127.0.0.1:8786"
    argv = ["resolve", "-m", str(project), "--cache-dir", str(tmp_path / "c"), "--offline", "--no-gpu"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "plain TCP" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
