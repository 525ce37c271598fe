"""The settings of one GPU evaluator (:class:`~.evaluator.GpuEvaluator`): what it checks and how hard, how long it
waits, and how its work is spread over processes."""

from __future__ import annotations

from typing import Literal

from ..convert import record

__all__ = ["RUNS_PER_QUEUE", "EvaluatorOptions", "StartBy"]

StartBy = Literal["candidates", "sanitizer-work"]
"""What orders the jobs an evaluator starts (:func:`~.jobs.start_order`): their candidates, or their candidates
times what one candidate's compute-sanitizer runs check (:func:`~.sanitizer.schedule.sanitizer_work`)."""

RUNS_PER_QUEUE = 4
"""Compute-sanitizer runs of one kernel and tool at once while other runs wait for a place. Four took the root
manifest's ``evaluate_all`` from 84.7 to 80.0 s on an H100 (bench/results/gpu_session_2026-12-06c.md): the short
queues (memcheck, initcheck: a run's start costs more than its candidates) end sooner and their places go to the
long ones earlier. Many more is slower: sanitizer runs share the one GPU, and on an H200 host eight a kernel
(racecheck four candidates a run) took the root manifest from 102 to 120 s (gpu_session_2026-12-02.md, call 4).
Places nobody waits for go to more runs (:data:`.sanitizer.schedule.MOST_RUNS`)."""


@record(frozen=True)
class EvaluatorOptions:
    """How a :class:`~.evaluator.GpuEvaluator` judges candidates."""

    sanitize: bool = True
    """Whether compute-sanitizer runs (where it works)."""
    seed: int = 0
    """Base seed of every generated input."""
    call_timeout_s: float = 10.0
    """Longest one correctness call may take before the candidate counts as hung."""
    timing_timeout_s: float = 30.0
    """Longest the timing of a benchmark shape may go without progress (the worker reports each batch of samples),
    so a kernel that hangs only at the benchmark size costs seconds, not minutes."""
    timing_budget_s: float = 0.3
    """GPU seconds of samples per candidate and benchmark shape."""
    jobs: int | None = None
    """Threads of the evaluator's own CPU work (None: the cores, at least 2)."""
    sanitize_batch: int = 16
    """Most candidates in one compute-sanitizer run (1: a run per candidate)."""
    sanitize_runs: int = RUNS_PER_QUEUE
    """Compute-sanitizer runs of one kernel and tool at once."""
    check_workers: int = 4
    """Worker processes per GPU that run correctness checks side by side (timing has its own)."""
    compare_processes: int | None = None
    """Processes that compare the outputs of timed calls (:mod:`.compare_pool`; None: half the cores, at most 8; 0: in
    the evaluator's own threads)."""
    small_first: bool = True
    """Start the job with the fewest candidates first, then the others most work first (:attr:`start_by`,
    :func:`~.jobs.start_order`): the GPU gets work sooner; False: most work first throughout."""
    start_by: StartBy = "sanitizer-work"
    """What counts as a job's background work when the jobs are ordered, the most first (after the smallest with
    :attr:`small_first`); "candidates" was the order before (2.8-2.9 s slower on the root manifest)."""
    racecheck_first: bool = False
    """A freed compute-sanitizer place goes to a waiting racecheck run before the other tools' runs
    (:attr:`.sanitizer.schedule.Sanitizing.racecheck_first`); False: first come first served."""
    racecheck_runs: int | None = None
    """Most racecheck runs of one kernel at once, idle places' runs included (None: as :attr:`sanitize_runs` and
    :data:`.sanitizer.schedule.MOST_RUNS`): an experiment, unmeasured on a GPU
    (:attr:`.sanitizer.schedule.Sanitizing.racecheck_runs`)."""
    in_order: bool = False
    """Time jobs in the order given, each once its background work is in, instead of the first one ready."""
    time_before_sanitized: bool = False
    """A job is timed once its checks are in, before its compute-sanitizer runs end (the GPU waits for no
    sanitizer; their verdicts are applied when the job settles, a finding replacing a pass)."""
    compare_on_gpu: bool = True
    """What the timed calls left is compared on the GPU by a process that never runs a candidate
    (:mod:`.child.gpu_compare`; what it does not find clear still goes to the CPU's rules), else written to files."""
