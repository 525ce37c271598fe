"""The order a GPU takes its jobs in: the first, in the order given, whose checks and sanitizer runs are all in."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from pathlib import Path

import pytest

from r1build.cache import Cache
from r1build.evaluate import EvaluatorOptions, GpuEvaluator
from r1build.evaluate.jobs import Candidacy, JobState
from r1build.evaluate.sanitizer.schedule import KernelKey, SanitizeRuns
from r1build.judge import Job
from r1build.manifest import load_manifest
from r1build.records import Candidate, Origin
from tests.evaluate.evaluate_support import ROOT


def _state(evaluator: GpuEvaluator, kernel: str) -> tuple[JobState, Future[object], SanitizeRuns]:
    """A job of the root manifest's ``kernel`` with one candidate whose check and sanitizer runs are pending."""
    manifest = load_manifest(ROOT / "kernels.toml")
    spec = next(s for s in manifest.kernels if s.name == kernel)
    candidate = Candidate(source=f"// {kernel}\n", origin=Origin("generated", None))
    job = Job(manifest, spec, "sm_90", [candidate])
    runs = SanitizeRuns()
    check: Future[object] = Future()
    evaluator._checks[(KernelKey.of(job, "sm_90"), candidate.digest)] = check  # type: ignore[assignment]
    entry = Candidacy(candidate=candidate, visible=True, index=0, sanitizers=runs)
    return JobState(job=job, arch="sm_90", slot=None, entries=[entry]), check, runs


def test_a_job_still_sanitized_does_not_hold_up_a_ready_one(tmp_path: Path) -> None:
    from r1build.evaluate.jobs import Readiness

    with Cache(tmp_path / "cache") as cache, GpuEvaluator(cache, gpus=[], workdir=tmp_path / "w") as evaluator:
        readiness = Readiness()
        first, first_check, first_runs = _state(evaluator, "matmul")
        second, second_check, second_runs = _state(evaluator, "rmsnorm")
        third, third_check, third_runs = _state(evaluator, "softmax_rows")
        for state in (first, second, third):
            readiness.watch(state, evaluator._background(state))
        first_check.set_result(None)  # the first job's checks are in, its sanitizer runs are not
        second_check.set_result(None)
        second_runs.expect([])  # the second's are
        assert evaluator._next_ready([first, second], readiness) == 1
        evaluator.in_order = True
        assert evaluator._next_ready([first, second], readiness) == 0
        evaluator.in_order = False
        # nothing ready: the GPU waits for the first job to become so, and takes the first in order then
        threading.Timer(0.3, third_check.set_result, (None,)).start()
        threading.Timer(0.2, third_runs.expect, ([],)).start()
        assert evaluator._next_ready([first, third], readiness) == 1
        first_runs.expect([])
        assert evaluator._next_ready([first, third], readiness) == 0


def test_readiness_counts_each_future_once_and_marks_a_job_with_none_ready_at_once() -> None:
    from r1build.evaluate.jobs import JobState, Readiness

    manifest = load_manifest(ROOT / "kernels.toml")
    readiness = Readiness()
    states = [JobState(job=Job(manifest, manifest.kernels[0], "sm_90", []), arch="sm_90", slot=None, entries=[])]
    states.append(JobState(job=states[0].job, arch="sm_90", slot=None, entries=[]))
    done: Future[object] = Future()
    done.set_result(None)
    later: list[Future[object]] = [Future() for _ in range(300)]
    readiness.watch(states[0], [done, *later])
    readiness.watch(states[1], [])
    assert not states[0].ready and states[1].ready
    for future in later[:-1]:
        future.set_result(None)
    assert not states[0].ready
    assert readiness.first(states[:1], stop=lambda: True) is None  # told to stop: no wait
    later[-1].set_exception(RuntimeError("a check worker went away"))  # failed work is in too
    assert states[0].ready and readiness.first(states, stop=lambda: False) == 0


def _job(n: int) -> Job:
    """A job of the root's first kernel with ``n`` generated candidates."""
    manifest = load_manifest(ROOT / "kernels.toml")
    candidates = [Candidate(source=f"// {i}\n", origin=Origin("generated", None)) for i in range(n)]
    return Job(manifest, manifest.kernels[0], "sm_90", candidates)


def test_jobs_start_with_the_fewest_candidates_then_the_most_and_keep_the_given_order_among_equals() -> None:
    from r1build.evaluate.jobs import start_order

    jobs = [_job(3), _job(35), _job(3), _job(12)]
    assert start_order(jobs) == [0, 1, 3, 2]  # the first of the smallest, then most candidates first
    assert start_order(jobs, small_first=False) == [1, 3, 0, 2]
    assert start_order([_job(7), _job(20)]) == [0, 1] and start_order([_job(20), _job(7)]) == [1, 0]
    assert start_order([_job(5)]) == [0] and start_order([]) == []


def test_jobs_can_start_by_their_compute_sanitizer_work_a_tiled_kernel_before_more_byte_bound_candidates() -> None:
    from r1build.evaluate.jobs import start_order
    from r1build.evaluate.sanitizer.schedule import sanitizer_work

    manifest = load_manifest(ROOT / "kernels.toml")
    spec = {k.name: k for k in manifest.kernels}

    def job(name: str, n: int) -> Job:
        candidates = [Candidate(source=f"// {name} {i}\n", origin=Origin("generated", None)) for i in range(n)]
        return Job(manifest, spec[name], "sm_90", candidates)

    # matmul's 128x96x257 checks 6.3 million flops a candidate; softmax_rows's largest small shape half a MB
    assert sanitizer_work(spec["matmul"]) > 10 * sanitizer_work(spec["softmax_rows"])
    jobs = [job("transpose", 16), job("softmax_rows", 37), job("matmul", 35), job("silu_mul", 25)]
    assert start_order(jobs, by="candidates") == [0, 1, 2, 3]  # softmax_rows's 37 before matmul's 35
    assert start_order(jobs) == [0, 2, 3, 1]  # silu_mul's 25 x 1 MB before softmax_rows's 37 x 0.5
    assert start_order(jobs, small_first=False, by="sanitizer-work") == [2, 3, 1, 0]


def test_an_error_at_the_job_the_gpu_took_reaches_that_job_and_those_after_it(tmp_path: Path) -> None:
    # a stand-in GPU: its worker never starts here (no cupy), which the evaluator's warm-up shrugs off
    from r1build.evaluate.devices import GpuInfo

    gpu = GpuInfo(name="Stand-in GPU", arch="sm_90", index=0, memory=1 << 30)
    with (
        Cache(tmp_path / "cache") as cache,
        GpuEvaluator(
            cache, gpus=[gpu], workdir=tmp_path / "w", options=EvaluatorOptions(sanitize=False, check_workers=1)
        ) as evaluator,
    ):
        first, first_check, first_runs = _state(evaluator, "matmul")
        second, _, _ = _state(evaluator, "rmsnorm")
        for state in (first, second):
            state.slot = evaluator._slots[0]
            state.plan = Future()
            for entry in state.entries:
                entry.gate, entry.library = Future(), Future()
        first_runs.expect([])
        first_check.set_exception(RuntimeError("the check worker went away"))
        done = threading.Thread(target=evaluator._run_slot, args=([first, second],))
        done.start()
        done.join(30)
        assert not done.is_alive()
        # the job at hand (taken off the pending list) gets the error, as does the one still waiting
        assert isinstance(first.done.exception(timeout=1), RuntimeError)
        assert isinstance(second.done.exception(timeout=1), RuntimeError)


def test_timed_before_sanitized_a_job_is_ready_on_its_checks_and_a_later_finding_replaces_its_pass(
    tmp_path: Path,
) -> None:
    """With ``time_before_sanitized`` the GPU takes a job whose checks are in while its sanitizer runs go on; when
    the job settles, a finding replaces the candidate's pass, and a candidate that failed has its runs canceled."""
    from r1build.evaluate.jobs import Readiness
    from r1build.evaluate.sanitizer.runner import SanitizerOutcome
    from r1build.records import Result

    with (
        Cache(tmp_path / "cache") as cache,
        GpuEvaluator(
            cache, gpus=[], workdir=tmp_path / "w", options=EvaluatorOptions(time_before_sanitized=True)
        ) as evaluator,
    ):
        readiness = Readiness()
        state, check, runs = _state(evaluator, "matmul")
        readiness.watch(state, evaluator._background(state))
        check.set_result(None)
        assert evaluator._next_ready([state], readiness) == 0  # its sanitizer runs are not in
        entry = state.entries[0]
        entry.result = Result(candidate=entry.candidate.digest, arch="sm_90", status="passed", stage="evaluate")
        runs.expect(["memcheck", "racecheck"])
        runs.settle("memcheck", SanitizerOutcome("memcheck", "clean"))
        threading.Timer(
            0.2, runs.settle, ("racecheck", SanitizerOutcome("racecheck", "finding", "Race reported"))
        ).start()
        evaluator._settle(state, None)  # waits for the runs
        state.done.result(timeout=5)
        assert entry.result is not None and entry.result.status == "incorrect"
        assert "race between threads on shared memory" in entry.result.detail
        # a candidate that failed its timing's judging: its runs are canceled, its result stays
        failed, _, failed_runs = _state(evaluator, "rmsnorm")
        failed.entries[0].result = Result(
            candidate=failed.entries[0].candidate.digest, arch="sm_90", status="incorrect", stage="evaluate"
        )
        evaluator._settle(failed, None)
        assert failed_runs.canceled and failed.entries[0].result.status == "incorrect"


def test_while_no_job_is_ready_the_gpu_thread_warms_the_libraries_of_those_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The library's first calls (what cupy compiles for a kernel's reference) are made while the GPU thread only
    waits: for every job not ready, in order, until one is; none for a job warmed already or once one is ready."""
    from r1build.evaluate.devices import GpuInfo

    gpu = GpuInfo(name="Stand-in GPU", arch="sm_90", index=0, memory=1 << 30)
    with (
        Cache(tmp_path / "cache") as cache,
        GpuEvaluator(cache, gpus=[gpu], workdir=tmp_path / "w", options=EvaluatorOptions(sanitize=False)) as evaluator,
    ):
        slot = evaluator._slots[0]
        states = [_state(evaluator, name)[0] for name in ("matmul", "rmsnorm", "softmax_rows", "sum_all")]
        warmed: list[str] = []

        def warm(job: Job, at: object) -> None:
            assert at is slot and slot.busy.locked()  # the worker is the caller's to talk to
            warmed.append(job.spec.name)
            if job.spec.name == "rmsnorm":
                states[3].ready = True  # a job became ready meanwhile: no more warming

        monkeypatch.setattr(evaluator._timer, "warm_library", warm)
        states[0].warmed = True
        evaluator._warm_ahead(states, slot)
        assert warmed == ["rmsnorm"]
        assert [s.warmed for s in states] == [True, True, False, False]
        assert evaluator.stats["warm_ahead_s"] >= 0 and "warm_library_s" not in evaluator.stats
        evaluator._warm_ahead(states, slot)  # one is ready: the GPU thread takes it instead
        states[3].ready = False
        evaluator._warm_ahead(states, slot)
        assert warmed == ["rmsnorm", "softmax_rows", "sum_all"]


def test_the_gpu_thread_warms_ahead_before_it_waits_and_not_again_at_the_taking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from r1build.evaluate.devices import GpuInfo

    gpu = GpuInfo(name="Stand-in GPU", arch="sm_90", index=0, memory=1 << 30)
    with (
        Cache(tmp_path / "cache") as cache,
        GpuEvaluator(cache, gpus=[gpu], workdir=tmp_path / "w", options=EvaluatorOptions(sanitize=False)) as evaluator,
    ):
        made = [_state(evaluator, name) for name in ("matmul", "rmsnorm")]
        warmed: list[str] = []
        monkeypatch.setattr(evaluator._timer, "warm_library", lambda job, slot: warmed.append(job.spec.name))
        for state, _, runs in made:
            state.slot = evaluator._slots[0]
            state.plan = Future()
            runs.expect([])
            for entry in state.entries:
                entry.gate, entry.library = Future(), Future()
        done = threading.Thread(target=evaluator._run_slot, args=([s for s, _, _ in made],))
        done.start()
        deadline = time.monotonic() + 10
        while len(warmed) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert warmed == ["matmul", "rmsnorm"]  # both warmed while neither job was ready
        for _, check, _ in made:
            check.set_exception(RuntimeError("the check worker went away"))
        done.join(30)
        assert not done.is_alive() and warmed == ["matmul", "rmsnorm"]
        # at the taking, a job warmed ahead is not warmed again; one that was not is, before the GPU is taken alone
        monkeypatch.setattr(evaluator, "_time_job", lambda state, slot: warmed.append("timed"))
        again, _, _ = _state(evaluator, "sum_all")
        for warm_ahead, expected in ((True, ["timed"]), (False, ["sum_all", "timed"])):
            warmed.clear()
            again.warmed = warm_ahead
            evaluator._time_alone(again, evaluator._slots[0], "sum_all/sm_90")
            assert warmed == expected
