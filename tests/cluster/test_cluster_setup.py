"""Setting a cluster up: the address (flag, environment, manifest), ``r1build worker``, the version survey, and what
a GPU job carries of the project."""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from distributed import Client

from r1build.cli.main import main
from r1build.cluster import cluster_address
from r1build.cluster.facts import mismatch, process_facts
from r1build.cluster.tasks import project_files
from r1build.cluster.workers import plan_workers
from r1build.evaluate.devices import GpuInfo
from r1build.gate.static import StaticGate
from r1build.manifest import load_manifest
from tests.cluster.cluster_support import TestCluster, tiny_project
from tests.support.commands import cluster_resolve
from tests.support.decisions import measured_result

pytestmark = pytest.mark.usefixtures("no_endpoint")

H200 = GpuInfo(name="NVIDIA H200", arch="sm_90", index=1, memory=141 << 30, capability=(9, 0))
A100 = GpuInfo(name="NVIDIA A100-SXM4-80GB", arch="sm_80", index=0, memory=80 << 30, capability=(8, 0))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_address_comes_from_the_flag_then_the_environment_then_the_manifest(tmp_path: Path) -> None:
    project = tiny_project(tmp_path / "p", ["sm_90"], variants=False, evaluation='cluster = "tls://sched.lan:8786"')
    manifest = load_manifest(project / "kernels.toml")
    env = {"R1BUILD_CLUSTER": "tls://from-env:8786"}
    assert cluster_address(manifest, "tls://flag:1", env) == "tls://flag:1"
    assert cluster_address(manifest, None, env) == "tls://from-env:8786"
    assert cluster_address(manifest, None, {}) == "tls://sched.lan:8786"
    assert manifest.settings.evaluation.connect_timeout_s == 10.0


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("http://sched:8786", "starts with tls:// or tcp://"),
        ("tls://sched", "names no port"),
        ("tcp://user:secret@sched:8786", "holds no credentials"),
        ("tls://sched:8786/path", "give tls://host:port"),
        ("tls://sched :8786", "whitespace"),
    ],
)
def test_a_bad_cluster_address_in_the_manifest_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, why: str
) -> None:
    project = tiny_project(tmp_path / "p", ["sm_90"], variants=False, evaluation=f"cluster = {value!r}")
    assert main(["check", "-m", str(project)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "kernels.toml:5: evaluation.cluster:" in err and why in err and "secret" not in err


def test_a_bad_cluster_flag_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = tiny_project(tmp_path / "p", ["sm_90"], variants=False)
    assert main(cluster_resolve(project, tmp_path / "c", "udp://x:1")) == 2
    assert "cluster: 'udp://x:1': a scheduler address starts with tls:// or tcp://" in capsys.readouterr().err


def test_a_worker_with_another_nvcc_or_none_is_named() -> None:
    here = process_facts(with_gpus=False)
    other = dataclasses.replace(here, toolchain="cuda_12.4.r12.4/compiler.34097967_0", host="gpu7")
    why = mismatch(here, other, "gpu7-gpu0")
    assert why is not None and "worker gpu7-gpu0 on gpu7 compiles with nvcc cuda_12.4" in why
    none = dataclasses.replace(here, toolchain=None, toolchain_problem="nvcc not found")
    assert "has no usable nvcc (nvcc not found)" in (mismatch(here, none, "w") or "")
    edited = dataclasses.replace(here, code="0" * 16)
    assert "runs r1build 0.1.0 (code 0000000000000000)" in (mismatch(here, edited, "w") or "")
    assert mismatch(here, here, "w") is None


def test_worker_plan_one_per_gpu_and_one_for_compiles() -> None:
    plans = plan_workers([A100, H200], compile_slots=8, jobs_per_gpu=2, host="node3")
    assert [(p.name, p.nthreads, p.resources, p.env, p.gpu) for p in plans] == [
        ("node3-gpu0", 2, {"sm_80": 2.0}, {"CUDA_VISIBLE_DEVICES": "0"}, "NVIDIA A100-SXM4-80GB"),
        ("node3-gpu1", 2, {"sm_90": 2.0, "sm_90a": 2.0}, {"CUDA_VISIBLE_DEVICES": "1"}, "NVIDIA H200"),
        ("node3-compile", 8, {"compile": 8.0}, {}, None),
    ]
    assert plans[1].dask_command("tls://s:8786") == (
        "CUDA_VISIBLE_DEVICES=1 dask worker tls://s:8786 --nworkers 1 --nthreads 2 --resources sm_90=2,sm_90a=2 "
        "--name node3-gpu1"
    )
    assert [p.name for p in plan_workers([H200], compile_slots=0, host="n")] == ["n-gpu1"]


def test_worker_dry_run_prints_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["worker", "--scheduler", "tls://sched:8786", "--compile-slots", "3", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "compile=3" in out and "dask worker tls://sched:8786 --nworkers 1 --nthreads 3 --resources compile=3" in out


@pytest.mark.parametrize("address", ["http://sched:8786", "tls://admin:hunter2@sched:8786", "tls://sched"])
def test_worker_dry_run_refuses_an_address_a_worker_would_refuse(
    address: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--dry-run`` checks ``--scheduler`` as a real start does: exit 2, no `dask worker` command printed, and a
    password in the address never shown."""
    assert main(["worker", "--scheduler", address, "--compile-slots", "1", "--dry-run"]) == 2
    out, err = capsys.readouterr()
    assert "dask worker" not in out and "--scheduler:" in err and "hunter2" not in out + err


@pytest.mark.slow
def test_worker_with_an_unreachable_scheduler_is_exit_2() -> None:
    """As its own process: it re-executes itself with a scrubbed environment before connecting."""
    port = _free_port()
    argv = [
        "worker",
        "--scheduler",
        f"tcp://127.0.0.1:{port}",
        "--insecure",
        "--compile-slots",
        "1",
        "--timeout-s",
        "2",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "r1build.cli.main", *argv], check=False, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"the Dask scheduler at tcp://127.0.0.1:{port} is unreachable" in done.stderr


@pytest.mark.slow  # a worker process and three nvcc compiles: about 10 s on 2 shared cores
def test_r1build_worker_joins_and_takes_the_gate_compiles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``r1build worker`` as a user starts it, on a scheduler of the test's: it joins with its compile slots, the
    resolve's compiles run on it, and SIGTERM ends it cleanly."""

    def compiled_here(*args: object, **kwargs: object) -> object:
        raise AssertionError("a gate compile ran on the resolving machine")

    monkeypatch.setattr(StaticGate, "_compile_one", compiled_here)
    project = tiny_project(tmp_path / "p", ["sm_90"])
    with TestCluster({}) as cluster:
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "r1build.cli.main",
                "worker",
                "--scheduler",
                cluster.address,
                "--insecure",
                "--compile-slots",
                "2",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
        )
        try:
            with Client(cluster.address, set_as_default=False) as client:
                client.wait_for_workers(1, timeout=60)
                (info,) = client.scheduler_info(n_workers=-1)["workers"].values()
            assert info["name"].endswith("-compile") and info["resources"] == {"compile": 2.0}
            code = main(cluster_resolve(project, tmp_path / "cache", cluster.address, "--no-gpu"))
            assert code == 0, capsys.readouterr().err
            assert "1 workers; no GPU workers; 2 compile slots" in capsys.readouterr().err
        finally:
            worker.send_signal(signal.SIGTERM)
            output = worker.communicate(timeout=60)[0].decode()
    assert worker.returncode == 0, output
    assert f"connected to {cluster.address}" in output


def test_a_job_carries_the_reference_and_its_neighbours(tmp_path: Path) -> None:
    project = tiny_project(tmp_path / "p", ["sm_90"], variants=False)
    (project / "helpers.py").write_text("TWO = 2\n")
    (project / "sub").mkdir()
    (project / "sub" / "deep.py").write_text("x = 1\n")
    files = project_files(load_manifest(project / "kernels.toml"), load_manifest(project / "kernels.toml").kernels)
    # a top-level reference brings the top-level Python files, never the folders below
    assert sorted(files.files) == ["helpers.py", "reference.py"] and files.manifest_name == "kernels.toml"
    started = time.monotonic()
    assert (
        files.digest
        == project_files(
            load_manifest(project / "kernels.toml"), load_manifest(project / "kernels.toml").kernels
        ).digest
    )
    assert time.monotonic() - started < 5

    # a gpu-reference and a torch-reference in modules of their own travel too (only `reference` did)
    (project / "gpu").mkdir()
    (project / "gpu" / "ref.py").write_text("def scale(x, y, a, n):\n    pass\n")
    (project / "gpu" / "util.py").write_text("K = 1\n")
    manifest = load_manifest(project / "kernels.toml")
    spec = dataclasses.replace(manifest.kernels[0], gpu_reference="gpu.ref:scale", torch_reference="gpu.ref:scale")
    assert sorted(project_files(manifest, [spec]).files) == ["gpu/ref.py", "gpu/util.py", "helpers.py", "reference.py"]


def test_a_split_job_judges_its_baseline_once_and_joins_in_order(tmp_path: Path) -> None:
    """A generation round's job (the baseline not among its candidates) over two workers: the baseline is judged
    in the first part only, and the joined results are the job's, in order, with speedups over the baseline."""
    from r1build.cluster.facts import process_facts
    from r1build.cluster.session import ClusterEvaluator, Inventory, WorkerInfo, _joined
    from r1build.judge import Job
    from r1build.records import Candidate, Origin, Result

    manifest = load_manifest(tiny_project(tmp_path / "p", ["sm_90"], variants=False) / "kernels.toml")
    base = Candidate("// base", Origin("baseline", "scale.cu"))
    generated = [Candidate(f"// g{i}", Origin("generated", model="m", round=1, sample=i)) for i in range(3)]
    evaluator = ClusterEvaluator.__new__(ClusterEvaluator)  # the splitting alone: no scheduler needed
    facts = process_facts(with_gpus=False)
    evaluator.inventory = Inventory(
        [
            WorkerInfo(address=f"tcp://h:{i}", name=f"w{i}", host="h", archs=["sm_90"], compile_slots=0, facts=facts)
            for i in (1, 2)
        ]
    )
    job = Job(manifest, manifest.kernels[0], "sm_90", generated, base)
    parts = evaluator._parts(job)
    assert [[c.digest for c in p.candidates] for p in parts] == [
        [base.digest, generated[0].digest],
        [generated[1].digest, generated[2].digest],
    ]
    assert all(p.baseline is None for p in parts)
    times = {base.digest: 20.0, generated[0].digest: 10.0, generated[1].digest: 40.0}
    results = [
        measured_result(c.digest, times[c.digest], device=None, samples=9)
        if c.digest in times
        else Result(candidate=c.digest, arch="sm_90", status="incorrect", stage="evaluate", detail="x")
        for p in parts
        for c in p.candidates
    ]
    joined = _joined(job, results)
    assert [r.candidate for r in joined] == [c.digest for c in generated]
    assert [r.timing.speedup_vs_baseline if r.timing else None for r in joined] == [2.0, 0.5, None]
