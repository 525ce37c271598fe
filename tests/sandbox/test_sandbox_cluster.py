"""The cluster path: a gate compile sent to a real Dask worker (:func:`r1build.cluster.tasks.compile_verdict`, what
``resolve --cluster`` sends) of a generated candidate that reads a canary file of the worker's machine, in the
spelling the text checks cannot see. The worker's compile runs in the same sandbox: the verdict it sends back, and
so the resolving machine's cache, never holds the canary."""

from __future__ import annotations

from pathlib import Path

import pytest

from r1build.manifest import load_manifest
from r1build.records import Candidate, Origin
from tests.sandbox.support import needs_sandbox
from tests.sandbox.test_sandbox_compile import CANARY, PASTED, attacks

distributed = pytest.importorskip("distributed")

from r1build.cluster.tasks import compile_verdict  # noqa: E402
from tests.cluster.cluster_support import TestCluster  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, needs_sandbox]


def test_a_cluster_workers_compile_reads_no_file_of_its_machine(tmp_path: Path) -> None:
    secret = tmp_path / "worker-only" / "team.pem"
    secret.parent.mkdir()
    secret.write_text(f"{CANARY} on the worker\n")
    manifest = load_manifest(ROOT / "kernels.toml")
    spec = manifest.kernel("silu_mul")
    source = attacks(secret)[PASTED] + (ROOT / "kernels" / "silu_mul.cu").read_text()
    candidate = Candidate(source, Origin("generated", model="test"))
    with TestCluster({"w": {}}) as cluster, distributed.Client(cluster.address, set_as_default=False) as client:
        result, _ = client.submit(compile_verdict, manifest, spec, "sm_90", candidate, 120.0, pure=False).result(300)
    assert result.status == "compile_error", result.detail  # the file is not there to read
    assert "file not found" in result.detail and CANARY not in result.detail
