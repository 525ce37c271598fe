"""compute-sanitizer over the evaluator's candidates: batched per kernel and tool, beside the checks.

:class:`Sanitizing` owns the runs of one evaluator: per kernel × arch the small shapes' inputs (written once,
shared by its candidates); per candidate the future of its memcheck, racecheck and initcheck outcomes, their
cancellation when the candidate fails elsewhere, and the reasons a finding or an unfinished run becomes.

A sanitizer's start costs seconds, a candidate's calls on small shapes a fraction of one, so a run takes many: the
candidates of one kernel and tool wait in a queue folder (:mod:`.child.harness`), each added as soon as its library
is built, and a run takes them one at a time until none is left (at most ``batch``). A kernel and tool has up to
:data:`RUNS_PER_QUEUE` runs at once while other work waits for a place; a place that nobody waits for goes to the
queue with the most candidates nobody took yet (:meth:`Sanitizing._steal`), so a kernel whose candidates are slow
under a tool (racecheck of a tiled matmul) spreads over the idle cores at the end instead of running long after
everything else has finished. Sanitizer processes of all kernels together are at most one per core. A run that
finishes with no report clears what it took. Runs go on while the GPU times a job: their harness stops before its
next GPU work until the timing is done (:class:`~.slots.Quiet`). Anything else (a report, a crash, a run that
stalls) is never taken on trust: what the run took is split where the harness's markers point (those before the
suspect, the suspect alone, those after; in halves when the markers say nothing) and each part runs again as a
list, until a candidate alone in its run gets that run's verdict. So a finding is always a candidate's own, and a
pass is always a whole clean run.
:mod:`.sanitize` runs one tool; this module decides when, on what, and what the outcome means.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import secrets
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from ...convert import field, record
from ...errors import EvaluationError
from ...filemode import write_atomically
from ...gate.compile_slots import PrioritySlots, cores
from ...judge import Job
from ...manifest.model import KernelSpec
from ...records import Candidate, Status
from ..child.harness import claim
from ..child.messages import SanitizeArray, SanitizeJob, SanitizeShape
from ..correctness.plan import ShapePlan, Verdict, arg_codes, arg_items
from ..devices import gpu_runs_arch
from ..library import Library, LibraryFailure
from ..options import RUNS_PER_QUEUE
from ..slots import Slot
from ..timing.floors import bytes_moved, eval_flops
from .runner import TOOLS, BatchRun, SanitizerOutcome, SanitizerRunner, racecheck_level, uses_shared_memory

__all__ = [
    "KernelKey",
    "SanitizeRuns",
    "Sanitizing",
    "sanitizer_reason",
    "sanitizer_sizes",
    "sanitizer_work",
    "write_shapes",
]

CANCELED = "canceled"
"""Who takes the queue entry of a candidate that failed elsewhere (no run calls it)."""
LISTED = "listed"
"""Who takes the queue entries that run again as a list (:meth:`Sanitizing._relist`)."""

log = logging.getLogger(__name__)

SANITIZE_MAX_BYTES = 2 << 20
"""Shapes whose arrays together exceed this are too large for a quick sanitizer run."""
MOST_RUNS = 6
"""Runs of one kernel and tool at once on places nobody waits for (more than :data:`RUNS_PER_QUEUE`); another
starts only while the queue holds at least :data:`TAKE_EACH` candidates nobody took for each run it has."""
TAKE_EACH = 2
"""Candidates left a run of a queue (its start costs about as much as two racecheck calls of a tiled matmul)."""

Submit = Callable[..., "Future[Any]"]


def sanitizer_reason(shapes: str, outcome: SanitizerOutcome) -> str:
    """A compute-sanitizer outcome at ``shapes`` as a result's reason. A racecheck finding is named the same way
    whichever path reports it: a race, unless racecheck counts only warnings: shared-memory hazards then (warning
    level: accesses racecheck cannot prove ordered, such as warp-synchronous code without ``__syncwarp``), which
    reject the candidate all the same."""
    if outcome.tool == "racecheck" and outcome.verdict == "finding":
        if racecheck_level(outcome.detail) == "warning":
            return (
                f"shared-memory hazards between threads (compute-sanitizer racecheck at {shapes}, warning level "
                f"only): {outcome.detail}"
            )
        return (
            f"nondeterministic: a race between threads on shared memory (compute-sanitizer racecheck at "
            f"{shapes}): {outcome.detail}"
        )
    if outcome.verdict == "unfinished":
        return (
            f"not validated: compute-sanitizer {outcome.tool} at {shapes} did not run to the end "
            f"({outcome.detail}); a candidate is judged only by a finished run"
        )
    return f"compute-sanitizer {outcome.tool} at {shapes}: {outcome.detail}"


@record(frozen=True)
class KernelKey:
    """One kernel of one manifest on one arch."""

    manifest: str
    kernel: str
    arch: str

    @classmethod
    def of(cls, job: Job, arch: str) -> KernelKey:
        return cls(str(job.manifest.path), job.spec.name, arch)


@record
class _Inputs:
    """The sanitizer inputs of one kernel × arch, shared by its candidates."""

    directory: Path
    """This evaluator's own folder for the kernel, new (another evaluator may have left one in the same workdir)."""
    shapes: list[SanitizeShape]
    """Harness shapes (the inputs are files in ``directory``)."""
    written: bool = False
    """Whether ``shapes`` were decided and written (none when no shape is small enough)."""


class SanitizeRuns:
    """One candidate's runs: each tool's verdict as its runs settle it, and ``outcomes`` once every tool has
    one."""

    def __init__(self) -> None:
        self.outcomes: Future[list[SanitizerOutcome]] = Future()
        """Every tool's outcome, in :data:`~.sanitize.TOOLS` order (tools that do not apply left out)."""
        self.canceled = False
        self.library: Path | None = None
        self._tools: dict[str, SanitizerOutcome | None] = {}
        self._decided = False
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)

    def expect(self, tools: list[str]) -> None:
        with self._lock:
            self._tools = dict.fromkeys(tools)
            self._decided = True
            self._changed.notify_all()
        if not tools:
            self._finish()
        if self.canceled:  # canceled while its tools were decided: the cancel found none to settle
            for tool in tools:
                self.settle(tool, SanitizerOutcome(tool, "canceled", "canceled"))

    def settle(self, tool: str, outcome: SanitizerOutcome) -> None:
        """Record one tool's verdict (the first one counts)."""
        with self._lock:
            if self._tools.get(tool) is not None or tool not in self._tools:
                return
            self._tools[tool] = outcome
            self._changed.notify_all()
            if any(o is None for o in self._tools.values()):
                return
        self._finish()

    def fail(self, exc: BaseException) -> None:
        with self._lock:  # not between another thread's look and its setting (_finish)
            if not self.outcomes.done():
                self.outcomes.set_exception(exc)
            self._changed.notify_all()

    def outcome(self, tool: str, timeout_s: float) -> SanitizerOutcome | None:
        """``tool``'s verdict as soon as it has one, whatever the other tools' runs are at; None when the tool does
        not run on this candidate, its runs failed, or no verdict came within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while self._tools.get(tool) is None:
                left = deadline - time.monotonic()
                if self.outcomes.done() or (self._decided and tool not in self._tools) or left <= 0:
                    return None
                self._changed.wait(left)
            return self._tools[tool]

    def _finish(self) -> None:
        with self._lock:
            if self.outcomes.done():
                return
            self.outcomes.set_result([o for o in self._tools.values() if o is not None])


@record(kw_only=True)
class _Queue:
    """The candidates of one kernel × arch waiting for one tool, and its runs."""

    kernel: KernelKey
    spec: KernelSpec
    """The kernel's spec (its entry point and parameters: what every run of this queue calls)."""
    tool: str
    slot: Slot
    inputs: _Inputs
    folder: Path
    """The queue folder the runs take candidates from (``<n>.lib``, ``<n>.claim``)."""
    entries: dict[int, SanitizeRuns] = field(default_factory=dict)
    """Every candidate added, by its entry number."""
    open: set[int] = field(default_factory=set)
    """Entries not seen taken yet (a run, or :meth:`Sanitizing.cancel`, may have taken them since)."""
    parts: list[list[SanitizeRuns]] = field(default_factory=list)
    """Parts of what a run took that was not clean, run again as lists (never merged again, so splitting ends)."""
    running: int = 0
    """Runs waiting for a place or running, counted against ``per_queue`` (not those on lent places)."""
    taking: int = 0
    """Runs that take from the folder (as opposed to parts)."""

    def untaken(self) -> int:
        """Entries nobody took yet (looked up in the folder)."""
        self.open = {n for n in self.open if not (self.folder / f"{n}.claim").exists()}
        return len(self.open)


class Sanitizing:
    """The sanitizer runs of one evaluator (see the module docstring)."""

    def __init__(
        self,
        slots: list[Slot],
        *,
        submit: Submit,
        note: Callable[[str], None],
        count: Callable[[str, float], None],
        span: Callable[[str, str, float], None] | None = None,
        cuobjdump: Callable[[], str | None],
        batch: int = 16,
        runs: int = RUNS_PER_QUEUE,
        processes: int | None = None,
        racecheck_first: bool = False,
        racecheck_runs: int | None = None,
    ) -> None:
        self._slots = slots
        self._submit = submit
        self._note = note
        self._count = count
        self._span = span
        self._cuobjdump = cuobjdump
        self.batch = max(1, batch)
        """Most candidates in one run."""
        self.per_queue = max(1, runs)
        """Runs of one kernel and tool at once (:data:`RUNS_PER_QUEUE` by default)."""
        self.processes = PrioritySlots(processes if processes is not None else cores())
        """Sanitizer processes at once, first come first served (not by the GPU's order of jobs: that says nothing of
        how long a kernel's runs take, and the longest must not start last), racecheck runs before the others with
        :attr:`racecheck_first`."""
        self.racecheck_first = racecheck_first
        """Whether a freed place goes to a waiting racecheck run before runs of the other tools: racecheck costs 4-20x
        the others a candidate (bench/results/sanitizer_batch-matmul.md), so a tiled kernel's racecheck runs are the
        longest chain of background work; they start as soon as its libraries are built instead of behind the short
        runs of the jobs before it."""
        self.racecheck_runs = max(1, racecheck_runs) if racecheck_runs is not None else None
        """Most racecheck runs of one kernel at once, idle places' runs included (None: as the other tools). A tiled
        kernel's racecheck is GPU-bound (four runs side by side take four times as long as one,
        bench/results/sanitizer_batch-matmul.md), so more runs of it add no throughput, and each taking of the GPU
        for timing waits for every running shape to end."""
        self._lock = threading.Lock()
        self._inputs: dict[KernelKey, _Inputs] = {}
        self._runs: dict[tuple[KernelKey, str], SanitizeRuns] = {}
        self._queues: dict[tuple[KernelKey, str], _Queue] = {}
        self._files = 0
        self.pool = ThreadPoolExecutor(max_workers=4 * cores() + 4, thread_name_prefix="r1build-sanitize")
        """Where runs wait for a place among :attr:`processes` and for their process (not the evaluator's compile
        pool, which they would hold); more threads than places, so every run waiting is in line for one."""

    def _rank(self, queue: _Queue) -> int | None:
        """The rank a run of ``queue`` waits for a place with (:attr:`racecheck_first`)."""
        return 0 if self.racecheck_first and queue.tool == "racecheck" else None

    def _spawn(self, fn: Callable[..., object], *args: object) -> None:
        self.pool.submit(contextvars.copy_context().run, fn, *args)

    def slot_for(self, arch: str) -> Slot | None:
        """The GPU that sanitizes candidates of ``arch``: the first one of that arch with a sanitizer."""
        return next((s for s in self._slots if gpu_runs_arch(s.gpu, arch) and s.sanitizer is not None), None)

    def runs(self, job: Job, arch: str, candidate: Candidate) -> SanitizeRuns | None:
        """A candidate's runs, when they were started."""
        with self._lock:
            return self._runs.get((KernelKey.of(job, arch), candidate.digest))

    def start(
        self,
        job: Job,
        arch: str,
        candidate: Candidate,
        library: Future[Library | LibraryFailure],
        plan: Future[list[ShapePlan]],
        static_shared: Callable[[], bool] | None = None,
    ) -> None:
        """Queue compute-sanitizer on a variant as soon as its library and the job's plan exist, before (and
        whatever) the correctness checks say: its runs then overlap the checks, and a caller that prepared
        several jobs finds them done. A variant that fails its checks has its runs canceled. ``static_shared``
        says, once the library is built, whether the compile's report gave it static shared memory: racecheck
        runs then without reading its machine code (:func:`.runner.uses_shared_memory` decides otherwise: a
        report can only add racecheck, never spare it)."""
        slot = self.slot_for(arch)
        if slot is None:
            return
        kernel = KernelKey.of(job, arch)
        with self._lock:
            if kernel not in self._inputs:
                given = slot.given or slot.workdir / "sanitize"  # never where a confined run may write
                given.mkdir(parents=True, exist_ok=True)
                directory = tempfile.mkdtemp(prefix=f"{job.spec.name}-{arch}-", dir=given)
                self._inputs[kernel] = _Inputs(Path(directory), [])
            inputs = self._inputs[kernel]
            if (kernel, candidate.digest) in self._runs:
                return
            runs = SanitizeRuns()
            self._runs[kernel, candidate.digest] = runs
        started = threading.Event()
        started_lock = threading.Lock()

        def ready(_: object) -> None:
            with started_lock:
                if not (library.done() and plan.done()) or started.is_set():
                    return
                started.set()
            self._submit(self._ready, job, slot, kernel, inputs, library, plan, runs, static_shared)

        library.add_done_callback(ready)
        plan.add_done_callback(ready)

    def cancel(self, job: Job, arch: str, candidate: Candidate, runs: SanitizeRuns | None) -> None:
        """Drop a failed candidate's runs (a batch it is in goes on without it, or is stopped when the candidate
        is the one it calls now); a later evaluation of it starts afresh."""
        if runs is None:
            return
        kernel = KernelKey.of(job, arch)
        with self._lock:
            runs.canceled = True
            if self._runs.get((kernel, candidate.digest)) is runs:
                del self._runs[kernel, candidate.digest]
            waiting = [
                (q.folder, n)
                for q in self._queues.values()
                if q.kernel == kernel
                for n, r in q.entries.items()
                if r is runs
            ]
        for folder, n in waiting:  # taken here, no run calls it; a run calling it now is stopped (_run_tool's watch)
            with contextlib.suppress(OSError):
                claim(folder, n, CANCELED)
        for tool in TOOLS:
            runs.settle(tool, SanitizerOutcome(tool, "canceled", "canceled"))

    def verdict(self, job: Job, arch: str, outcomes: list[SanitizerOutcome]) -> tuple[Status, str] | None:
        """What a candidate's finished runs make of it: a finding, or a run that did not finish, rejects."""
        for outcome in outcomes:
            if outcome.verdict == "finding":
                return "incorrect", self.detail(job, arch, outcome)
            if outcome.verdict == "unfinished":
                status: Status = "timed_out" if "did not finish" in outcome.detail else "crashed"
                return status, self.detail(job, arch, outcome)
        return None

    def race_found(self, job: Job, arch: str, runs: SanitizeRuns | None, verdict: Verdict, wait_s: float) -> str | None:
        """For wrong outputs of a kernel racecheck examines: its finding, when it has one. A race shows in the
        outputs only now and then, racecheck finds it every time, so the reason is the same every run. Waits for
        racecheck's verdict alone (none where racecheck does not run), not for memcheck's and initcheck's runs:
        the caller cancels those once it has the reason."""
        if verdict.kind not in ("value", "nan", "unwritten") or runs is None:
            return None
        found = runs.outcome("racecheck", wait_s)
        return self.detail(job, arch, found) if found is not None and found.verdict == "finding" else None

    def detail(self, job: Job, arch: str, outcome: SanitizerOutcome) -> str:
        """A compute-sanitizer outcome as a result's reason (:func:`sanitizer_reason`, at the kernel's shapes)."""
        with self._lock:
            inputs = self._inputs.get(KernelKey.of(job, arch))
        return sanitizer_reason(", ".join(s["key"] for s in inputs.shapes) if inputs else "small shapes", outcome)

    # -- the runs ------------------------------------------------------------------------------------------
    def _ready(
        self,
        job: Job,
        slot: Slot,
        kernel: KernelKey,
        inputs: _Inputs,
        library: Future[Library | LibraryFailure],
        plan: Future[list[ShapePlan]],
        runs: SanitizeRuns,
        static_shared: Callable[[], bool] | None = None,
    ) -> None:
        """A candidate's library is built: decide its tools and queue it for each."""
        queues: list[_Queue] = []
        try:
            lib = library.result()
            runner = slot.sanitizer
            if isinstance(lib, LibraryFailure) or runner is None or runs.canceled:
                runs.expect([])
                return
            unavailable = runner.available(slot.workdir)
            if unavailable is not None:
                self._note(unavailable + "; memcheck, racecheck and initcheck are skipped")
                runs.expect([])
                return
            if not self._shapes(job, inputs, plan.result()):
                runs.expect([])
                return
            runs.library = lib.path
            box = runner.sandbox  # cuobjdump reads the library confined, as the runs run it
            shared = (static_shared is not None and static_shared()) or uses_shared_memory(
                lib.path, self._cuobjdump(), box
            )
            tools = [t for t in TOOLS if t != "racecheck" or shared]
            runs.expect(tools)
            for tool in tools:
                queues.append(self._add(job.spec, kernel, tool, slot, inputs, runs))
        except BaseException as exc:
            runs.fail(exc)
        for queue in queues:
            self._dispatch_or_break(queue)

    def _add(
        self, spec: KernelSpec, kernel: KernelKey, tool: str, slot: Slot, inputs: _Inputs, runs: SanitizeRuns
    ) -> _Queue:
        """Put a candidate in the tool's queue folder (the queue made on first use)."""
        with self._lock:
            queue = self._queues.get((kernel, tool))
            if queue is None:
                folder = inputs.directory / f"queue-{tool}"
                queue = self._queues[kernel, tool] = _Queue(
                    kernel=kernel, spec=spec, tool=tool, slot=slot, inputs=inputs, folder=folder
                )
                folder.mkdir(parents=True, exist_ok=True)
            if runs.canceled:
                return queue
            n = len(queue.entries)
            assert runs.library is not None
            write_atomically(queue.folder / f"{n}.lib", str(runs.library))
            queue.entries[n] = runs
            queue.open.add(n)
        return queue

    def _dispatch(self, queue: _Queue) -> None:
        """Start the queue's next runs while it has room: parts of split runs first, then runs that take from the
        folder (no more of those than candidates nobody took); then lend idle places (:meth:`_steal`)."""
        while True:
            with self._lock:
                if queue.running >= self._most(queue, self.per_queue):
                    break
                if queue.parts:
                    part = [r for r in queue.parts.pop(0) if not r.canceled]
                    if not part:
                        continue
                    queue.running += 1
                    self._spawn(self._run_batch, queue, part)
                    continue
                if queue.taking >= self._most(queue, queue.untaken()):  # lent places' runs count here too
                    break
                queue.running += 1
                queue.taking += 1
            self._spawn(self._run_taking, queue, None)
        self._steal()

    def _most(self, queue: _Queue, runs: int) -> int:
        """``runs``, or fewer for a racecheck queue (:attr:`racecheck_runs`)."""
        if queue.tool == "racecheck" and self.racecheck_runs is not None:
            return min(runs, self.racecheck_runs)
        return runs

    def _steal(self) -> None:
        """Places nobody waits for go to more runs of the queue with the most candidates nobody took (up to
        :data:`MOST_RUNS` a queue, while it holds :data:`TAKE_EACH` untaken candidates a run)."""
        while True:
            with self._lock:
                left = [(q.untaken(), q) for q in self._queues.values() if q.taking < self._most(q, MOST_RUNS)]
                wanting = [(n - TAKE_EACH * q.taking, q) for n, q in left if n >= TAKE_EACH * (q.taking + 1)]
                if not wanting:
                    return
                queue = max(wanting, key=lambda w: w[0])[1]  # the first of the most left, as the queues were made
                place = self.processes.take_now()
                if place is None:
                    return
                queue.taking += 1
            try:
                self._spawn(self._run_taking, queue, place)
            except RuntimeError:  # the pool is shut down (the evaluator closes): the place goes back, unused
                with place, self._lock:
                    queue.taking -= 1
                return
            self._count("sanitizer_extra_runs", 1)

    def _run_batch(self, queue: _Queue, part: list[SanitizeRuns]) -> None:
        """One run over the list ``part``; a clean run clears it, a run of one gets its verdict, anything else
        splits."""
        try:
            with self.processes.take(self._rank(queue)):  # a place first: what was canceled meanwhile is left out
                members = [r for r in part if not r.canceled and r.library is not None]
                if members:
                    found = self._run_tool(queue, members)
                    self._settle(queue, members, found)
        except BaseException as exc:
            for runs in part:
                runs.fail(exc)
        finally:
            with self._lock:
                queue.running -= 1
        self._dispatch_or_break(queue)

    def _run_taking(self, queue: _Queue, place: contextlib.AbstractContextManager[None] | None) -> None:
        """One run that takes candidates from the queue folder (on ``place``, or on the next free place)."""
        try:
            with place if place is not None else self.processes.take(self._rank(queue)):
                with self._lock:
                    idle = queue.untaken() == 0
                if not idle:
                    found = self._run_tool(queue, None)
                    with self._lock:
                        members = [queue.entries[n] for n in found.claimed or () if n in queue.entries]
                    if members or found.outcome.verdict in ("clean", "canceled"):
                        self._settle(queue, members, found, took=True)
                    else:  # it failed before it took one: what waits runs as a list (split as any run's batch)
                        self._count("sanitizer_splits", 1)
                        self._relist(queue)
        except BaseException as exc:
            self._break(queue, exc)
        finally:
            with self._lock:
                queue.taking -= 1
                if place is None:  # a run on a lent place is not counted in running
                    queue.running -= 1
        self._dispatch_or_break(queue)

    def _dispatch_or_break(self, queue: _Queue) -> None:
        """:meth:`_dispatch`, whose errors (a claim that cannot be written, say) reach the queue's candidates
        instead of the discarded future of the thread that called it (where they waited for ever)."""
        try:
            self._dispatch(queue)
        except BaseException as exc:
            self._break(queue, exc)

    def _break(self, queue: _Queue, exc: BaseException) -> None:
        """``exc`` reaches every candidate of the queue without an outcome (those taken by runs, or waiting in
        parts, too); those nobody took are taken here so that no run calls them. Candidates added after that get
        runs of their own: an error of one moment (a full disk) does not break the kernel's queue for the rest of
        a long-lived evaluator's life."""
        with self._lock:
            waiting = list(queue.entries.values())
            stale = sorted(queue.open)
            queue.open.clear()
            queue.parts.clear()
        for n in stale:
            with contextlib.suppress(OSError):
                claim(queue.folder, n, LISTED)
        for runs in waiting:
            runs.fail(exc)

    def _relist(self, queue: _Queue) -> None:
        """Take every entry nobody took yet and queue them as lists (parts) of at most ``batch``."""
        with self._lock:
            waiting = sorted(queue.open)
        listed = [queue.entries[n] for n in waiting if claim(queue.folder, n, LISTED)]
        with self._lock:
            queue.open -= set(waiting)
            queue.parts.extend(listed[i : i + self.batch] for i in range(0, len(listed), self.batch))

    def _settle(self, queue: _Queue, members: list[SanitizeRuns], found: BatchRun, *, took: bool = False) -> None:
        """What a run says of ``members``: a clean run clears them, a run of one gets its verdict, anything else
        runs again in parts. A run that took its one member from the folder (``took``) gives it a verdict only where
        the markers point at it (a report or a stop while it was called); one that failed after the candidate's
        calls ended (the harness's work between candidates) runs it again alone, as a list."""
        tool, outcome = queue.tool, found.outcome
        if outcome.verdict == "clean":
            for runs in members:
                runs.settle(tool, outcome)
            return
        if len(members) == 1 and outcome.verdict != "canceled" and (not took or found.suspect == 0):
            members[0].settle(tool, outcome)
            return
        if outcome.verdict == "canceled" or len(members) == 1:  # stopped for a canceled member, or one taken
            parts = [members]
        elif found.suspect is not None and found.suspect < len(members):
            s = found.suspect
            parts = [members[:s], [members[s]], members[s + 1 :]]
            self._count("sanitizer_splits", 1)
        else:
            half = (len(members) + 1) // 2
            parts = [members[:half], members[half:]]
            self._count("sanitizer_splits", 1)
        with self._lock:  # canceled members are left out when a part is taken (_dispatch)
            queue.parts.extend(p for p in parts if p)

    def _run_tool(self, queue: _Queue, members: list[SanitizeRuns] | None) -> BatchRun:
        """One process of the queue's tool: over ``members``, or (None) over what it takes from the folder."""
        runner = queue.slot.sanitizer
        assert runner is not None
        job_file = self._write_job(queue, members)
        stop = threading.Event()
        watcher = threading.Thread(
            target=_stop_when_canceled,
            args=(runner, job_file, queue, members, stop),
            name="r1build-sanitizer-watch",
            daemon=True,
        )
        with queue.slot.quiet.pausable(lambda: runner.held(job_file)):  # its harness stops while the GPU times
            start = time.perf_counter()
            watcher.start()
            try:
                found = runner.run(queue.tool, job_file)
            finally:
                stop.set()
                watcher.join()
            seconds = time.perf_counter() - start
            self._count("sanitizer_runs", 1)
            self._count("sanitizer_s", seconds)
            self._count(f"sanitizer_{queue.tool}_s", seconds)
            self._count("sanitizer_held_s", found.held_s)
            if self._span is not None:
                self._span("sanitizer_run", f"{queue.kernel.kernel}/{queue.kernel.arch}", start)
        log.info(
            "%s %s/%s: %d candidates %s in %.1f s: %s%s%s",
            queue.tool,
            queue.kernel.kernel,
            queue.kernel.arch,
            len(members) if members is not None else len(found.claimed or ()),
            "listed" if members is not None else "taken",
            seconds,
            found.outcome.verdict,
            "" if found.suspect is None else f" (markers point at #{found.suspect})",
            "" if found.outcome.verdict == "clean" else f": {found.outcome.detail}",
        )
        return found

    def _write_job(self, queue: _Queue, members: list[SanitizeRuns] | None) -> Path:
        """The job file of one run of the queue's tool, written: over ``members``, or (None) the folder's."""
        with self._lock:
            self._files += 1
            job_file = queue.inputs.directory / f"run-{queue.tool}-{self._files}.json"
        sanitize_job: SanitizeJob = {
            "libs": [str(r.library) for r in members or ()],
            "entry": queue.spec.name,
            "argtypes": arg_codes(queue.spec),
            "shapes": queue.inputs.shapes,
            "token": secrets.token_hex(8),
        }
        if members is None:
            sanitize_job["queue"] = str(queue.folder)
            sanitize_job["limit"] = self.batch
        hold = queue.slot.quiet.hold_file
        if hold is not None:
            sanitize_job["hold"] = str(hold)
            sanitizer = queue.slot.sanitizer
            if sanitizer is None or not sanitizer.dies_with_evaluator:  # a sandboxed run dies with this process
                sanitize_job["parent"] = os.getpid()
        job_file.write_text(json.dumps(sanitize_job))
        return job_file

    def _shapes(self, job: Job, inputs: _Inputs, plans: list[ShapePlan]) -> list[SanitizeShape]:
        """The kernel's sanitizer shapes, their inputs written once."""
        with self._lock:
            if not inputs.written:
                inputs.shapes = write_shapes(job.spec, plans, inputs.directory)
                inputs.written = True
            return inputs.shapes


def sanitizer_sizes(spec: KernelSpec, shapes: Sequence[Mapping[str, int]]) -> list[int]:
    """Which of ``shapes`` (a kernel's test shapes, in order) compute-sanitizer runs at: the two largest small ones
    (at most :data:`SANITIZE_MAX_BYTES`), smallest first."""
    small = [i for i, sizes in enumerate(shapes) if bytes_moved(spec, sizes) <= SANITIZE_MAX_BYTES]
    small.sort(key=lambda i: bytes_moved(spec, shapes[i]))
    return small[-2:]


def sanitizer_work(spec: KernelSpec) -> float:
    """What one candidate's compute-sanitizer runs cost, roughly, in the unit of the order jobs start in: bytes
    moved plus flops (where the spec gives them) at each sanitizer shape. A tool's time grows with the accesses
    it checks; racecheck's with the shared-memory accesses, which a tiled kernel makes about as many of as it
    computes (the root manifest's matmul, 6.3 million flops at 128x96x257, took 0.6 s of racecheck a candidate,
    ten times more than the byte-bound kernels' whole runs)."""
    work = 0.0
    for i in sanitizer_sizes(spec, spec.test_shapes):
        sizes = spec.test_shapes[i]
        work += bytes_moved(spec, sizes)
        if spec.flops:
            with contextlib.suppress(EvaluationError):  # an order, not a verdict: a bad expression counts none
                work += eval_flops(spec.flops, sizes)
    return work


def write_shapes(spec: KernelSpec, plans: list[ShapePlan], directory: Path) -> list[SanitizeShape]:
    """The harness shapes of a kernel (:func:`sanitizer_sizes`), their input arrays written as files in
    ``directory``."""
    small = [plans[i] for i in sanitizer_sizes(spec, [p.sizes for p in plans])]
    directory.mkdir(parents=True, exist_ok=True)
    shapes: list[SanitizeShape] = []
    for si, plan in enumerate(small):
        arrays: list[SanitizeArray] = []
        for lay in plan.layouts:
            item: SanitizeArray = {"nbytes": lay.nbytes, "input": None}
            if lay.role != "out":
                name = f"in-{si}-{lay.name}.bin"
                (directory / name).write_bytes(np.ascontiguousarray(plan.calls[0].inputs[lay.name]).tobytes())
                item["input"] = name
            arrays.append(item)
        shapes.append({"key": plan.key, "arrays": arrays, "args": arg_items(spec, plan.sizes)})
    return shapes


def _stop_when_canceled(
    runner: SanitizerRunner,
    job_file: Path,
    queue: _Queue,
    members: list[SanitizeRuns] | None,
    stop: threading.Event,
) -> None:
    """A watcher thread's work until ``stop``: a canceled member stops the run when it is the one running (it may
    hang), and so do all members canceled."""
    while not stop.wait(0.5):
        now = runner.running(job_file)
        calling = None
        if now is not None:
            calling = queue.entries.get(now) if members is None else members[now] if now < len(members) else None
        if (calling is not None and calling.canceled) or (members is not None and all(r.canceled for r in members)):
            runner.cancel(job_file)
            return
