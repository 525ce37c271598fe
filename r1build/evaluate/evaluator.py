"""The GPU evaluator: static gate, shared-library build, correctness and timing on a GPU of the job's arch.

Per job (one kernel, one arch), in this order:

1. the static gate judges every candidate (:class:`~r1build.gate.static.StaticGate`, cached), while the same
   variants are built as shared libraries for the arch (:mod:`.library`) on the CPU cores;
2. check worker processes on a GPU of that arch (``check_workers`` side by side, in the background from
   :meth:`GpuEvaluator.prepare` on, whatever job the GPU thread is at) run the correctness plan (:mod:`.checks`)
   of each library as soon as it is built, holding the GPU's quiet lock shared for each test shape's work;
   compute-sanitizer runs (:mod:`.sanitizing`: a run per kernel, tool and batch of built libraries, split until
   a finding names its candidate) start as soon as libraries are built, overlapping the worker's checks; a
   candidate that fails them leaves its batches;
3. job by job, the first in the order given whose checks and sanitizer runs are all in (a job still waiting for
   its runs does not hold up a later one that is ready), the GPU thread takes the GPU alone (new checks wait for
   it, running sanitizer runs stop before their next call: :class:`~.slots.Quiet`) for the checks that need it to
   themselves (shared memory filled before a call) and the timing of the survivors, the baseline and the
   reference (with cupy); what the timed calls left is judged on the GPU by the slot's comparer process, which never
   runs a candidate (:mod:`.child.gpu_compare`; whatever it does not pass goes to files and the CPU pool's full rules),
   and a settling thread turns it into the job's results while the GPU goes on with the next job.

:meth:`GpuEvaluator.prepare` starts all of this for jobs a caller will evaluate one at a time (``r1build
resolve``); :meth:`GpuEvaluator.evaluate` of such a job waits for that work. Several jobs start with the one of the
fewest candidates, then the others most compute-sanitizer work first (:func:`~.jobs.start_order`): the first
compiles end soonest so the GPU has work early, and the longest background work starts right after.

A crash, an illegal address or a hang costs the candidate (``crashed`` / ``timed_out``), never the run: the worker
is killed if need be and restarted. Archs with no local GPU get the static gate's results (``stage="gate"``, no
timing) and a note; :attr:`GpuEvaluator.archs` says which archs are measured.

:class:`GpuEvaluator` is the face and the order of work; the pieces live beside it: :mod:`.slots` (one GPU, its
worker, comparer process and quiet lock), :mod:`.checking` (a candidate's correctness checks), :mod:`.sanitizing`
(compute-sanitizer runs and what they mean), :mod:`.timer` (floors, reference and candidate timing), :mod:`.jobs`
(the records a job and its candidates move through the stages in).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import logging
import os
import queue
import shutil
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import EvaluationError
from ..events import Note, Progress, emit
from ..gate.compile_slots import ranked
from ..judge import Evaluator, Job
from ..manifest.archs import parse_arch
from ..manifest.cdecl import declaration
from ..manifest.flags import rooted_flags
from ..manifest.reference import load_reference
from ..records import Candidate, Result, Status
from ..toolchain.nvcc import Toolchain
from ..toolchain.nvcc import toolchain as default_toolchain
from .compare_pool import ComparePool
from .correctness.candidate import run_checks
from .correctness.plan import ShapePlan, plan_checks
from .devices import GpuInfo, archs_of, detect_gpus, gpu_runs_arch
from .jobs import (
    Candidacy,
    Checked,
    JobKey,
    JobState,
    Readiness,
    Timed,
    chain,
    job_key,
    label,
    start_order,
    trim,
)
from .library import Library, LibraryFailure, build_library
from .options import EvaluatorOptions
from .sanitizer.schedule import KernelKey, Sanitizing
from .slots import Slot, library_key, make_slot
from .timing.measure import Timer
from .timing.stats import build_timing, finalists, with_regimes
from .timing.timeline import Meter, milestones
from .timing.torch_bar import with_torch

if TYPE_CHECKING:
    from ..cache import Cache

__all__ = ["GpuEvaluator"]

log = logging.getLogger(__name__)

T = TypeVar("T")


def _cleanup(
    slots: list[Slot], pools: list[ThreadPoolExecutor], judges: ComparePool, root: Path, own_root: bool
) -> None:
    start = time.perf_counter()
    for slot in slots:  # every worker at once: each exit tears a CUDA context down, waited for one by one below
        slot.worker.ask_to_exit()
        if slot.comparer is not None:
            slot.comparer.ask_to_exit()
    judges.close()
    closed = time.perf_counter()
    for slot in slots:
        slot.worker.close()
        if slot.comparer is not None:
            slot.comparer.close()
    exited = time.perf_counter()
    for pool in pools:
        pool.shutdown(wait=False, cancel_futures=True)
    if own_root:
        shutil.rmtree(root, ignore_errors=True)
    log.debug(
        "closed: comparing processes %.3f s, workers' exits %.3f s, pools and work directory %.3f s",
        closed - start,
        exited - closed,
        time.perf_counter() - exited,
    )


def _static_shared(gate: Future[list[Result]], index: int) -> bool:
    """Whether the gate's report gave candidate ``index`` of a job static shared memory (False where its verdicts
    are not in yet, or say nothing of it)."""
    if not gate.done() or gate.exception() is not None:
        return False
    results = gate.result()
    report = results[index].gate if index < len(results) else None
    return report is not None and report.shared_bytes > 0


class GpuEvaluator:
    """Judges candidates on local GPUs; implements :class:`~r1build.judge.Evaluator`.

    ``cache`` stores the static gate's verdicts and the per-device floors (a private cache in the work directory
    when None); ``options`` says how it judges (:class:`~.options.EvaluatorOptions`). Use as a context manager or
    call :meth:`close`; workers also end when this process does.
    """

    def __init__(
        self,
        cache: Cache | None = None,
        *,
        gpus: Sequence[GpuInfo] | None = None,
        gate: Evaluator | None = None,
        toolchain: Toolchain | None = None,
        workdir: Path | None = None,
        options: EvaluatorOptions | None = None,
    ) -> None:
        o = options or EvaluatorOptions()
        self.options = o
        """What it was made with."""
        self.gpus = list(gpus) if gpus is not None else detect_gpus()
        """The GPUs evaluated on."""
        self.sanitize = o.sanitize
        """Whether compute-sanitizer runs (where it works)."""
        self.in_order = o.in_order
        """:attr:`.options.EvaluatorOptions.in_order`, changeable between jobs."""
        self.time_before_sanitized = o.time_before_sanitized
        """:attr:`.options.EvaluatorOptions.time_before_sanitized`, changeable between jobs."""
        self.seed = o.seed
        """Base seed of every generated input."""
        self.call_timeout_s = o.call_timeout_s
        """Longest one correctness call may take before the candidate counts as hung."""
        self._meter = Meter()
        self.timeline = self._meter.timeline
        """When each piece of work ran, per job (:mod:`.timeline`)."""
        self._own_root = workdir is None
        self._root = Path(tempfile.mkdtemp(prefix="r1build-evaluate-")) if workdir is None else workdir
        self._root.mkdir(parents=True, exist_ok=True)
        self._cache = cache
        self._gate = gate
        self._toolchain = toolchain
        self._pool = ThreadPoolExecutor(
            max_workers=max(2, o.jobs or os.cpu_count() or 2), thread_name_prefix="r1build-evaluate"
        )
        self._libs: dict[tuple[str, str], Future[Library | LibraryFailure]] = {}
        self._gates: dict[tuple[KernelKey, tuple[str, ...]], Future[list[Result]]] = {}
        self._plans: dict[KernelKey, Future[list[ShapePlan]]] = {}
        self._ranks: dict[KernelKey, int] = {}
        self._lock = threading.Lock()
        self._ahead: dict[JobKey, JobState] = {}
        self._closing = False
        self._checks: dict[tuple[KernelKey, str], Future[Checked]] = {}
        self._notes: set[str] = set()
        self._make_slots(o)
        self._make_helpers(o)
        for slot in self._every_slot:  # a worker takes seconds to start: begin now, while the first compiles run
            self._warm(slot)

    def _make_slots(self, o: EvaluatorOptions) -> None:
        """Per GPU: the slot that times (with its comparer process), its check workers, and the threads that use
        them."""
        self._slots = [
            make_slot(gpu, self._root, sanitize=o.sanitize, nvcc=self._nvcc(), comparer=o.compare_on_gpu)
            for gpu in self.gpus
        ]
        # the check workers of each GPU: processes of their own (the slot's worker is the GPU thread's, for timing)
        self._checkers = {
            id(slot): [
                make_slot(slot.gpu, self._root, sanitize=False, nvcc=None, name=f"gpu{slot.gpu.index}-check{k}")
                for k in range(1, max(1, o.check_workers) + 1)
            ]
            for slot in self._slots
        }
        self._free: dict[int, queue.SimpleQueue[Slot]] = {}
        for slot in self._slots:
            self._free[id(slot)] = queue.SimpleQueue()
            for checker in self._checkers[id(slot)]:
                self._free[id(slot)].put(checker)
        self._check_pools = {
            id(slot): ThreadPoolExecutor(len(self._checkers[id(slot)]), thread_name_prefix=f"r1build-check{i}")
            for i, slot in enumerate(self._slots)
        }
        # per GPU, one thread that waits for the judging of a job's timed calls while the GPU times the next job
        self._settlers = {
            id(slot): ThreadPoolExecutor(1, thread_name_prefix=f"r1build-settle{i}")
            for i, slot in enumerate(self._slots)
        }
        self._every_slot = self._slots + [c for checkers in self._checkers.values() for c in checkers]

    def _make_helpers(self, o: EvaluatorOptions) -> None:
        """The sanitizer runs, the comparing processes, the timer, and the finalizer that ends them all."""
        self._sanitizing = Sanitizing(
            self._slots,
            submit=self._submit,
            note=self._note,
            count=self._meter.count,
            span=self.timeline.add,
            cuobjdump=self._cuobjdump,
            batch=o.sanitize_batch,
            runs=o.sanitize_runs,
            racecheck_first=o.racecheck_first,
            racecheck_runs=o.racecheck_runs,
        )
        cpu = self._pool  # (not self._submit: the finalizer below must hold nothing that holds self)
        # benchmark plans one at a time, in the order jobs start: beside the gate's compiles, not in their way
        planner = ThreadPoolExecutor(1, thread_name_prefix="r1build-bench-plans")
        self._compare_pool = ComparePool(
            o.compare_processes, submit=lambda fn, *a, **kw: cpu.submit(contextvars.copy_context().run, fn, *a, **kw)
        )
        self._timer = Timer(
            cache=lambda: self.cache,
            submit=lambda fn, *a, **kw: planner.submit(contextvars.copy_context().run, fn, *a, **kw),
            note=self._note,
            count=self._meter.count,
            root=self._root,
            seed=o.seed,
            call_timeout_s=o.call_timeout_s,
            timeout_s=o.timing_timeout_s,
            budget_s=o.timing_budget_s,
            compare_pool=self._compare_pool,
        )
        self._finalizer = weakref.finalize(
            self,
            _cleanup,
            self._every_slot,
            [*self._check_pools.values(), *self._settlers.values(), self._pool, self._sanitizing.pool, planner],
            self._compare_pool,
            self._root,
            self._own_root,
        )

    # -- public ------------------------------------------------------------------------------------------
    @property
    def archs(self) -> frozenset[str]:
        """Archs a local GPU can measure (``sm_90`` and ``sm_90a`` on an H200)."""
        return frozenset(a for gpu in self.gpus for a in archs_of(gpu))

    @property
    def stats(self) -> dict[str, float]:
        """Counters of this evaluator's work (candidates, built, checked, timed, worker restarts, sanitizer runs and
        splits) and seconds per phase: on the CPU pool ``gate_s``, ``build_s``, ``sanitizer_s`` (summed over threads;
        per tool ``sanitizer_<tool>_s``, and ``sanitizer_held_s`` of it stopped while the GPU timed) and
        ``judge_bench_s``; summed over the check workers ``wait_build_s`` and ``checks_s``; on the GPU thread
        ``check_phase_s`` (wall), ``wait_sanitizer_s``, ``warm_library_s`` (the library's first calls, sharing the GPU;
        ``warm_ahead_s`` of those made while no job was ready, counted in ``wait_ready_s`` too), ``wait_plan_s`` (for
        the job's benchmark plan, before taking the GPU), ``wait_quiet_s`` (for
        the GPU alone; from the hold on, ``wait_quiet_runs_s`` until the sanitizer runs stopped, checks going on, and
        ``wait_quiet_checks_s`` until then the running checks ended), ``checks_alone_s``, ``reference_s``,
        ``time_candidates_s`` (of which the worker's ``worker_sets_s``, ``worker_samples_s`` and ``worker_checks_s``)
        and ``judge_gpu_s`` (the comparer process, with ``outputs_judged_on_gpu`` it passed and
        ``outputs_judged_on_cpu`` written for the CPU's rules); ``wait_judge_s`` on the thread that settles a job's
        results while the GPU goes on."""
        with self._lock:
            restarts = sum(c.restarts for c in self._every_slot)
        return {**self._meter.counters(), "worker_restarts": restarts}

    def evaluate(self, job: Job) -> list[Result]:
        """One result per candidate of ``job``, in order (the work :meth:`prepare` started for the same job, where
        it did)."""
        with self._lock:
            ahead = self._ahead.pop(job_key(job, parse_arch(job.arch)), None)
        if ahead is not None:
            return self._results(ahead)
        return self.evaluate_all([job])[0]

    def evaluate_all(self, jobs: Sequence[Job]) -> list[list[Result]]:
        """Several jobs at once: every compile starts at once, and each GPU works through its jobs while the
        CPU cores compile and sanitize (faster than one :meth:`evaluate` after another)."""
        load = {id(slot): 0 for slot in self._slots}
        started = {i: self._start(jobs[i], load) for i in self._order(jobs)}
        states = [started[i] for i in range(len(jobs))]
        threads = self._drive(states)
        gate_only = {i: self._gate_only(s) for i, s in enumerate(states) if s.slot is None}
        for t in threads:
            t.join()
        return [gate_only[i] if s.slot is None else self._results(s) for i, s in enumerate(states)]

    def prepare(self, jobs: Sequence[Job]) -> None:
        """Start the work of jobs that will be evaluated later, one at a time (:meth:`evaluate`), so nothing waits
        job after job: the CPU work at once (gate, library builds, correctness plans, sanitizer runs), and on each
        GPU its jobs' checks and timing in this order. :meth:`evaluate` of the same job (the same spec, candidates
        and baseline) then waits for that work instead of starting its own. Jobs of archs without a local GPU are
        ignored."""
        load = {id(slot): 0 for slot in self._slots}
        started: dict[int, JobState] = {}
        for i in self._order(jobs):
            arch = parse_arch(jobs[i].arch)
            key = job_key(jobs[i], arch)
            with self._lock:
                if key in self._ahead or not any(gpu_runs_arch(s.gpu, arch) for s in self._slots):
                    continue
            state = self._start(jobs[i], load)
            with self._lock:
                self._ahead[key] = state
            started[i] = state
        self._drive([started[i] for i in sorted(started)])
        for slot in self._every_slot:
            self._warm(slot)

    def close(self) -> None:
        """Stop the workers and remove the work directory (at debug level, log where the time went first)."""
        self._closing = True
        if self._finalizer.alive and log.isEnabledFor(logging.DEBUG):
            self._log_account()
        self._finalizer()

    def _log_account(self) -> None:
        """The counters and, per job, when its kinds of work ended (:func:`~.timing.timeline.milestones`), as
        debug lines: a resolve run with ``-vv`` shows what the GPU thread waited for."""
        counters = {k: round(v, 2) for k, v in sorted(self.stats.items()) if v}
        log.debug("evaluator account: %s", json.dumps(counters, separators=(",", ":")))
        for row in milestones(self.timeline.spans()):
            cells = {k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()}
            log.debug("evaluator job: %s", json.dumps(cells, separators=(",", ":")))

    def __enter__(self) -> GpuEvaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- setup -------------------------------------------------------------------------------------------
    @property
    def toolchain(self) -> Toolchain:
        if self._toolchain is None:
            self._toolchain = default_toolchain()
        return self._toolchain

    @property
    def cache(self) -> Cache:
        if self._cache is None:
            from ..cache import Cache

            self._cache = Cache(self._root / "cache")
        return self._cache

    @property
    def gate(self) -> Evaluator:
        if self._gate is None:
            from ..gate.static import StaticGate

            self._gate = StaticGate(self.cache, toolchain=self._toolchain, keep_objects=self._root / "objects")
        return self._gate

    def _nvcc(self) -> str | None:
        if not self.sanitize:
            return None
        try:
            return self.toolchain.nvcc
        except Exception:
            return None

    def _cuobjdump(self) -> str | None:
        try:
            near = Path(self.toolchain.nvcc).resolve().parent / "cuobjdump"
        except Exception:
            return shutil.which("cuobjdump")
        return str(near) if near.is_file() else shutil.which("cuobjdump")

    def _note(self, message: str, kernel: str | None = None, arch: str | None = None) -> None:
        if message not in self._notes:
            self._notes.add(message)
            emit(Note("warning", message, kernel, arch))

    def _submit(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> Future[T]:
        """Run ``fn`` on the CPU pool with the caller's context (so events reach the caller's sink)."""
        return self._pool.submit(contextvars.copy_context().run, fn, *args, **kwargs)

    def _submit_ranked(self, rank: int | None, fn: Callable[..., T], *args: Any, **kwargs: Any) -> Future[T]:
        """:meth:`_submit`, its compiles waiting for slots at ``rank`` (:mod:`~r1build.gate.compile_slots`): a
        job's rank is its place in the order jobs were started (:func:`start_order`), so its compiles end first."""
        if rank is None:
            return self._submit(fn, *args, **kwargs)
        with ranked(rank):
            return self._submit(fn, *args, **kwargs)

    # -- the CPU side: gate, builds, plans, started as early as possible ---------------------------------
    def _library(
        self, job: Job, candidate: Candidate, arch: str, gate: Future[list[Result]] | None = None
    ) -> Future[Library | LibraryFailure]:
        """The variant's shared library for ``arch`` (built once). Where the gate keeps its objects, the build
        starts once ``gate`` (the job's verdicts) is in and links the gate's object instead of compiling."""
        key = (candidate.digest, arch)
        with self._lock:
            if key in self._libs:
                return self._libs[key]
            rank = self._ranks.get(KernelKey.of(job, arch))
            workdir = self._root / "build" / arch / candidate.digest[:24]
            build = functools.partial(
                self._meter.timed, "build_s", label(job, arch), self._build, job, candidate, arch, workdir
            )
            if gate is None or getattr(self.gate, "keep_objects", None) is None:
                self._libs[key] = self._submit_ranked(rank, build)
                return self._libs[key]
            done: Future[Library | LibraryFailure] = Future()
            gate.add_done_callback(lambda _: chain(self._submit_ranked(rank, build), done))
            self._libs[key] = done
            return done

    def _build(self, job: Job, candidate: Candidate, arch: str, workdir: Path) -> Library | LibraryFailure:
        object_for = getattr(self.gate, "object_for", None)
        library_for = getattr(self.gate, "library_for", None)
        compiled = object_for(candidate.digest, arch) if callable(object_for) else None
        linked = library_for(candidate.digest, arch) if callable(library_for) else None
        if linked is not None:
            self._meter.count("library_from_gate", 1)
        elif compiled is not None:
            self._meter.count("linked_from_gate", 1)
        return build_library(
            candidate,
            job.spec.name,
            arch,
            flags=rooted_flags(job.manifest.settings.nvcc_flags, job.manifest.root),
            toolchain=self.toolchain,
            workdir=workdir,
            declaration=declaration(job.spec),
            compiled_object=compiled,
            linked_library=linked,
        )

    def _entries(self, job: Job) -> list[Candidacy]:
        entries = [Candidacy(candidate=c, visible=True, index=i) for i, c in enumerate(job.candidates)]
        if job.baseline is not None and all(c.digest != job.baseline.digest for c in job.candidates):
            entries.append(Candidacy(candidate=job.baseline, visible=False, index=len(entries)))
        return entries

    def _queue(
        self, job: Job, arch: str, entries: list[Candidacy]
    ) -> tuple[Future[list[Result]], Future[list[ShapePlan]]]:
        """The gate and plan futures of a job (made once, reused by a later call), and its library builds."""
        kernel = KernelKey.of(job, arch)
        gate_key = (kernel, tuple(e.candidate.digest for e in entries))
        with self._lock:
            rank = self._ranks.setdefault(kernel, len(self._ranks))  # in the order jobs are started (start_order)
            gate = self._gates.get(gate_key)
            if gate is None:
                gate = self._submit_ranked(
                    rank,
                    self._meter.timed,
                    "gate_s",
                    label(job, arch),
                    self.gate.evaluate,
                    Job(job.manifest, job.spec, arch, [e.candidate for e in entries]),
                )
                self._gates[gate_key] = gate
            plan = self._plans.get(kernel)
            if plan is None:
                reference = load_reference(job.manifest.root, job.spec.reference)
                plan = self._submit(plan_checks, job.spec, reference, seed=self.seed)
                self._plans[kernel] = plan
        slot = next((s for s in self._slots if gpu_runs_arch(s.gpu, parse_arch(arch))), None)
        for index, entry in enumerate(entries):
            library = self._library(job, entry.candidate, arch, gate)
            shared = functools.partial(_static_shared, gate, index)
            self._sanitizing.start(job, arch, entry.candidate, library, plan, static_shared=shared)
            if slot is not None:
                self._check_later(slot, job, arch, entry, gate, library, plan)
        return gate, plan

    def _check_later(
        self,
        slot: Slot,
        job: Job,
        arch: str,
        entry: Candidacy,
        gate: Future[list[Result]],
        library: Future[Library | LibraryFailure],
        plan: Future[list[ShapePlan]],
    ) -> None:
        """Start a candidate's correctness checks in the background (once): they run on the GPU's check workers as
        soon as its library is built, whatever job the GPU thread is at, and pause while the GPU times."""
        key = (KernelKey.of(job, arch), entry.candidate.digest)
        with self._lock:
            if key in self._checks:
                return
            self._checks[key] = self._check_pools[id(slot)].submit(
                contextvars.copy_context().run,
                self._check,
                slot,
                job,
                arch,
                entry.candidate,
                entry.index,
                gate,
                library,
                plan,
            )

    def _warm(self, slot: Slot) -> None:
        """Start the worker and probe the sanitizer in the background (each takes seconds)."""
        with self._lock:
            if slot.warming is None:
                slot.warming = self._submit(self._warm_now, slot)

    @staticmethod
    def _warm_now(slot: Slot) -> None:
        if slot.busy.acquire(blocking=False):  # never wait: the GPU thread starts the worker itself if busy
            try:
                with contextlib.suppress(EvaluationError):
                    slot.ensure_worker()
            finally:
                slot.busy.release()
        slot.start_comparer()
        if slot.sanitizer is not None:
            slot.sanitizer.available(slot.workdir)

    def _order(self, jobs: Sequence[Job]) -> list[int]:
        """The order ``jobs`` start in (:func:`start_order` with this evaluator's options)."""
        return start_order(jobs, small_first=self.options.small_first, by=self.options.start_by)

    def _start(self, job: Job, load: dict[int, int]) -> JobState:
        """Queue the job's compiles and plan; assign it to the least loaded GPU of its arch."""
        arch = parse_arch(job.arch)
        slots = [s for s in self._slots if gpu_runs_arch(s.gpu, arch)]
        entries = self._entries(job)
        self._meter.count("candidates", len(job.candidates))
        if not slots:
            return JobState(job=job, arch=arch, slot=None, entries=entries)
        slot = min(slots, key=lambda s: (load[id(s)], s.gpu.index))
        load[id(slot)] += len(entries)
        self._warm(slot)
        gate, plan = self._queue(job, arch, entries)
        for entry in entries:
            entry.gate = gate
            entry.library = self._library(job, entry.candidate, arch)
            entry.sanitizers = self._sanitizing.runs(job, arch, entry.candidate)
        state = JobState(job=job, arch=arch, slot=slot, entries=entries)
        state.plan = plan
        state.bench = self._timer.bench_plan(job, arch, slot)
        return state

    def _gate_only(self, state: JobState) -> list[Result]:
        known = ", ".join(sorted(self.archs)) or "none"
        self._note(
            f"no local GPU runs {state.arch} (measurable here: {known}); {state.job.spec.name} keeps the "
            f"static gate's verdicts for {state.arch}",
            state.job.spec.name,
            state.arch,
        )
        return self.gate.evaluate(
            Job(state.job.manifest, state.job.spec, state.arch, state.job.candidates, state.job.baseline)
        )

    # -- the GPU side: checks, then the sanitizers' outcomes, then timing alone ---------------------------
    def _drive(self, states: list[JobState]) -> list[threading.Thread]:
        """Start a thread per GPU that works through its jobs among ``states`` (:meth:`_run_slot`)."""
        by_slot: dict[int, list[JobState]] = {}
        for state in states:
            if state.slot is not None:
                by_slot.setdefault(self._slots.index(state.slot), []).append(state)
        threads = [
            threading.Thread(
                target=contextvars.copy_context().run,
                args=(self._run_slot, slot_states),
                name=f"r1build-gpu{i}",
                daemon=True,
            )
            for i, slot_states in by_slot.items()
        ]
        for t in threads:
            t.start()
        return threads

    def _results(self, state: JobState) -> list[Result]:
        """The visible results of a job driven on a GPU, once they are all in."""
        try:
            state.done.result()
        except EvaluationError:
            raise
        except BaseException as exc:
            raise EvaluationError(f"GPU evaluation failed: {type(exc).__name__}: {exc}") from exc
        return [
            e.result or self._result(state, e, "crashed", "no verdict: the evaluator lost track of it")
            for e in state.entries
            if e.visible
        ]

    def _run_slot(self, states: list[JobState]) -> None:
        """The GPU's jobs, each once its background checks and sanitizer runs are in (:meth:`_next_ready`): its
        shared-memory checks and timing with the GPU to itself (checks wait, sanitizer runs stop at their next
        call), then on to the next job while the settling thread waits for the judging of what the timed calls
        left. Every state's ``done`` is set, to the error where one stopped the work (the job at hand included)."""
        slot = states[0].slot
        assert slot is not None
        total = sum(len(state.entries) for state in states)
        done = 0
        settler = self._settlers[id(slot)]
        pending = list(states)
        current: JobState | None = None  # taken from pending, not yet handed to the settling thread
        readiness = Readiness()
        try:
            for state in states:
                readiness.watch(state, self._background(state))
            for timed in range(1, len(states) + 1):
                start = time.perf_counter()
                self._warm_ahead(pending, slot)
                state = current = pending.pop(self._next_ready(pending, readiness))
                name = label(state.job, state.arch)
                self._meter.phase("wait_ready_s", start, name)
                start = time.perf_counter()
                for entry in state.entries:
                    self._apply_checks(state, entry)
                    done += 1
                    emit(Progress("evaluate: checks", done, total, {"device": slot.gpu.name}))
                self._meter.phase("check_phase_s", start, name)
                start = time.perf_counter()
                for entry in state.entries if not self.time_before_sanitized else ():
                    self._finish_sanitizers(state, entry)
                self._meter.phase("wait_sanitizer_s", start, name)
                start = time.perf_counter()
                timing = self._time_alone(state, slot, name)
                self._meter.phase("timing_s", start, name)
                settler.submit(contextvars.copy_context().run, self._settle, state, timing)
                current = None
                emit(Progress("evaluate: timing", timed, len(states), {"device": slot.gpu.name}))
        except BaseException as exc:
            for state in ([current] if current is not None else []) + pending:
                if not state.done.done():
                    state.done.set_exception(exc)

    def _time_alone(self, state: JobState, slot: Slot, name: str) -> Timed | None:
        """A job's timing with the GPU to itself: first the library's first calls, sharing the GPU with the checks
        (what cupy compiles for it), then the taking (:class:`~.slots.Quiet`: sanitizer runs stop, then checks) and
        :meth:`_time_job`."""
        with slot.busy:
            if not state.warmed and any(e.result is None for e in state.entries):
                self._warm_library(state, slot, "warm_library_s")
            if state.bench is not None:  # made on the CPU: waited for before the GPU is taken alone, not after
                self._meter.timed("wait_plan_s", name, wait_for, [state.bench])  # (what it raised is met in timing)
            waited = time.perf_counter()
            with slot.quiet.exclusive() as taking:
                self._meter.phase("wait_quiet_s", waited, name)
                self._meter.count("wait_quiet_checks_s", taking.checks_s)
                self._meter.count("wait_quiet_runs_s", taking.runs_s)
                return self._time_job(state, slot)

    def _warm_ahead(self, pending: list[JobState], slot: Slot) -> None:
        """While no pending job is ready, the library's first calls of those not warmed yet, in order: what cupy
        compiles for a kernel's reference (seconds of NVRTC for some) is compiled while the GPU thread would only
        wait for checks and sanitizer runs, not between one job's taking and the next (:meth:`_time_alone`)."""
        for state in pending:
            if self._closing or any(s.ready for s in pending):
                return
            if not state.warmed:
                with slot.busy:
                    self._warm_library(state, slot, "warm_ahead_s")

    def _warm_library(self, state: JobState, slot: Slot, counter: str) -> None:
        """The library's first calls for ``state``'s kernel, sharing the GPU with the checks, as phase ``counter``
        (the caller holds ``slot.busy``)."""
        state.warmed = True
        with slot.quiet.shared():
            self._meter.timed(counter, label(state.job, state.arch), self._timer.warm_library, state.job, slot)

    def _next_ready(self, pending: list[JobState], readiness: Readiness) -> int:
        """Which of ``pending`` the GPU takes next: the first, in the order given, whose background work (checks and
        compute-sanitizer runs) is all in as ``readiness`` watches it, waiting for the first to become so. A job
        whose sanitizer runs are still going does not hold up one behind it that is ready; with ``in_order`` the
        first is taken as it comes."""
        found = 0 if self.in_order and not self._closing else readiness.first(pending, lambda: self._closing)
        if found is None or self._closing:
            raise EvaluationError("the GPU evaluator was closed before it got to this job")
        return found

    def _background(self, state: JobState) -> list[Future[Any]]:
        """The futures of a job's checks on the check workers and of its compute-sanitizer runs."""
        kernel = KernelKey.of(state.job, state.arch)
        with self._lock:
            checks = [self._checks.get((kernel, e.candidate.digest)) for e in state.entries]
        # with time_before_sanitized the sanitizers' verdicts are applied when the job settles, not awaited here
        runs = (
            []
            if self.time_before_sanitized
            else [e.sanitizers.outcomes for e in state.entries if e.sanitizers is not None]
        )
        return [f for f in checks if f is not None] + runs

    def _settle(self, state: JobState, timing: Timed | None) -> None:
        """A job's results once the judging of its timed calls is in (on the settling thread)."""
        start = time.perf_counter()
        try:
            if timing is not None:
                self._settle_timing(state, timing)
            if self.time_before_sanitized:
                for entry in state.entries:
                    self._finish_sanitizers(state, entry)
        except BaseException as exc:
            state.done.set_exception(exc)
        else:
            state.done.set_result(None)
            if state.slot is not None:  # its benchmark plan's files go now (GBs at large shapes)
                self._timer.release(state.job, state.arch, state.slot)
        finally:
            self.timeline.add("settle_s", label(state.job, state.arch), start)

    def _apply_checks(self, state: JobState, entry: Candidacy) -> None:
        """A candidate's background checks (started now where no earlier call did) become its result if it
        failed them."""
        assert entry.gate is not None and entry.library is not None and state.plan is not None
        assert state.slot is not None
        self._check_later(state.slot, state.job, state.arch, entry, entry.gate, entry.library, state.plan)
        with self._lock:
            future = self._checks[(KernelKey.of(state.job, state.arch), entry.candidate.digest)]
        found = future.result()
        if isinstance(found, Result):
            entry.result = found
        elif found is not None:
            entry.result = self._result(state, entry, *found)

    def _result(self, state: JobState, entry: Candidacy, status: Status, detail: str = "", **kw: Any) -> Result:
        gate = entry.gate.result()[entry.index] if entry.gate is not None else None
        return Result(
            candidate=entry.candidate.digest,
            arch=state.arch,
            status=status,
            stage="evaluate",
            detail=trim(detail),
            gate=gate.gate if gate else None,
            device=state.slot.gpu.name if state.slot else None,
            toolchain=gate.toolchain if gate else self.toolchain.ident,
            **kw,
        )

    def _check(
        self,
        slot: Slot,
        job: Job,
        arch: str,
        candidate: Candidate,
        index: int,
        gate: Future[list[Result]],
        library: Future[Library | LibraryFailure],
        plan: Future[list[ShapePlan]],
    ) -> Checked:
        """One candidate's checks that share the GPU, on a free check worker (see :meth:`_check_later`)."""
        runs = self._sanitizing.runs(job, arch, candidate)
        start = time.perf_counter()
        verdicts = gate.result()
        if not verdicts[index].ok:
            self._sanitizing.cancel(job, arch, candidate, runs)
            return verdicts[index]
        lib = library.result()
        plans = plan.result()
        self._meter.phase("wait_build_s", start, label(job, arch))
        if isinstance(lib, LibraryFailure):
            return (lib.status, lib.detail)
        self._meter.count("built", 1)
        checker = self._free[id(slot)].get()
        try:
            with checker.busy:  # the quiet lock is shared per shape (run_checks' hold), so timing waits less
                start = time.perf_counter()
                verdict = run_checks(
                    checker,
                    job.spec,
                    lib,
                    plans,
                    timeout_s=self.call_timeout_s,
                    part="shared",
                    count=self._meter.count,
                    hold=slot.quiet.shared,
                )
                self._meter.phase("checks_s", start, label(job, arch))
        finally:
            self._free[id(slot)].put(checker)
        self._meter.count("checked", 1)
        if verdict is None:
            return None
        # not holding the quiet lock: the racecheck run this waits for may still have to start
        race = self._sanitizing.race_found(job, arch, runs, verdict, wait_s=max(60.0, 6 * self.call_timeout_s))
        self._sanitizing.cancel(job, arch, candidate, runs)
        return (verdict.status, race or verdict.detail)

    def _cancel_sanitizers(self, state: JobState, entry: Candidacy) -> None:
        self._sanitizing.cancel(state.job, state.arch, entry.candidate, entry.sanitizers)

    def _finish_sanitizers(self, state: JobState, entry: Candidacy) -> None:
        """A candidate's compute-sanitizer verdict, waited for: a finding (or an unfinished run) becomes its result.
        One that has a verdict already has its runs canceled; with :attr:`time_before_sanitized` (called once the
        job is timed) a pass is no such verdict: the finding replaces it."""
        decided = entry.result is not None and not (self.time_before_sanitized and entry.result.ok)
        if decided or entry.sanitizers is None:
            self._cancel_sanitizers(state, entry)
            return
        found = self._sanitizing.verdict(state.job, state.arch, entry.sanitizers.outcomes.result())
        if found is not None:
            entry.result = self._result(state, entry, *found)

    def _time_job(self, state: JobState, slot: Slot) -> Timed | None:
        """The GPU part of a job's timing (the caller holds the GPU alone): the shared-memory checks, the floors
        and the reference, and each survivor's timed calls; what they left is judged on the CPU pool."""
        survivors = [e for e in state.entries if e.result is None]
        if not survivors:
            return None
        assert state.bench is not None and state.plan is not None
        start = time.perf_counter()
        for entry in survivors:  # the checks that need the GPU to themselves: shared memory filled before a call
            assert entry.library is not None
            lib = entry.library.result()
            assert isinstance(lib, Library)
            verdict = run_checks(
                slot, state.job.spec, lib, state.plan.result(), timeout_s=self.call_timeout_s, part="alone"
            )
            if verdict is not None:
                entry.result = self._result(state, entry, verdict.status, verdict.detail)
        survivors = [e for e in survivors if e.result is None]
        self._meter.phase("checks_alone_s", start, label(state.job, state.arch))
        if not survivors:
            return None
        start = time.perf_counter()
        floors = self._timer.floors(slot)
        library = self._timer.library(state.job, slot)
        torch = self._timer.torch(state.job, slot)
        self._meter.phase("reference_s", start, label(state.job, state.arch))
        start = time.perf_counter()
        judged = []
        medians: dict[str, float] = {}
        libs: dict[str, tuple[Candidacy, Library]] = {}
        for entry in survivors:  # the GPU times one after another; the CPU pool judges what each left
            assert entry.library is not None
            lib = entry.library.result()
            assert isinstance(lib, Library)
            libs[library_key(lib)] = (entry, lib)
            judged.append((entry, self._timer.time(state.job, slot, lib, state.bench, floors, medians)))
        for key in finalists(medians):  # the fastest back to back, timed again with idle gaps (cold L2)
            entry, lib = libs[key]
            entry.idle = self._timer.idle_time(state.job, slot, lib, state.bench)
        self._meter.phase("time_candidates_s", start, label(state.job, state.arch))
        return Timed(judged, floors, library, torch)

    def _settle_timing(self, state: JobState, timed: Timed) -> None:
        """Each timed survivor's result, once what its calls left is judged (the GPU is free meanwhile)."""
        start = time.perf_counter()
        for entry, future in timed.judged:
            outcome = future.result()
            if isinstance(outcome, list):
                entry.stats = outcome
                self._meter.count("timed", 1)
            else:
                entry.result = self._result(state, entry, outcome.status, outcome.detail)
        self._meter.phase("wait_judge_s", start, label(state.job, state.arch))
        baseline_us = None
        if state.job.baseline is not None:
            base = next((e for e in state.entries if e.candidate.digest == state.job.baseline.digest), None)
            if base is not None and base.stats:
                baseline_us = base.stats[0].median_us
        for entry, _ in timed.judged:
            if entry.stats is None:
                continue
            timing = build_timing(
                state.job.spec,
                entry.stats,
                floors=timed.floors,
                baseline_us=baseline_us,
                library=timed.library,
            )
            timing = with_torch(with_regimes(timing, entry.idle), timed.torch)
            entry.result = self._result(state, entry, "passed", timing=timing)
