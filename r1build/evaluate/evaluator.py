"""The GPU evaluator: static gate, shared-library build, correctness and timing on a GPU of the job's arch.

Per job (one kernel, one arch), in this order:

1. the static gate judges every candidate (:class:`~r1build.gate.static.StaticGate`, cached), while the same
   variants are built as shared libraries for the arch (:mod:`.library`) on the CPU cores;
2. a worker process on a GPU of that arch runs the correctness plan (:mod:`.checks`) of each library that passed;
   compute-sanitizer runs (:mod:`.sanitize`) start as soon as a library is built, overlapping the worker's
   checks, and are canceled for a candidate that fails them;
3. once every check and sanitizer run of the GPU's jobs is in, the GPU times the survivors, the baseline and the
   reference (with cupy) alone: sanitizer runs of jobs prepared for later wait while it times.

A crash, an illegal address or a hang costs the candidate (``crashed`` / ``timed_out``), never the run: the worker
is killed if need be and restarted. Archs with no local GPU get the static gate's results (``stage="gate"``, no
timing) and a note; :attr:`GpuEvaluator.archs` says which archs are measured.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import shutil
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np

from ..errors import EvaluationError
from ..events import Note, Progress, emit
from ..judge import Evaluator, Job
from ..manifest.archs import parse_arch
from ..manifest.cdecl import declaration
from ..manifest.reference import load_reference
from ..records import Candidate, Result, Status
from ..toolchain import Toolchain
from ..toolchain import toolchain as default_toolchain
from .bench_checks import BenchPlan, implausible, judge_bench, plan_bench, shape_requests
from .checks import (
    ShapePlan,
    Verdict,
    arg_codes,
    arg_items,
    check_request,
    diagnose,
    diagnosis_plan,
    judge_shape,
    needs_diagnosis,
    plan_checks,
)
from .child.messages import CheckReply, FloorsRequest, LoadRequest, SanitizeArray, SanitizeJob, SanitizeShape, TimeReply
from .devices import GpuInfo, archs_of, detect_gpus, gpu_runs_arch, visible_devices_value
from .floors import FLOORS_NAMESPACE, DeviceFloors, bytes_moved
from .library import Library, LibraryFailure, build_library
from .process import WorkerDied, WorkerHandle, WorkerTimedOut, scrubbed_environment
from .sanitize import TOOLS, SanitizerOutcome, SanitizerRunner, find_sanitizer, uses_shared_memory
from .timing import SampleStats, build_timing, reference_request, summarize, time_request

if TYPE_CHECKING:
    from ..cache.store import Cache

__all__ = ["GpuEvaluator"]

T = TypeVar("T")
_DETAIL_LIMIT = 4000
_SANITIZE_MAX_BYTES = 2 << 20
"""Shapes whose arrays together exceed this are too large for a quick sanitizer run."""


def _trim(text: str) -> str:
    return text if len(text) <= _DETAIL_LIMIT else text[: _DETAIL_LIMIT - 3] + "..."


class _Quiet:
    """Keeps the GPU quiet while it times: sanitizer runs share it, timing takes it alone (new runs wait, and
    timing waits for the running ones to end)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._shared = 0
        self._exclusive = False

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._exclusive)
            self._shared += 1
        try:
            yield
        finally:
            with self._cond:
                self._shared -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._exclusive)
            self._exclusive = True
            self._cond.wait_for(lambda: self._shared == 0)
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()


@dataclass
class _SanitizeJob:
    """compute-sanitizer inputs of one kernel on one arch, shared by its candidates."""

    directory: Path
    shapes: list[SanitizeShape]
    """Harness shapes (the inputs are files in ``directory``)."""


@dataclass
class _Slot:
    """One GPU: its worker, sanitizer runner and measured floors."""

    gpu: GpuInfo
    worker: WorkerHandle
    sanitizer: SanitizerRunner | None
    workdir: Path
    loaded: set[str] = field(default_factory=set)
    generation: int = 0
    floors: DeviceFloors | None = None
    warming: Future[None] | None = None
    busy: threading.Lock = field(default_factory=threading.Lock)
    """Held while a thread talks to the worker."""
    quiet: _Quiet = field(default_factory=_Quiet)
    """Shared by sanitizer runs, taken alone while timing."""


@dataclass
class _Entry:
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
    verdict: Verdict | None = None
    sanitizers: Future[list[SanitizerOutcome]] | None = None
    sanitize_file: Path | None = None
    stats: list[SampleStats] | None = None


@dataclass
class _JobState:
    job: Job
    arch: str
    slot: _Slot | None
    entries: list[_Entry]
    plan: Future[list[ShapePlan]] | None = None
    bench: Future[BenchPlan] | None = None


def _cleanup(slots: list[_Slot], pool: ThreadPoolExecutor, root: Path, own_root: bool) -> None:
    for slot in slots:
        slot.worker.close()
    pool.shutdown(wait=False, cancel_futures=True)
    if own_root:
        shutil.rmtree(root, ignore_errors=True)


class GpuEvaluator:
    """Judges candidates on local GPUs; implements :class:`~r1build.judge.Evaluator`.

    ``cache`` stores the static gate's verdicts and the per-device floors (a private cache in the work directory
    when None). Use as a context manager or call :meth:`close`; workers also end when this process does.
    """

    def __init__(self, cache: Cache | None = None, *, gpus: Sequence[GpuInfo] | None = None,
                 gate: Evaluator | None = None, toolchain: Toolchain | None = None, sanitize: bool = True,
                 seed: int = 0, call_timeout_s: float = 10.0, timing_timeout_s: float = 30.0,
                 timing_budget_s: float = 0.3, jobs: int | None = None, workdir: Path | None = None) -> None:
        self.gpus = list(gpus) if gpus is not None else detect_gpus()
        """The GPUs evaluated on."""
        self.sanitize = sanitize
        """Whether compute-sanitizer runs (where it works)."""
        self.seed = seed
        """Base seed of every generated input."""
        self.call_timeout_s = call_timeout_s
        """Longest one correctness call may take before the candidate counts as hung."""
        self.timing_timeout_s = timing_timeout_s
        """Longest the timing of a benchmark shape may go without progress (the worker reports each batch of
        samples), so a kernel that hangs only at the benchmark size costs seconds, not minutes."""
        self.timing_budget_s = timing_budget_s
        """GPU seconds of samples per candidate and benchmark shape."""
        self.stats: dict[str, float] = {"candidates": 0, "built": 0, "checked": 0, "timed": 0,
                                        "worker_restarts": 0}
        """Counters of this evaluator's work."""
        self._own_root = workdir is None
        self._root = Path(tempfile.mkdtemp(prefix="r1build-evaluate-")) if workdir is None else workdir
        self._root.mkdir(parents=True, exist_ok=True)
        self._cache = cache
        self._gate = gate
        self._toolchain = toolchain
        self._pool = ThreadPoolExecutor(max_workers=max(2, jobs or os.cpu_count() or 2),
                                        thread_name_prefix="r1build-evaluate")
        self._libs: dict[tuple[str, str], Future[Library | LibraryFailure]] = {}
        self._gates: dict[tuple[str, ...], Future[list[Result]]] = {}
        self._plans: dict[tuple[str, ...], Future[list[ShapePlan]]] = {}
        self._benches: dict[tuple[str, ...], Future[BenchPlan]] = {}
        self._sanitized: dict[tuple[str, ...], tuple[Future[list[SanitizerOutcome]], Path]] = {}
        self._sanitize_jobs: dict[tuple[str, ...], _SanitizeJob] = {}
        self._lock = threading.Lock()
        self._slots = [self._make_slot(gpu) for gpu in self.gpus]
        self._notes: set[str] = set()
        self._finalizer = weakref.finalize(self, _cleanup, self._slots, self._pool, self._root, self._own_root)
        for slot in self._slots:  # a worker takes seconds to start: begin now, while the first compiles run
            self._warm(slot)

    # -- public ------------------------------------------------------------------------------------------
    @property
    def archs(self) -> frozenset[str]:
        """Archs a local GPU can measure (``sm_90`` and ``sm_90a`` on an H200)."""
        return frozenset(a for gpu in self.gpus for a in archs_of(gpu))

    def evaluate(self, job: Job) -> list[Result]:
        """One result per candidate of ``job``, in order."""
        return self.evaluate_all([job])[0]

    def evaluate_all(self, jobs: Sequence[Job]) -> list[list[Result]]:
        """Several jobs at once: every compile starts at once, and each GPU works through its jobs while the
        CPU cores compile and sanitize (faster than one :meth:`evaluate` after another)."""
        load = {id(slot): 0 for slot in self._slots}
        states = [self._start(job, load) for job in jobs]
        by_slot: dict[int, list[_JobState]] = {}
        for state in states:
            if state.slot is not None:
                by_slot.setdefault(self._slots.index(state.slot), []).append(state)
        errors: list[BaseException] = []

        def drive(slot_states: list[_JobState]) -> None:
            try:
                self._run_slot(slot_states)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=contextvars.copy_context().run, args=(drive, s), name=f"r1build-gpu{i}")
                   for i, s in by_slot.items()]
        for t in threads:
            t.start()
        gate_only = {i: self._gate_only(s) for i, s in enumerate(states) if s.slot is None}
        for t in threads:
            t.join()
        if errors:
            exc = errors[0]
            if isinstance(exc, EvaluationError):
                raise exc
            raise EvaluationError(f"GPU evaluation failed: {type(exc).__name__}: {exc}") from exc
        return [gate_only[i] if s.slot is None else
                [e.result or self._result(s, e, "crashed", "no verdict: the evaluator lost track of it")
                 for e in s.entries if e.visible]
                for i, s in enumerate(states)]

    def close(self) -> None:
        """Stop the workers and remove the work directory."""
        self._finalizer()

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
            from ..cache.store import Cache

            self._cache = Cache(self._root / "cache")
        return self._cache

    @property
    def gate(self) -> Evaluator:
        if self._gate is None:
            from ..gate.static import StaticGate

            self._gate = StaticGate(self.cache, toolchain=self._toolchain)
        return self._gate

    def _environment(self, gpu: GpuInfo, home: Path) -> dict[str, str]:
        package_parent = str(Path(__file__).resolve().parents[2])
        path = [package_parent, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
        return scrubbed_environment(os.environ, home=home, extra={
            "PYTHONPATH": os.pathsep.join(path),
            "CUDA_VISIBLE_DEVICES": visible_devices_value(gpu.index),
        })

    def _make_slot(self, gpu: GpuInfo) -> _Slot:
        workdir = self._root / f"gpu{gpu.index}"
        (workdir / "home").mkdir(parents=True, exist_ok=True)
        env = self._environment(gpu, workdir / "home")
        worker = WorkerHandle([sys.executable, "-m", "r1build.evaluate.child.worker"], env, workdir, name="worker")
        sanitizer = None
        if self.sanitize:
            try:
                nvcc = self.toolchain.nvcc
            except Exception:
                nvcc = None
            exe = find_sanitizer(nvcc)
            if exe is not None:
                sanitizer = SanitizerRunner(exe, env)
        return _Slot(gpu, worker, sanitizer, workdir)

    def _note(self, message: str, kernel: str | None = None, arch: str | None = None) -> None:
        if message not in self._notes:
            self._notes.add(message)
            emit(Note("warning", message, kernel, arch))

    def _submit(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> Future[T]:
        """Run ``fn`` on the CPU pool with the caller's context (so events reach the caller's sink)."""
        return self._pool.submit(contextvars.copy_context().run, fn, *args, **kwargs)

    def _library(self, job: Job, candidate: Candidate, arch: str) -> Future[Library | LibraryFailure]:
        key = (candidate.digest, arch)
        with self._lock:
            if key not in self._libs:
                workdir = self._root / "build" / arch / candidate.digest[:24]
                self._libs[key] = self._submit(
                    build_library, candidate, job.spec.name, arch, flags=job.manifest.settings.nvcc_flags,
                    toolchain=self.toolchain, workdir=workdir, declaration=declaration(job.spec))
            return self._libs[key]

    def prepare(self, jobs: Sequence[Job]) -> None:
        """Start the CPU work of jobs that will be evaluated later (gate, library builds, correctness plans), so
        a caller that evaluates one job at a time (:meth:`evaluate`) does not wait for compiles job after job.
        Starts the GPU workers too. Jobs of archs without a local GPU are ignored."""
        for job in jobs:
            arch = parse_arch(job.arch)
            if any(gpu_runs_arch(s.gpu, arch) for s in self._slots):
                self._queue(job, arch, self._entries(job))
        for slot in self._slots:
            self._warm(slot)

    def _entries(self, job: Job) -> list[_Entry]:
        entries = [_Entry(c, True, i) for i, c in enumerate(job.candidates)]
        if job.baseline is not None and all(c.digest != job.baseline.digest for c in job.candidates):
            entries.append(_Entry(job.baseline, False, len(entries)))
        return entries

    def _queue(self, job: Job, arch: str, entries: list[_Entry]) -> tuple[Future[list[Result]],
                                                                          Future[list[ShapePlan]]]:
        """The gate and plan futures of a job (made once, reused by a later call), and its library builds."""
        digests = tuple(e.candidate.digest for e in entries)
        key = (str(job.manifest.path), job.spec.name, arch)
        gate_key = key + digests
        with self._lock:
            gate = self._gates.get(gate_key)
            if gate is None:
                gate = self._submit(self.gate.evaluate,
                                    Job(job.manifest, job.spec, arch, [e.candidate for e in entries]))
                self._gates[gate_key] = gate
            plan = self._plans.get(key)
            if plan is None:
                reference = load_reference(job.manifest.root, job.spec.reference)
                plan = self._submit(plan_checks, job.spec, reference, seed=self.seed)
                self._plans[key] = plan
        for entry in entries:
            self._sanitize_when_built(job, arch, entry.candidate, self._library(job, entry.candidate, arch), plan)
        return gate, plan

    def _warm(self, slot: _Slot) -> None:
        """Start the worker and probe the sanitizer in the background (each takes seconds)."""
        with self._lock:
            if slot.warming is None:
                slot.warming = self._submit(self._warm_now, slot)

    def _warm_now(self, slot: _Slot) -> None:
        if slot.busy.acquire(blocking=False):  # never wait: the GPU thread starts the worker itself if busy
            try:
                with contextlib.suppress(EvaluationError):
                    self._ensure_worker(slot)
            finally:
                slot.busy.release()
        if slot.sanitizer is not None:
            slot.sanitizer.available(slot.workdir)

    def _start(self, job: Job, load: dict[int, int]) -> _JobState:
        """Queue the job's compiles and plan; assign it to the least loaded GPU of its arch."""
        arch = parse_arch(job.arch)
        slots = [s for s in self._slots if gpu_runs_arch(s.gpu, arch)]
        entries = self._entries(job)
        self.stats["candidates"] += len(job.candidates)
        if not slots:
            return _JobState(job, arch, None, entries)
        slot = min(slots, key=lambda s: (load[id(s)], s.gpu.index))
        load[id(slot)] += len(entries)
        self._warm(slot)
        gate, plan = self._queue(job, arch, entries)
        for entry in entries:
            entry.gate = gate
            entry.library = self._library(job, entry.candidate, arch)
            found = self._sanitized.get((str(job.manifest.path), job.spec.name, arch, entry.candidate.digest))
            if found is not None:
                entry.sanitizers, entry.sanitize_file = found
        state = _JobState(job, arch, slot, entries)
        state.plan = plan
        state.bench = self._bench_plan(state, slot)
        return state

    def _gate_only(self, state: _JobState) -> list[Result]:
        known = ", ".join(sorted(self.archs)) or "none"
        self._note(f"no local GPU runs {state.arch} (measurable here: {known}); {state.job.spec.name} keeps the "
                   f"static gate's verdicts for {state.arch}", state.job.spec.name, state.arch)
        return self.gate.evaluate(Job(state.job.manifest, state.job.spec, state.arch, state.job.candidates,
                                      state.job.baseline))

    # -- the GPU side ------------------------------------------------------------------------------------
    def _run_slot(self, states: list[_JobState]) -> None:
        slot = states[0].slot
        assert slot is not None
        with slot.busy:
            self._run_slot_locked(slot, states)

    def _phase(self, name: str, start: float) -> None:
        self.stats[name] = self.stats.get(name, 0.0) + time.perf_counter() - start

    def _run_slot_locked(self, slot: _Slot, states: list[_JobState]) -> None:
        total = sum(len(s.entries) for s in states)
        done = 0
        for state in states:
            for entry in state.entries:
                self._check_entry(state, slot, entry)
                done += 1
                emit(Progress("evaluate: checks", done, total, {"device": slot.gpu.name}))
        start = time.perf_counter()
        for state in states:
            for entry in state.entries:
                self._finish_sanitizers(state, entry)
        self._phase("wait_sanitizer_s", start)
        start = time.perf_counter()
        for timed, state in enumerate(states, 1):
            with slot.quiet.exclusive():
                self._time_job(state, slot)
            emit(Progress("evaluate: timing", timed, len(states), {"device": slot.gpu.name}))
        self._phase("timing_s", start)

    def _result(self, state: _JobState, entry: _Entry, status: Status, detail: str = "", **kw: Any) -> Result:
        gate = entry.gate.result()[entry.index] if entry.gate is not None else None
        return Result(candidate=entry.candidate.digest, arch=state.arch, status=status, stage="evaluate",
                      detail=_trim(detail), gate=gate.gate if gate else None,
                      device=state.slot.gpu.name if state.slot else None,
                      toolchain=gate.toolchain if gate else self.toolchain.ident, **kw)

    def _ensure_worker(self, slot: _Slot) -> None:
        """Start the worker if needed; a worker that (re)started has forgotten its libraries."""
        try:
            slot.worker.start()
        except (WorkerDied, WorkerTimedOut) as exc:
            tail = getattr(exc, "log", "")
            raise EvaluationError(f"the GPU worker for {slot.gpu.name} (device {slot.gpu.index}) cannot start: "
                                  f"{exc}\n{tail}") from None
        if slot.worker.generation != slot.generation:
            if slot.generation:
                self.stats["worker_restarts"] += 1
            slot.generation = slot.worker.generation
            slot.loaded.clear()

    def _request(self, slot: _Slot, header: Mapping[str, Any], buffers: Sequence[bytes] = (), *,
                 timeout_s: float) -> tuple[dict[str, Any], list[bytes]]:
        self._ensure_worker(slot)
        return slot.worker.request(header, buffers, timeout_s=timeout_s)

    def _load(self, state: _JobState, slot: _Slot, lib: Library) -> str | None:
        """Load a library into the worker; None when loaded, else why it failed (the candidate crashed)."""
        key = lib.digest + ":" + lib.arch
        self._ensure_worker(slot)
        if key in slot.loaded:
            return None
        load: LoadRequest = {"op": "load", "lib": key, "path": str(lib.path), "entry": state.job.spec.name,
                             "argtypes": arg_codes(state.job.spec)}
        reply, _ = self._request(slot, load, timeout_s=self.call_timeout_s)
        if not reply.get("ok"):
            return f"the library could not be loaded: {reply.get('error')}"
        slot.loaded.add(key)
        return None

    def _check_entry(self, state: _JobState, slot: _Slot, entry: _Entry) -> None:
        assert entry.gate is not None and entry.library is not None and state.plan is not None
        start = time.perf_counter()
        gate = entry.gate.result()[entry.index]
        if not gate.ok:
            entry.result = gate
            self._cancel_sanitizers(state, entry)
            return
        lib = entry.library.result()
        plans = state.plan.result()
        self._phase("wait_build_s", start)
        if isinstance(lib, LibraryFailure):
            entry.result = self._result(state, entry, lib.status, lib.detail)
            return
        self.stats["built"] += 1
        start = time.perf_counter()
        verdict = self._run_checks(state, slot, entry, lib, plans)
        self._phase("checks_s", start)
        self.stats["checked"] += 1
        if verdict is not None:
            race = self._race_found(state, entry, verdict)
            entry.result = self._result(state, entry, verdict.status, race or verdict.detail)
            self._cancel_sanitizers(state, entry)

    def _race_found(self, state: _JobState, entry: _Entry, verdict: Verdict) -> str | None:
        """For wrong outputs of a kernel racecheck examines: its finding, when it has one. A race shows in the
        outputs only now and then, racecheck finds it every time, so the reason is the same every run."""
        if verdict.kind not in ("value", "nan", "unwritten") or entry.sanitizers is None:
            return None
        try:
            outcomes = entry.sanitizers.result(timeout=max(60.0, 6 * self.call_timeout_s))
        except Exception:
            return None
        found = next((o for o in outcomes if o.tool == "racecheck" and o.verdict == "finding"), None)
        return self._finding_detail(state, found) if found is not None else None

    def _finding_detail(self, state: _JobState, outcome: SanitizerOutcome) -> str:
        """A compute-sanitizer finding as a result's reason (a racecheck finding is named the same way whichever
        path reports it)."""
        sjob = self._sanitize_jobs.get((str(state.job.manifest.path), state.job.spec.name, state.arch))
        shapes = ", ".join(s["key"] for s in sjob.shapes) if sjob else "small shapes"
        if outcome.tool == "racecheck":
            return (f"nondeterministic: a race between threads on shared memory (compute-sanitizer racecheck at "
                    f"{shapes}): {outcome.detail}")
        if outcome.verdict == "unfinished":
            return (f"not validated: compute-sanitizer {outcome.tool} at {shapes} did not run to the end "
                    f"({outcome.detail}); a candidate is judged only by a finished run")
        return f"compute-sanitizer {outcome.tool} at {shapes}: {outcome.detail}"

    def _run_checks(self, state: _JobState, slot: _Slot, entry: _Entry, lib: Library, plans: list[ShapePlan]
                    ) -> Verdict | None:
        key = lib.digest + ":" + lib.arch
        where = "while loading"
        try:
            for plan in plans:
                failed = self._load(state, slot, lib)  # again after a worker restart
                if failed is not None:
                    return Verdict("crashed", failed)
                where = f"at {plan.key}"
                header, buffers = check_request(state.job.spec, plan, key)
                reply, data = self._request(slot, header, buffers, timeout_s=self.call_timeout_s)
                verdict = judge_shape(state.job.spec, plan, cast(CheckReply, reply), data)
                if verdict is not None and needs_diagnosis(plan, verdict) and not reply.get("exiting"):
                    assert verdict.call is not None
                    repeat = diagnosis_plan(plan, verdict.call)
                    header, buffers = check_request(state.job.spec, repeat, key)
                    reply, data = self._request(slot, header, buffers, timeout_s=self.call_timeout_s)
                    verdict = diagnose(plan, verdict.call, verdict, repeat, cast(CheckReply, reply), data,
                                       state.job.spec.tolerance)
                if verdict is not None:
                    return verdict
        except WorkerTimedOut:
            return Verdict("timed_out", f"a call did not return within {self.call_timeout_s:g} s {where}; the "
                                        "worker was killed (an endless loop, a deadlock between blocks, or a "
                                        "grid far larger than the data?)")
        except WorkerDied as exc:
            tail = f"; its last output: {exc.log[-600:]}" if exc.log else ""
            return Verdict("crashed", f"the worker process died {where} ({exc}){tail}")
        return None

    # -- sanitizer ---------------------------------------------------------------------------------------
    def _sanitize_slot(self, arch: str) -> _Slot | None:
        return next((s for s in self._slots if gpu_runs_arch(s.gpu, arch) and s.sanitizer is not None), None)

    def _sanitize_when_built(self, job: Job, arch: str, candidate: Candidate,
                             library: Future[Library | LibraryFailure], plan: Future[list[ShapePlan]]) -> None:
        """Start compute-sanitizer on a variant as soon as its library and the job's plan exist, before (and
        whatever) the correctness checks say: its runs then overlap the checks, and a caller that prepared
        several jobs finds them done. A variant that fails its checks has its runs canceled."""
        slot = self._sanitize_slot(arch)
        if slot is None:
            return
        jkey = (str(job.manifest.path), job.spec.name, arch)
        with self._lock:
            if jkey not in self._sanitize_jobs:
                job_dir = slot.workdir / "sanitize" / f"{job.spec.name}-{arch}-{len(self._sanitize_jobs)}"
                self._sanitize_jobs[jkey] = _SanitizeJob(job_dir, [])
            sjob = self._sanitize_jobs[jkey]
            key = (*jkey, candidate.digest)
            if key in self._sanitized:
                return
            done: Future[list[SanitizerOutcome]] = Future()
            job_file = sjob.directory / f"job-{candidate.digest[:16]}-{len(self._sanitized)}.json"
            self._sanitized[key] = (done, job_file)
        started = threading.Event()
        started_lock = threading.Lock()

        def ready(_: object) -> None:
            with started_lock:
                if not (library.done() and plan.done()) or started.is_set():
                    return
                started.set()
            self._submit(self._sanitize_now, job, slot, sjob, library, plan, done, job_file)

        library.add_done_callback(ready)
        plan.add_done_callback(ready)

    def _sanitize_inputs(self, job: Job, sjob: _SanitizeJob, plans: list[ShapePlan]) -> list[SanitizeShape]:
        with self._lock:
            if sjob.shapes or sjob.directory.exists():
                return sjob.shapes
            spec = job.spec
            small = [p for p in plans if bytes_moved(spec, p.sizes) <= _SANITIZE_MAX_BYTES]
            small.sort(key=lambda p: bytes_moved(spec, p.sizes))
            sjob.directory.mkdir(parents=True, exist_ok=True)
            for si, plan in enumerate(small[-2:]):
                arrays: list[SanitizeArray] = []
                for lay in plan.layouts:
                    item: SanitizeArray = {"nbytes": lay.nbytes, "input": None}
                    if lay.role != "out":
                        name = f"in-{si}-{lay.name}.bin"
                        data = np.ascontiguousarray(plan.calls[0].inputs[lay.name]).tobytes()
                        (sjob.directory / name).write_bytes(data)
                        item["input"] = name
                    arrays.append(item)
                sjob.shapes.append({"key": plan.key, "arrays": arrays, "args": arg_items(spec, plan.sizes)})
            return sjob.shapes

    def _sanitize_now(self, job: Job, slot: _Slot, sjob: _SanitizeJob, library: Future[Library | LibraryFailure],
                      plan: Future[list[ShapePlan]], done: Future[list[SanitizerOutcome]], job_file: Path) -> None:
        try:
            lib = library.result()
            runner = slot.sanitizer
            if isinstance(lib, LibraryFailure) or runner is None:
                done.set_result([])
                return
            unavailable = runner.available(slot.workdir)
            if unavailable is not None:
                self._note(unavailable + "; memcheck, racecheck and initcheck are skipped")
                done.set_result([])
                return
            shapes = self._sanitize_inputs(job, sjob, plan.result())
            if not shapes:
                done.set_result([])
                return
            import json

            sanitize_job: SanitizeJob = {"lib": str(lib.path), "entry": job.spec.name,
                                         "argtypes": arg_codes(job.spec), "shapes": shapes}
            job_file.write_text(json.dumps(sanitize_job))
            tools = [t for t in TOOLS if t != "racecheck" or uses_shared_memory(lib.path, self._cuobjdump())]
            runs = [self._submit(self._run_tool, slot, tool, job_file) for tool in tools]
        except BaseException as exc:
            done.set_exception(exc)
            return
        remaining = [len(runs)]
        lock = threading.Lock()

        def finished(_: object) -> None:
            with lock:
                remaining[0] -= 1
                last = remaining[0] == 0
            if last:
                try:
                    done.set_result([r.result() for r in runs])
                except BaseException as exc:
                    done.set_exception(exc)

        for run in runs:
            run.add_done_callback(finished)

    def _cuobjdump(self) -> str | None:
        try:
            near = Path(self.toolchain.nvcc).resolve().parent / "cuobjdump"
        except Exception:
            return shutil.which("cuobjdump")
        return str(near) if near.is_file() else shutil.which("cuobjdump")

    def _run_tool(self, slot: _Slot, tool: str, job_file: Path) -> SanitizerOutcome:
        assert slot.sanitizer is not None
        with slot.quiet.shared():
            start = time.perf_counter()
            outcome = slot.sanitizer.run(tool, job_file)
            with self._lock:
                self.stats["sanitizer_runs"] = self.stats.get("sanitizer_runs", 0) + 1
                self.stats["sanitizer_s"] = self.stats.get("sanitizer_s", 0.0) + time.perf_counter() - start
        return outcome

    def _cancel_sanitizers(self, state: _JobState, entry: _Entry) -> None:
        """Stop a failed candidate's sanitizer runs; a later evaluation of it starts afresh."""
        slot = self._sanitize_slot(state.arch)
        if slot is None or slot.sanitizer is None or entry.sanitize_file is None:
            return
        slot.sanitizer.cancel(entry.sanitize_file)
        key = (str(state.job.manifest.path), state.job.spec.name, state.arch, entry.candidate.digest)
        with self._lock:
            if self._sanitized.get(key, (None, None))[1] == entry.sanitize_file:
                del self._sanitized[key]

    def _finish_sanitizers(self, state: _JobState, entry: _Entry) -> None:
        if entry.result is not None or entry.sanitizers is None:
            self._cancel_sanitizers(state, entry)
            return
        for outcome in entry.sanitizers.result():
            if outcome.verdict == "finding":
                entry.result = self._result(state, entry, "incorrect", self._finding_detail(state, outcome))
                return
            if outcome.verdict == "unfinished":
                status: Status = "timed_out" if "did not finish" in outcome.detail else "crashed"
                entry.result = self._result(state, entry, status, self._finding_detail(state, outcome))
                return

    # -- timing ------------------------------------------------------------------------------------------
    def _floors(self, slot: _Slot) -> DeviceFloors | None:
        if slot.floors is not None:
            return slot.floors
        cached = DeviceFloors.from_json(self.cache.get_json(FLOORS_NAMESPACE, slot.gpu.key))
        if cached is None:
            try:
                floors: FloorsRequest = {"op": "floors"}
                reply, _ = self._request(slot, floors, timeout_s=self.timing_timeout_s)
            except (WorkerDied, WorkerTimedOut) as exc:
                self._note(f"measuring the floors of {slot.gpu.name} failed: {exc}")
                return None
            if not reply.get("ok"):
                self._note(f"measuring the floors of {slot.gpu.name} failed: {reply.get('error')}")
                return None
            cached = DeviceFloors(slot.gpu.name, float(reply["bandwidth_bps"]), float(reply["fp32_flops"]))
            self.cache.put_json(FLOORS_NAMESPACE, slot.gpu.key, cached.to_json())
        slot.floors = cached
        return cached

    def _time_reference(self, state: _JobState, slot: _Slot) -> float | None:
        header = reference_request(state.job.spec, str(state.job.manifest.root))
        try:
            reply, _ = self._request(slot, header, timeout_s=self.timing_timeout_s)
        except (WorkerDied, WorkerTimedOut) as exc:
            self._note(f"{state.job.spec.name}: timing the reference with cupy failed: {exc}", state.job.spec.name)
            return None
        shapes = reply.get("shapes") or []
        if not reply.get("ok") or not shapes or "samples_us" not in shapes[0]:
            why = shapes[0].get("error") if shapes else reply.get("error")
            self._note(f"{state.job.spec.name}: the reference does not run under cupy ({why}); no speedup over "
                       "the reference", state.job.spec.name)
            return None
        return summarize(shapes[0]["samples_us"]).median_us

    def _bench_plan(self, state: _JobState, slot: _Slot) -> Future[BenchPlan]:
        """The benchmark-shape checks of a job's kernel for GPUs of this slot's L2 size (made once, on the CPU
        pool: the reference runs at the benchmark shapes)."""
        l2 = slot.gpu.l2_bytes or (40 << 20)
        key = (str(state.job.manifest.path), state.job.spec.name, str(l2))
        with self._lock:
            if key not in self._benches:
                reference = load_reference(state.job.manifest.root, state.job.spec.reference)
                directory = self._root / "bench" / f"{state.job.spec.name}-{len(self._benches)}"
                self._benches[key] = self._submit(plan_bench, state.job.spec, reference, l2, directory,
                                                  seed=self.seed)
            return self._benches[key]

    def _time_entry(self, state: _JobState, slot: _Slot, entry: _Entry, floors: DeviceFloors | None
                    ) -> Verdict | list[SampleStats]:
        assert entry.library is not None and state.bench is not None
        lib = entry.library.result()
        assert isinstance(lib, Library)
        key = lib.digest + ":" + lib.arch
        spec = state.job.spec
        try:
            bench = state.bench.result()
        except EvaluationError as exc:
            return Verdict("crashed", f"the reference failed at the benchmark shapes: {exc}")
        out_dir = slot.workdir / "bench-out" / lib.digest[:24]
        try:
            failed = self._load(state, slot, lib)
            if failed is not None:
                return Verdict("crashed", failed)
            header = time_request(key, shape_requests(spec, bench, out_dir), budget_s=self.timing_budget_s)
            reply, _ = self._request(slot, header, timeout_s=self.timing_timeout_s)
            if not reply.get("ok"):
                error = str(reply.get("error"))
                if error.startswith("returned"):
                    return Verdict("incorrect", f"while timing at the benchmark shapes: the call {error}")
                return Verdict("crashed", f"while timing at the benchmark shapes: {error}")
            verdict = judge_bench(spec, bench, cast(TimeReply, reply)["shapes"])
        except WorkerTimedOut:
            return Verdict("timed_out", f"at a benchmark shape a call made no progress for {self.timing_timeout_s:g} "
                                        "s; the worker was killed (a deadlock between blocks at the benchmark size?)")
        except WorkerDied as exc:
            return Verdict("crashed", f"the worker process died while timing ({exc}): {exc.log[-600:]}")
        finally:
            shutil.rmtree(out_dir, ignore_errors=True)
        if verdict is not None:
            return verdict
        stats = [summarize(s["samples_us"]) for s in reply["shapes"]]
        if floors is not None:
            warm = [s.get("mode") == "graph" for s in reply["shapes"]]
            return implausible(spec, [s.median_us for s in stats], floors, warm) or stats
        return stats

    def _time_job(self, state: _JobState, slot: _Slot) -> None:
        survivors = [e for e in state.entries if e.result is None]
        if not survivors:
            return
        floors = self._floors(slot)
        reference_us = self._time_reference(state, slot)
        for entry in survivors:
            outcome = self._time_entry(state, slot, entry, floors)
            if isinstance(outcome, Verdict):
                entry.result = self._result(state, entry, outcome.status, outcome.detail)
            else:
                entry.stats = outcome
                self.stats["timed"] += 1
        baseline_us = None
        if state.job.baseline is not None:
            base = next((e for e in state.entries if e.candidate.digest == state.job.baseline.digest), None)
            if base is not None and base.stats:
                baseline_us = base.stats[0].median_us
        for entry in survivors:
            if entry.stats is None:
                continue
            timing = build_timing(state.job.spec, entry.stats, floors=floors, baseline_us=baseline_us,
                                  reference_us=reference_us)
            entry.result = self._result(state, entry, "passed", timing=timing)

