"""A job as the GPU evaluator carries it through its stages: the records of a job and its candidates, and the
small functions over them (the order jobs start in, how a job is named and remembered).

:class:`JobState` is one kernel on one arch with its :class:`Candidacy` entries, each gaining its gate verdicts,
library, sanitizer runs, timing statistics and finally its result; :class:`Timed` is what the GPU hands the
settling thread after timing a job.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

from ..convert import field, record
from ..judge import Job
from ..records import Candidate, Result, Status
from .correctness.bench import BenchPlan
from .correctness.plan import ShapePlan, Verdict
from .library import Library, LibraryFailure
from .options import StartBy
from .sanitizer.schedule import KernelKey, SanitizeRuns, sanitizer_work
from .slots import Slot
from .timing.floors import DeviceFloors
from .timing.stats import LibraryTime, SampleStats
from .timing.torch_bar import TorchTime

__all__ = [
    "Candidacy",
    "Checked",
    "JobKey",
    "JobState",
    "Readiness",
    "Timed",
    "chain",
    "job_key",
    "label",
    "start_order",
    "trim",
]

T = TypeVar("T")
DETAIL_LIMIT = 4000
"""Longest reason a result keeps."""


def trim(text: str) -> str:
    """``text`` cut to :data:`DETAIL_LIMIT` characters."""
    return text if len(text) <= DETAIL_LIMIT else text[: DETAIL_LIMIT - 3] + "..."


@record(kw_only=True)
class Candidacy:
    """One candidate of one job, as it moves through the stages."""

    candidate: Candidate
    visible: bool
    """Whether its result is returned (a baseline that is not among the job's candidates is judged for the
    speedup only)."""
    index: int
    """Position in its job's gate verdicts."""
    gate: Future[list[Result]] | None = None
    library: Future[Library | LibraryFailure] | None = None
    result: Result | None = None
    sanitizers: SanitizeRuns | None = None
    stats: list[SampleStats] | None = None
    idle: SampleStats | None = None
    """Its first benchmark shape timed in the ``idle-gaps`` regime, for a finalist
    (:meth:`~r1build.evaluate.timing.measure.Timer.idle_time`)."""


@record(kw_only=True)
class JobState:
    """One kernel on one arch as the evaluator works through it."""

    job: Job
    arch: str
    slot: Slot | None
    entries: list[Candidacy]
    plan: Future[list[ShapePlan]] | None = None
    bench: Future[BenchPlan] | None = None
    done: Future[None] = field(default_factory=Future)
    """Set once every entry has its result (or to the error that stopped the GPU's work)."""
    ready: bool = False
    """Whether its background work (checks, sanitizer runs) is all in, as a :class:`Readiness` watching it says."""
    warmed: bool = False
    """Whether the library's first calls for its kernel were made (what cupy compiles for the reference)."""


JobKey = tuple[KernelKey, int, tuple[str, ...], str | None]
"""A job as :meth:`GpuEvaluator.prepare` remembers it: kernel, the spec object, candidates and baseline."""


def label(job: Job, arch: str) -> str:
    """A job as the timeline names it."""
    return f"{job.spec.name}/{arch}"


def start_order(jobs: Sequence[Job], *, small_first: bool = True, by: StartBy = "sanitizer-work") -> list[int]:
    """The order jobs are started in (their compiles ranked, their GPU assigned). The most background work first,
    the given order among equals: the GPU times whichever job is ready, so the longest work must not start last (on
    the H200 the root manifest's matmul, 35 candidates, 5th of 6, finished its racecheck runs 40 s after every other
    job was ready: bench/results/gpu_session_2026-12-02.md); it also balances several GPUs (longest processing time
    first). ``by`` says what counts as work: a job's candidates times what one candidate's compute-sanitizer runs
    check (:func:`~.sanitizer.schedule.sanitizer_work`: the runs are the longest background work, and a tiled
    kernel's racecheck costs ten times a byte-bound kernel's; the root manifest's matmul then starts second, not
    third, and ``evaluate_all`` took 69.6 s twice against 72.4 and 72.5 s on one H100 host:
    bench/results/gpu_session_2026-12-06e.md), or its candidates alone. With ``small_first`` the job with
    the fewest candidates goes before them all: its compiles end first, so the GPU has checks, sanitizer runs and
    then a job to time seconds sooner (the root manifest's first job, 37 candidates, was compiled 10 s in and ready
    to time 28 s in; its smallest, 16, is done compiling in under half of that), while the largest follow it at
    once."""

    def work(job: Job) -> float:
        n = len(job.candidates)
        return n * sanitizer_work(job.spec) if by == "sanitizer-work" else n

    order = sorted(range(len(jobs)), key=lambda i: -work(jobs[i]))
    if small_first and len(order) > 1:
        smallest = min(order, key=lambda i: (len(jobs[i].candidates), i))
        order.remove(smallest)
        order.insert(0, smallest)
    return order


def job_key(job: Job, arch: str) -> JobKey:
    """How :meth:`~.evaluator.GpuEvaluator.prepare` remembers a job."""
    baseline = job.baseline.digest if job.baseline is not None else None
    return (KernelKey.of(job, arch), id(job.spec), tuple(c.digest for c in job.candidates), baseline)


@record(frozen=True)
class Timed:
    """A job's timed survivors, each with the future of its judging, and what their timings are set against."""

    judged: list[tuple[Candidacy, Future[Verdict | list[SampleStats]]]]
    floors: DeviceFloors | None
    library: LibraryTime
    """The library's time, or why there is none."""
    torch: TorchTime | None = None
    """The torch bar (the faster of eager and ``torch.compile`` of the ``torch-reference``), or why there is
    none; None where the kernel names no torch reference."""


Checked = Result | tuple[Status, str] | None
"""What a candidate's background correctness checks found: the gate's verdict where it failed there, a status and
its reason, or None where every check that shares the GPU passed."""


def chain(source: Future[T], target: Future[T]) -> None:
    """``target`` gets ``source``'s outcome once it has one."""

    def copy(_: object) -> None:
        if source.cancelled():
            target.cancel()
        elif source.exception() is not None:
            target.set_exception(source.exception())
        else:
            target.set_result(source.result())

    source.add_done_callback(copy)


class Readiness:
    """Which jobs have all their background work in, told by their futures as each one ends: a GPU thread waiting
    for the first ready job waits on one condition, instead of on every pending future again each time one ends
    (thousands of futures for a large manifest)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()

    def watch(self, state: JobState, futures: Sequence[Future[Any]]) -> None:
        """Mark ``state`` ready once every one of ``futures`` is done (now, where none is left)."""
        left = len(futures)

        def one_done(_: object) -> None:
            nonlocal left
            with self._cond:
                left -= 1
                if left == 0:
                    state.ready = True
                    self._cond.notify_all()

        if not futures:
            with self._cond:
                state.ready = True
                self._cond.notify_all()
        for future in futures:
            future.add_done_callback(one_done)

    def first(self, pending: Sequence[JobState], stop: Callable[[], bool], poll_s: float = 1.0) -> int | None:
        """The index of the first ready job of ``pending``, waiting for one; None once ``stop()`` says so
        (asked every ``poll_s`` seconds)."""
        with self._cond:
            while not stop():
                found = next((i for i, state in enumerate(pending) if state.ready), None)
                if found is not None:
                    return found
                self._cond.wait(poll_s)
            return None
