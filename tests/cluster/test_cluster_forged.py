"""What a worker sends back is checked before anything of it is cached or decided on: results for other candidates
or archs, gate verdicts under keys it was not asked about or for another candidate, times no GPU measures, payloads
no judge writes. Before, the resolving machine took a job's results by position (a verdict for another candidate
became this one's, in the decision and the lock), stored every gate verdict a worker sent under the key it named
(handed to the remote cache too), and a wrong number of results or something that was no result ended in a
ValueError or AttributeError traceback."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from r1build.cache import Cache
from r1build.cli.main import main
from r1build.cluster import gate as cluster_gate
from r1build.cluster.checks import MAX_RESULT_BYTES, gate_verdict_problem, outcome_problem
from r1build.cluster.gate import _checked, _checked_all
from r1build.cluster.session import OUTCOMES_NAMESPACE, ClusterEvaluator
from r1build.cluster.tasks import JobOutcome, compile_verdicts
from r1build.judge import Job
from r1build.records import Result, Timing
from tests.cluster.cluster_support import FakeGpu, TestCluster, tiny_project
from tests.support.commands import cluster_resolve
from tests.support.decisions import measured_result

pytestmark = pytest.mark.usefixtures("no_endpoint")

_DIGESTS = ["a" * 64, "b" * 64]
_KEYS = ["1" * 64, "2" * 64]
_TC = "cuda_13.0.r13.0/compiler.1_0"


def _job() -> Any:
    """A stand-in for a job of two candidates on sm_90: the checks read its arch and candidates' digests."""
    candidates = [dataclasses.make_dataclass("C", ["digest"])(d) for d in _DIGESTS]
    return dataclasses.make_dataclass("J", ["arch", "candidates"])("sm_90", candidates)


def _measured(digest: str, **kw: Any) -> Result:
    return dataclasses.replace(measured_result(digest, 12.5, device="Test GPU"), toolchain=_TC, **kw)


def _verdict(digest: str, **kw: Any) -> Result:
    return Result(**{"candidate": digest, "arch": "sm_90", "status": "passed", "stage": "gate", "toolchain": _TC, **kw})


def _outcome(results: Any = None, gates: Any = None) -> JobOutcome:
    results = [_measured(d) for d in _DIGESTS] if results is None else results
    return JobOutcome(results, {} if gates is None else gates, "host", "w90")


def test_an_outcome_a_local_run_could_give_is_taken() -> None:
    gates = {_KEYS[1]: _verdict(_DIGESTS[1], arch="90")}
    assert outcome_problem(_job(), _outcome(gates=gates), _KEYS, _TC) is None
    failed = [_measured(_DIGESTS[0], status="incorrect", timing=None), _measured(_DIGESTS[1])]
    assert outcome_problem(_job(), _outcome(failed), _KEYS, _TC) is None


@pytest.mark.parametrize(
    ("outcome", "said"),
    [
        (None, "a NoneType where a job's outcome belongs"),
        (_outcome([_measured(_DIGESTS[0])]), "1 results for 2 candidates"),
        (_outcome([_measured(d) for d in _DIGESTS * 2]), "4 results for 2 candidates"),
        (_outcome(["passed", "passed"]), "a str where a result belongs"),
        (_outcome([_measured(d) for d in reversed(_DIGESTS)]), "a result for candidate 'bbbbbbbbbbbb' where aaaa"),
        (_outcome([_measured(d, arch="sm_75") for d in _DIGESTS]), "judged for 'sm_75', not sm_90"),
        (_outcome([_measured(d, status="great") for d in _DIGESTS]), "with status 'great'"),
        (_outcome([_measured(d, timing=None) for d in _DIGESTS]), "passed on a GPU with no time measured"),
        (
            _outcome([_measured(d, timing=Timing(median_us=float("nan"), spread=0, samples=1)) for d in _DIGESTS]),
            "a median time of nan us",
        ),
        (_outcome([_measured(d, detail="x" * MAX_RESULT_BYTES) for d in _DIGESTS]), "KiB (at most 1024 KiB)"),
        (_outcome(gates={"f" * 64: _verdict(_DIGESTS[0])}), "a gate verdict under key 'ffffffffffffffff', which is"),
        (_outcome(gates={_KEYS[0]: _verdict(_DIGESTS[1])}), "a result for candidate 'bbbbbbbbbbbb' where aaaa"),
        (_outcome(gates={_KEYS[0]: _measured(_DIGESTS[0])}), "a gate verdict of candidate aaaaaaaaaaaa with status"),
        (_outcome(gates={_KEYS[0]: _verdict(_DIGESTS[0], toolchain="x")}), "compiled by nvcc 'x', not cuda_13.0"),
    ],
)
def test_an_outcome_no_local_run_gives_is_refused(outcome: object, said: str) -> None:
    problem = outcome_problem(_job(), outcome, _KEYS, _TC)
    assert problem is not None and said in problem, problem


def test_a_compile_slots_verdict_is_checked_like_the_local_gates() -> None:
    assert _checked((_verdict(_DIGESTS[0]), True), _DIGESTS[0], "sm_90", _TC) == (_verdict(_DIGESTS[0]), True)
    refused = [
        ("passed", True),
        (_verdict(_DIGESTS[0]),),
        (_verdict(_DIGESTS[0]), "yes"),
        (_verdict(_DIGESTS[1]), True),
        (_verdict(_DIGESTS[0], arch="sm_80"), True),
        (_verdict(_DIGESTS[0], status="crashed"), True),
        (_measured(_DIGESTS[0]), True),
        (_verdict(_DIGESTS[0], toolchain="cuda_12.0"), True),
    ]
    for sent in refused:
        assert isinstance(_checked(sent, _DIGESTS[0], "sm_90", _TC), str), sent
    assert gate_verdict_problem(_verdict(_DIGESTS[0], detail="x" * MAX_RESULT_BYTES), _DIGESTS[0], "sm_90", _TC)


@dataclasses.dataclass
class SwappingGpu(FakeGpu):
    """Judges like :class:`FakeGpu`, then sends each candidate's result as the next one's; with ``forge_gates``,
    keeps a verdict of another candidate under each gate key of the job instead."""

    forge_gates: bool = False

    def evaluate(self, job: Job) -> list[Result]:
        results = super().evaluate(job)
        if self.forge_gates:
            from r1build.gate.static import gate_key

            for c in job.candidates:
                key = gate_key(job.manifest, job.spec, job.arch, c, self.gate.toolchain)
                verdict = self.cache.get_gate(key)
                if verdict is not None:
                    self.cache.put_gate(key, replace(verdict, candidate="0" * 64, status="rejected"))
            return results
        return [replace(r, candidate=results[(i + 1) % len(results)].candidate) for i, r in enumerate(results)]


def forged_compile(*args: Any, **kwargs: Any) -> list[tuple[Result, bool]]:
    """A compile slot that sends the verdicts of its compile as another candidate's."""
    return [(replace(result, candidate="0" * 64), True) for result, _ in compile_verdicts(*args, **kwargs)]


def _resolve(project: Path, cache: Path, address: str, *flags: str) -> int:
    argv = cluster_resolve(project, cache, address)
    return main([*argv, *flags])


def _gate_verdicts(cache_dir: Path) -> dict[str, Result | None]:
    """Every gate verdict of the cache, by key."""
    with Cache(cache_dir) as cache:
        keys = [e.key.partition("/")[2] for e in cache.entries("gate")]
        return {k: cache.get_gate(k) for k in keys}


@pytest.mark.slow  # nvcc compiles and worker processes: 10-20 s on 2 shared cores
@pytest.mark.parametrize("forge_gates", [False, True], ids=["results", "gate-verdicts"])
def test_a_worker_sending_verdicts_of_other_candidates_is_refused_and_nothing_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], forge_gates: bool
) -> None:
    project = tiny_project(tmp_path / "p", ["sm_90"])
    monkeypatch.setattr(ClusterEvaluator, "factory", functools.partial(SwappingGpu, forge_gates=forge_gates))
    with TestCluster({"w90": {"sm_90": 1}}) as cluster:
        code = _resolve(project, tmp_path / "cache", cluster.address)
    err = " ".join(capsys.readouterr().err.split())
    assert code == 1, err
    assert f"scale/sm_90: refused what the cluster at {cluster.address} sent back: a result for candidate" in err
    assert "(from worker w90); nothing of it was kept" in err and "Traceback" not in err
    assert not (project / "kernels.lock").exists()
    with Cache(tmp_path / "cache") as cache:
        assert cache.decisions() == [] and cache.entries(f"json/{OUTCOMES_NAMESPACE}") == []
    verdicts = _gate_verdicts(tmp_path / "cache")
    assert all(v is not None and v.candidate != "0" * 64 for v in verdicts.values()), verdicts


@pytest.mark.slow  # nvcc compiles and worker processes: 10-20 s on 2 shared cores
def test_a_compile_slot_sending_a_verdict_of_another_candidate_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tiny_project(tmp_path / "p", ["sm_90"], variants=False)
    monkeypatch.setattr(cluster_gate, "compile_verdicts", forged_compile)
    with TestCluster({"cc": {"compile": 1}}) as cluster:
        code = _resolve(project, tmp_path / "cache", cluster.address, "--no-gpu")
    err = " ".join(capsys.readouterr().err.split())
    assert code == 1, err
    assert "scale/sm_90: refused the gate verdict worker cc sent back: a result for candidate '000000000000'" in err
    assert "Traceback" not in err and not (project / "kernels.lock").exists()
    assert _gate_verdicts(tmp_path / "cache") == {}


def test_a_compile_slots_verdicts_for_several_archs_are_each_checked() -> None:
    both = [(_verdict(_DIGESTS[0], arch="sm_80"), True), (_verdict(_DIGESTS[0]), False)]
    assert _checked_all(both, _DIGESTS[0], ["sm_80", "sm_90"], _TC) == both
    assert "1 verdicts where 2" in str(_checked_all(both[:1], _DIGESTS[0], ["sm_80", "sm_90"], _TC))
    assert "a tuple verdicts where 1" in str(_checked_all(both[1], _DIGESTS[0], ["sm_90"], _TC))
    swapped = _checked_all(both[::-1], _DIGESTS[0], ["sm_80", "sm_90"], _TC)
    assert isinstance(swapped, str) and "judged for 'sm_90', not sm_80" in swapped
