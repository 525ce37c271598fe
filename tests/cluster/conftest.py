"""Fixtures of the cluster tests: a copy of the tiny project with variants and archs of the test's choosing, and a
real Dask cluster shared by the tests that only read from it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("distributed", reason="the cluster tests need the cluster extra (distributed)")

from tests.cluster.cluster_support import TestCluster


@pytest.fixture(scope="module")
def shared_cluster() -> Iterator[TestCluster]:
    """Workers with a GPU of sm_80 and of sm_90 (a stand-in for the GPU judges there) and one compile slot."""
    with TestCluster({"w80": {"sm_80": 1}, "w90": {"sm_90": 1}, "cc": {"compile": 1}}) as cluster:
        yield cluster


@pytest.fixture
def no_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    """No LLM endpoint configured."""
    for var in ("DEEPSEEK_API_KEY", "OPENAI_API_KEY", "R1BUILD_BASE_URL", "NVIDIA_API_KEY", "R1BUILD_CLUSTER"):
        monkeypatch.delenv(var, raising=False)
