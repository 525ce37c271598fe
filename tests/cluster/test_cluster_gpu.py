"""``resolve --cluster`` for real: ``r1build worker`` on this host's GPUs, the local GPU evaluator inside each
worker. Skips itself without a GPU."""

from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from distributed import Client

from r1build.cache import Cache
from r1build.cli.main import main
from r1build.evaluate import detect_gpus
from r1build.lock import read_lock
from tests.cluster.cluster_support import TestCluster
from tests.support.commands import cluster_resolve

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("no_endpoint")]

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "evaluate" / "corpus"


@pytest.fixture
def gpu_cluster() -> Iterator[TestCluster]:
    """A scheduler here and ``r1build worker`` on every visible GPU (and two compile slots)."""
    with TestCluster({}) as cluster:
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "r1build.cli.main",
                "worker",
                "--scheduler",
                cluster.address,
                "--compile-slots",
                "2",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        try:
            with Client(cluster.address, set_as_default=False) as client:
                client.wait_for_workers(len(detect_gpus()) + 1, timeout=180)
            yield cluster
        finally:
            worker.send_signal(signal.SIGTERM)
            output = worker.communicate(timeout=120)[0].decode(errors="replace")
            assert worker.returncode == 0, output[-3000:]


def _silu_project(where: Path, extra: list[str]) -> Path:
    """The root manifest narrowed to silu_mul on the arch of the first GPU, with ``extra`` corpus kernels among
    its hand-written candidates."""
    shutil.copy(ROOT / "kernels.toml", where / "kernels.toml")
    shutil.copytree(ROOT / "kernels", where / "kernels", ignore=shutil.ignore_patterns("_r1build", "__pycache__"))
    for name in extra:
        shutil.copy(CORPUS / name, where / "kernels" / name)
    toml = where / "kernels.toml"
    head = toml.read_text(encoding="utf-8").partition("# Row softmax")[0]
    arch = detect_gpus()[0].arch
    head = head.replace('archs = ["sm_80", "sm_90"]', f'archs = ["{arch}"]', 1)
    files = ", ".join(f'"kernels/{n}"' for n in ["silu_mul_vec4.cu", *extra])
    head = head.replace('candidates = ["kernels/silu_mul_vec4.cu"]', f"candidates = [{files}]", 1)
    toml.write_text(head, encoding="utf-8")
    return where


def test_cluster_resolve_measures_on_the_workers_gpus(
    tmp_path: Path, gpu_cluster: TestCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """The GPU workers measure with the local evaluator's checks: a kernel that makes an illegal address and one
    that hangs are those candidates' results, the worker lives on, and the winner is validated on the GPU, with
    the GPU and the host recorded."""
    project = _silu_project(tmp_path, ["illegal_address.cu", "hang.cu"])
    code = main(cluster_resolve(project, tmp_path / "cache", gpu_cluster.address))
    err = capsys.readouterr().err
    assert code == 0, err
    assert re.search(r"cluster tcp://127\.0\.0\.1:\d+: \d+ workers; sm_\d+a?: ", err)
    with Cache(tmp_path / "cache") as cache:
        (decision,) = cache.decisions()
    by_origin = {c.origin.path: decision.result_of(c.digest) for c in decision.candidates if not c.defines}
    assert by_origin["kernels/illegal_address.cu"].status == "crashed"  # type: ignore[union-attr]
    assert by_origin["kernels/hang.cu"].status == "timed_out"  # type: ignore[union-attr]
    measured = [r for r in decision.results if r.timing is not None]
    assert measured and all(r.stage == "evaluate" and r.host == socket.gethostname() and r.device for r in measured)
    entry = read_lock(project / "kernels.lock").entry("silu_mul", detect_gpus()[0].arch)  # type: ignore[union-attr]
    assert entry is not None and entry.validation == "validated" and entry.gpu == detect_gpus()[0].name
    # the same workers measure a second resolve (a crash and a hang cost candidates, not workers)
    again = tmp_path / "again"
    again.mkdir()
    assert main(cluster_resolve(_silu_project(again, []), tmp_path / "cache2", gpu_cluster.address)) == 0


def test_two_gpus_both_take_jobs(tmp_path: Path, gpu_cluster: TestCluster) -> None:
    """With two or more GPUs, the root manifest's jobs of their arch spread over them."""
    gpus = detect_gpus()
    if len(gpus) < 2:
        pytest.skip("needs two GPUs")
    shutil.copy(ROOT / "kernels.toml", tmp_path / "kernels.toml")
    shutil.copytree(ROOT / "kernels", tmp_path / "kernels", ignore=shutil.ignore_patterns("_r1build", "__pycache__"))
    code = main(cluster_resolve(tmp_path, tmp_path / "cache", gpu_cluster.address, "--arch", gpus[0].arch))
    assert code == 0
    with Client(gpu_cluster.address, set_as_default=False) as client:
        logs = client.get_events("r1build-jobs")
    workers = {message["name"] for _, message in logs if isinstance(message, dict)}
    assert len(workers) >= 2, workers
