"""``r1build resolve --cluster`` on a real Dask cluster of worker processes on 127.0.0.1.

Everything is real (scheduler, worker processes under nannies, resources, transport, nvcc in the workers and
here, the cache and the lock) but the GPU: inside the GPU workers :class:`cluster_support.FakeGpu`
judges instead (the real static gate, then a verdict and time of the test's choosing).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import dask
import pytest

from r1build.cache import Cache
from r1build.cli.main import main
from r1build.cluster.session import OUTCOMES_NAMESPACE, ClusterEvaluator
from r1build.events import Event, Note, Progress, sink
from r1build.gate.static import StaticGate
from r1build.lock import read_lock
from r1build.manifest import load_manifest
from r1build.resolve import ResolveOptions, resolve
from r1build.resolve.judges import gate_batch
from tests.cluster.cluster_support import FakeGpu, TestCluster, fake_time_us, tiny_project
from tests.resolve.resolve_support import install_gpu_double
from tests.support.commands import cluster_resolve

pytestmark = [pytest.mark.slow, pytest.mark.heavy, pytest.mark.usefixtures("no_endpoint")]


def _use_fake(monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> None:
    monkeypatch.setattr(ClusterEvaluator, "factory", functools.partial(FakeGpu, **kwargs))


def _records(where: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(where.glob("*.json"))]


def _no_local_compiles(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if this process compiles a candidate: every compile must run on a worker."""

    def compiled_here(*args: object, **kwargs: object) -> object:
        raise AssertionError("a gate compile ran on the resolving machine")

    monkeypatch.setattr(StaticGate, "_compile_one", compiled_here)


def test_gpu_jobs_run_on_the_worker_of_their_arch(
    tmp_path: Path, shared_cluster: TestCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tiny_project(tmp_path / "p", ["sm_80", "sm_90", "sm_100"], variants=False)
    records = tmp_path / "records"
    records.mkdir()
    _use_fake(monkeypatch, record_dir=str(records))
    _no_local_compiles(monkeypatch)
    events: list[Event] = []
    manifest = load_manifest(project / "kernels.toml")
    with sink(events.append), Cache(tmp_path / "cache") as cache:
        resolution = resolve(manifest, cache, ResolveOptions(generate=False, cluster=shared_cluster.address))
        decisions = {d.arch: d for d in cache.decisions()}
    # each GPU job ran once, on the worker advertising its arch; sm_100 has none and stays unmeasured
    assert sorted((r["arch"], r["worker"]) for r in _records(records)) == [("sm_80", "w80"), ("sm_90", "w90")]
    by_arch = {r.arch: r for r in resolution.entries}
    for arch in ("sm_80", "sm_90"):
        assert by_arch[arch].validation == "validated" and by_arch[arch].state == "measured"
        assert by_arch[arch].facts.gpu == "Test GPU"
        assert all(r.host == socket.gethostname() and r.stage == "evaluate" for r in decisions[arch].results)
        assert len(decisions[arch].results) == 1
    assert by_arch["sm_100"].validation == "unvalidated" and by_arch["sm_100"].state == "gated"
    assert "sm_100" not in decisions
    notes = [e.message for e in events if isinstance(e, Note)]
    assert any(f"no worker of the cluster at {shared_cluster.address} has a GPU of sm_100" in n for n in notes)
    assert any(n.startswith("Dask dashboard: http") for n in notes)
    assert any("sm_80: w80" in n and "sm_90: w90" in n and "1 compile slots" in n for n in notes)
    final = [e for e in events if isinstance(e, Progress) and e.task == "cluster sm_90"][-1]
    assert (final.completed, final.total, final.fields["queued"], final.fields["running"]) == (1, 1, 0, 0)
    assert any(isinstance(e, Progress) and e.task == "cluster sm_90" and e.fields["running"] == 1 for e in events)


@pytest.mark.slow  # nvcc compiles and worker processes: 10-20 s on 2 shared cores
def test_gate_compiles_run_on_the_cluster(
    tmp_path: Path, shared_cluster: TestCluster, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tiny_project(tmp_path / "p", ["sm_90"])
    _no_local_compiles(monkeypatch)
    code = main(cluster_resolve(project, tmp_path / "cache", shared_cluster.address, "--no-gpu"))
    assert code == 0, capsys.readouterr().err
    with Cache(tmp_path / "cache") as cache:
        # the variants a gate-only resolve compiles (its first batch, up to the winner) compiled on the cluster's
        # compile slot (nothing compiles here) and cached here
        assert len(cache.entries("gate")) == min(3, gate_batch())
    entry = read_lock(project / "kernels.lock").entry("scale", "sm_90")  # type: ignore[union-attr]
    assert entry is not None and entry.validation == "unvalidated"


@pytest.mark.slow  # nvcc compiles and worker processes: 10-20 s on 2 shared cores
def test_results_equal_a_local_resolve(
    tmp_path: Path, shared_cluster: TestCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same stand-in for the GPU, once on this machine and once in a worker: the same lock, the same
    decision but for the host that measured, the time it was made and how long the gate's compile took."""
    local = tiny_project(tmp_path / "local", ["sm_90"])
    remote = tiny_project(tmp_path / "remote", ["sm_90"])
    with monkeypatch.context() as m:
        install_gpu_double(m, reject=lambda c: False, time_us=fake_time_us)
        assert main(["resolve", "-m", str(local), "--cache-dir", str(tmp_path / "c1"), "--offline"]) == 0
    _use_fake(monkeypatch)
    assert main(cluster_resolve(remote, tmp_path / "c2", shared_cluster.address)) == 0
    assert (local / "kernels.lock").read_text() == (remote / "kernels.lock").read_text()

    def same(d: object) -> object:
        d = dataclasses.replace(d, created="")  # type: ignore[type-var]
        results = [
            dataclasses.replace(r, host=None, gate=r.gate and dataclasses.replace(r.gate, compile_s=0.0))
            for r in d.results  # type: ignore[attr-defined]
        ]
        return dataclasses.replace(d, results=results)  # type: ignore[type-var]

    with Cache(tmp_path / "c1") as c1, Cache(tmp_path / "c2") as c2:
        (here,), (there,) = c1.decisions(), c2.decisions()
        assert {r.host for r in there.results} == {socket.gethostname()}
        assert same(here) == same(there)


@pytest.mark.slow  # nvcc compiles and worker processes: 10-20 s on 2 shared cores
def test_a_worker_killed_mid_job_costs_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first GPU job kills the worker running it: Dask runs it again on a worker of the arch, and it is
    counted once."""
    project = tiny_project(tmp_path / "p", ["sm_90"], variants=False)
    records = tmp_path / "records"
    records.mkdir()
    marker = tmp_path / "died"
    _use_fake(monkeypatch, record_dir=str(records), die_once=str(marker))
    with TestCluster({"a": {"sm_90": 1}, "b": {"sm_90": 1}}) as cluster:
        code = main(cluster_resolve(project, tmp_path / "cache", cluster.address))
    assert code == 0
    assert marker.read_text() in ("a", "b")  # a worker died mid-job
    assert len(_records(records)) == 1  # judged once, by the worker that lived
    with Cache(tmp_path / "cache") as cache:
        (decision,) = cache.decisions()
    assert len(decision.results) == 1 and decision.results[0].stage == "evaluate"
    assert read_lock(project / "kernels.lock").entry("scale", "sm_90").validation == "validated"  # type: ignore


def test_a_job_that_kills_every_worker_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tiny_project(tmp_path / "p", ["sm_90"], variants=False)
    _use_fake(monkeypatch, die_once=str(tmp_path / "died"))
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}), TestCluster({"a": {"sm_90": 1}}) as cluster:
        code = main(cluster_resolve(project, tmp_path / "cache", cluster.address))
    err = capsys.readouterr().err
    assert code == 1
    assert "scale/sm_90: the job was lost with the workers that died running it" in " ".join(err.split())
    assert "Traceback" not in err
    assert not (project / "kernels.lock").exists()


def test_scheduler_unreachable_at_start_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    project = tiny_project(
        tmp_path / "p",
        ["sm_90"],
        variants=False,
        evaluation=f'cluster = "tcp://127.0.0.1:{port}"\nconnect-timeout-s = 1',
    )
    start = time.monotonic()
    code = main(["resolve", "-m", str(project), "--cache-dir", str(tmp_path / "cache"), "--offline"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2
    assert f"the Dask scheduler at tcp://127.0.0.1:{port} is unreachable" in err and "Traceback" not in err
    assert time.monotonic() - start < 15
    assert not (project / "kernels.lock").exists()


@pytest.mark.slow  # nvcc compiles and worker processes: 10-20 s on 2 shared cores
def test_scheduler_lost_mid_run_then_a_rerun_continues(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """sm_90's job is measured while sm_80's is held back; the scheduler goes; the resolve fails clearly and
    keeps sm_90's results, which the next run takes instead of measuring again."""
    project = tiny_project(tmp_path / "p", ["sm_80", "sm_90"], variants=False)
    records = tmp_path / "records"
    records.mkdir()
    release = tmp_path / "release"
    _use_fake(monkeypatch, record_dir=str(records), hold_arch="sm_80", release=str(release))
    cache_dir = tmp_path / "cache"
    codes: list[int] = []
    with TestCluster({"w80": {"sm_80": 1}, "w90": {"sm_90": 1}}) as cluster:
        run = threading.Thread(target=lambda: codes.append(main(cluster_resolve(project, cache_dir, cluster.address))))
        run.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with Cache(cache_dir) as cache:
                if cache.entries(f"json/{OUTCOMES_NAMESPACE}"):
                    break
            time.sleep(0.1)
        cluster.stop_scheduler()
        run.join(60)
    err = " ".join(capsys.readouterr().err.split())
    assert codes == [1]
    assert "scale/sm_80: lost the Dask scheduler" in err and "running the same command again continues" in err
    assert not (project / "kernels.lock").exists()
    assert [r["arch"] for r in _records(records)] == ["sm_90"]

    release.touch()
    with TestCluster({"w80": {"sm_80": 1}, "w90": {"sm_90": 1}}) as cluster:
        code = main(cluster_resolve(project, cache_dir, cluster.address))
    assert code == 0, capsys.readouterr().err
    assert sorted(r["arch"] for r in _records(records)) == ["sm_80", "sm_90"]  # sm_90 was not measured again
    lock = read_lock(project / "kernels.lock")
    assert lock is not None and {e.arch: e.validation for e in lock.kernel} == {
        "sm_80": "validated",
        "sm_90": "validated",
    }
    with Cache(cache_dir) as cache:
        assert cache.entries(f"json/{OUTCOMES_NAMESPACE}") == []  # every outcome is a decision now


def test_mixed_versions_are_refused(
    tmp_path: Path, shared_cluster: TestCluster, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from r1build.cluster import session
    from r1build.cluster.facts import process_facts

    older = dataclasses.replace(process_facts(with_gpus=False), version="0.0.9")
    monkeypatch.setattr(session, "process_facts", lambda with_gpus=True: older)
    project = tiny_project(tmp_path / "p", ["sm_90"], variants=False)
    code = main(cluster_resolve(project, tmp_path / "cache", shared_cluster.address))
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2
    assert f"the cluster at {shared_cluster.address} runs other versions than this machine" in err
    assert "worker w90" in err and "runs r1build 0.1.0" in err and "this machine r1build 0.0.9" in err


@pytest.mark.slow  # two worker processes and three nvcc compiles: about 10 s on 2 shared cores
def test_a_job_is_split_over_the_workers_of_its_arch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three variants, two workers of sm_90: each takes a part, the baseline in the first; the decision lists
    every result once, in the job's order, each speedup over the baseline from the baseline's time.

    A part's outcome is stored by a callback on a Dask client thread while the resolver, which took the same
    result from the future, goes on to close the cache: here the store is slowed down, and the cache must close
    after it (a store racing the close crashed the process in sqlite3)."""
    project = tiny_project(tmp_path / "p", ["sm_90"])
    records = tmp_path / "records"
    records.mkdir()
    _use_fake(monkeypatch, record_dir=str(records))
    timeline: list[str] = []
    store, close = ClusterEvaluator._store_arrived, Cache.close

    def slow_store(self: ClusterEvaluator, tag: str, future: Any) -> None:
        time.sleep(1.0)
        store(self, tag, future)
        timeline.append("stored")

    def timed_close(self: Cache) -> None:
        timeline.append("closed")
        close(self)

    monkeypatch.setattr(ClusterEvaluator, "_store_arrived", slow_store)
    monkeypatch.setattr(Cache, "close", timed_close)
    with TestCluster({"a": {"sm_90": 1}, "b": {"sm_90": 1}}) as cluster:
        assert main(cluster_resolve(project, tmp_path / "cache", cluster.address)) == 0
        time.sleep(1.5)  # a store that had not started by the close would have run by now
    assert timeline[-1] == "closed" and "stored" in timeline, timeline
    monkeypatch.undo()
    parts = _records(records)
    assert sorted(len(r["candidates"]) for r in parts) == [1, 2] and {r["worker"] for r in parts} == {"a", "b"}
    with Cache(tmp_path / "cache") as cache:
        (decision,) = cache.decisions()
    assert [r.candidate for r in decision.results] == [c.digest for c in decision.candidates]
    baseline = next(c for c in decision.candidates if c.origin.kind == "baseline" and not c.defines)
    assert baseline.digest in parts[0]["candidates"] or baseline.digest in parts[1]["candidates"]
    base_us = decision.result_of(baseline.digest).timing.median_us  # type: ignore[union-attr]
    for result in decision.results:
        assert result.timing is not None
        assert result.timing.speedup_vs_baseline == round(base_us / result.timing.median_us, 4)


def test_a_worker_without_r1build_is_refused(
    tmp_path: Path, shared_cluster: TestCluster, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from r1build.cluster import session
    from tests.cluster.cluster_support import facts_of_a_worker_without_r1build

    monkeypatch.setattr(session, "worker_facts", facts_of_a_worker_without_r1build)
    project = tiny_project(tmp_path / "p", ["sm_90"], variants=False)
    code = main(cluster_resolve(project, tmp_path / "cache", shared_cluster.address))
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and "Traceback" not in err
    assert (
        "worker w90 could not say which r1build it runs (ModuleNotFoundError: No module named 'r1build'): "
        "install the same r1build on every host"
    ) in err


def test_a_worker_advertising_an_arch_its_gpu_does_not_run_is_reported(
    tmp_path: Path, shared_cluster: TestCluster, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A worker started with the wrong resources never passes the gate's verdicts off as its GPU's."""
    _use_fake(monkeypatch, archs=frozenset({"sm_80"}))
    project = tiny_project(tmp_path / "p", ["sm_90"], variants=False)
    code = main(cluster_resolve(project, tmp_path / "cache", shared_cluster.address))
    err = " ".join(capsys.readouterr().err.split())
    assert code == 1 and "worker w90 on" in err and "advertises sm_90, but its GPUs run sm_80" in err
    with Cache(tmp_path / "cache") as cache:
        assert cache.decisions() == []


def test_audit_on_the_cluster_judges_each_locked_winner_on_a_worker_of_its_arch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``r1build audit --cluster``: a machine with no GPU audits the lock on the cluster's GPU workers. A winner
    they pass keeps its place (exit 0); one the checks now find wrong is demoted, its reason in the lock, and a
    ``--locked`` resolve then fails on it."""
    project = tiny_project(tmp_path / "p", ["sm_90"], variants=False)
    cache_dir = tmp_path / "cache"
    audit = ["audit", "-m", str(project), "--cache-dir", str(cache_dir), "--json"]
    with TestCluster({"a": {"sm_90": 1}}) as cluster:
        _use_fake(monkeypatch)
        assert main(cluster_resolve(project, cache_dir, cluster.address)) == 0
        capsys.readouterr()
        assert main([*audit, "--cluster", cluster.address]) == 0
        (row,) = json.loads(capsys.readouterr().out)["kernels"]
        assert (row["verdict"], row["gpu"]) == ("passed", "Test GPU")
        _use_fake(monkeypatch, reject="input set 1: out differs from the reference at 3 of 4096 elements")
        assert main([*audit, "--cluster", cluster.address]) == 1
        (row,) = json.loads(capsys.readouterr().out)["kernels"]
    assert row["verdict"] == "demoted" and "incorrect: input set 1" in row["reason"], row
    entry = read_lock(project / "kernels.lock").entry("scale", "sm_90")  # type: ignore[union-attr]
    assert entry is not None and entry.demoted is not None and "Test GPU" in entry.demoted
    code = main(["resolve", "--locked", "-m", str(project), "--cache-dir", str(cache_dir), "--no-gpu"])
    assert code == 2 and "may not be used" in " ".join(capsys.readouterr().err.split())
