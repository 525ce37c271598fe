"""compute-sanitizer over the evaluator's candidates: batched per kernel and tool, beside the checks.

:class:`Sanitizing` owns the runs of one evaluator: per kernel × arch the small shapes' inputs (written once,
shared by its candidates); per candidate the future of its memcheck, racecheck and initcheck outcomes, their
cancellation when the candidate fails elsewhere, and the reasons a finding or an unfinished run becomes.

A sanitizer's start costs seconds, a candidate's calls on small shapes a fraction of one, so a run takes a batch: the
candidates of one kernel and tool whose libraries are built (gathered for a moment while their siblings' compiles end;
at most ``batch`` of them, and no more than an even share of the kernel's candidates among the :data:`RUNS_PER_QUEUE`
runs it may have at once, which start side by side). Sanitizer processes of all kernels together are at most one per
core. A run that finishes with no report clears its whole batch. Runs go on while the GPU times a job: their harness
stops before its next GPU work until the timing is done (:class:`~.slots.Quiet`). Anything else (a report, a crash, a
run that stalls) is never taken on trust: the batch is split where the harness's markers point (those before the
suspect, the suspect alone, those after; in halves when the markers say nothing) and each part runs again, until a
candidate alone in its run gets that run's verdict. So a finding is always a candidate's own, and a pass is always a
whole clean run.
:mod:`.sanitize` runs one tool; this module decides when, on what, and what the outcome means.
"""

from __future__ import annotations

import contextvars
import json
import logging
import math
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..gate.compile_slots import PrioritySlots, cores
from ..judge import Job
from ..manifest.model import KernelSpec
from ..records import Candidate, Status
from .checks import ShapePlan, Verdict, arg_codes, arg_items
from .child.messages import SanitizeArray, SanitizeJob, SanitizeShape
from .devices import gpu_runs_arch
from .floors import bytes_moved
from .library import Library, LibraryFailure
from .sanitize import TOOLS, BatchRun, SanitizerOutcome, uses_shared_memory
from .slots import Slot

__all__ = ["KernelKey", "SanitizeRuns", "Sanitizing", "write_shapes"]

log = logging.getLogger(__name__)

SANITIZE_MAX_BYTES = 2 << 20
"""Shapes whose arrays together exceed this are too large for a quick sanitizer run."""
GATHER_S = 1.5
"""Longest a batch waits for the libraries of its kernel still being built."""
RUNS_PER_QUEUE = 2
"""Runs of one kernel and tool at once. More is slower: sanitizer runs share the one GPU, and on the H200 host eight
a kernel (racecheck four candidates a run) took the root manifest from 102 to 120 s (bench/results/
gpu_session_2026-12-02.md, call 4)."""

Submit = Callable[..., "Future[Any]"]


@dataclass(frozen=True)
class KernelKey:
    """One kernel of one manifest on one arch."""

    manifest: str
    kernel: str
    arch: str

    @classmethod
    def of(cls, job: Job, arch: str) -> KernelKey:
        return cls(str(job.manifest.path), job.spec.name, arch)


@dataclass
class _Inputs:
    """The sanitizer inputs of one kernel × arch, shared by its candidates."""

    directory: Path
    shapes: list[SanitizeShape]
    """Harness shapes (the inputs are files in ``directory``)."""
    unready: int = 0
    """Candidates started whose libraries are not built yet (a batch waits a moment for them)."""
    total: int = 0
    """Candidates of the kernel whose runs were started."""


class SanitizeRuns:
    """One candidate's runs: each tool's verdict as its runs settle it, and ``outcomes`` once every tool has
    one."""

    def __init__(self) -> None:
        self.outcomes: Future[list[SanitizerOutcome]] = Future()
        """Every tool's outcome, in :data:`~.sanitize.TOOLS` order (tools that do not apply left out)."""
        self.canceled = False
        self.library: Path | None = None
        self._tools: dict[str, SanitizerOutcome | None] = {}
        self._lock = threading.Lock()

    def expect(self, tools: list[str]) -> None:
        with self._lock:
            self._tools = dict.fromkeys(tools)
        if not tools:
            self._finish()

    def settle(self, tool: str, outcome: SanitizerOutcome) -> None:
        """Record one tool's verdict (the first one counts)."""
        with self._lock:
            if self._tools.get(tool) is not None or tool not in self._tools:
                return
            self._tools[tool] = outcome
            if any(o is None for o in self._tools.values()):
                return
        self._finish()

    def fail(self, exc: BaseException) -> None:
        if not self.outcomes.done():
            self.outcomes.set_exception(exc)

    def _finish(self) -> None:
        with self._lock:
            if self.outcomes.done():
                return
            self.outcomes.set_result([o for o in self._tools.values() if o is not None])


@dataclass(kw_only=True)
class _Queue:
    """The candidates of one kernel × arch waiting for one tool, and its runs."""

    kernel: KernelKey
    tool: str
    slot: Slot
    inputs: _Inputs
    pending: list[SanitizeRuns] = field(default_factory=list)
    """Ready candidates not in a run yet."""
    parts: list[list[SanitizeRuns]] = field(default_factory=list)
    """Parts of split batches, run as they are (never merged again, so splitting ends)."""
    running: int = 0
    gathering: bool = False


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
        how long a kernel's runs take, and the longest must not start last)."""
        self._lock = threading.Lock()
        self._inputs: dict[KernelKey, _Inputs] = {}
        self._runs: dict[tuple[KernelKey, str], SanitizeRuns] = {}
        self._queues: dict[tuple[KernelKey, str], _Queue] = {}
        self._files = 0
        self.pool = ThreadPoolExecutor(max_workers=4 * cores() + 4, thread_name_prefix="r1build-sanitize")
        """Where runs wait for a place among :attr:`processes` and for their process (not the evaluator's compile
        pool, which they would hold); more threads than places, so every run waiting is in line for one."""

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
    ) -> None:
        """Queue compute-sanitizer on a variant as soon as its library and the job's plan exist, before (and
        whatever) the correctness checks say: its runs then overlap the checks, and a caller that prepared
        several jobs finds them done. A variant that fails its checks has its runs canceled."""
        slot = self.slot_for(arch)
        if slot is None:
            return
        kernel = KernelKey.of(job, arch)
        with self._lock:
            if kernel not in self._inputs:
                directory = slot.workdir / "sanitize" / f"{job.spec.name}-{arch}-{len(self._inputs)}"
                self._inputs[kernel] = _Inputs(directory, [])
            inputs = self._inputs[kernel]
            if (kernel, candidate.digest) in self._runs:
                return
            runs = SanitizeRuns()
            self._runs[kernel, candidate.digest] = runs
            inputs.unready += 1
            inputs.total += 1
        started = threading.Event()
        started_lock = threading.Lock()

        def ready(_: object) -> None:
            with started_lock:
                if not (library.done() and plan.done()) or started.is_set():
                    return
                started.set()
            self._submit(self._ready, job, slot, kernel, inputs, library, plan, runs)

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
            for queue in self._queues.values():
                if queue.kernel == kernel and runs in queue.pending:
                    queue.pending.remove(runs)
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
        outputs only now and then, racecheck finds it every time, so the reason is the same every run."""
        if verdict.kind not in ("value", "nan", "unwritten") or runs is None:
            return None
        try:
            outcomes = runs.outcomes.result(timeout=wait_s)
        except Exception:
            return None
        found = next((o for o in outcomes if o.tool == "racecheck" and o.verdict == "finding"), None)
        return self.detail(job, arch, found) if found is not None else None

    def detail(self, job: Job, arch: str, outcome: SanitizerOutcome) -> str:
        """A compute-sanitizer outcome as a result's reason (a racecheck finding is named the same way whichever
        path reports it)."""
        with self._lock:
            inputs = self._inputs.get(KernelKey.of(job, arch))
        shapes = ", ".join(s["key"] for s in inputs.shapes) if inputs else "small shapes"
        if outcome.tool == "racecheck" and outcome.verdict == "finding":
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
            tools = [t for t in TOOLS if t != "racecheck" or uses_shared_memory(lib.path, self._cuobjdump())]
            runs.expect(tools)
            with self._lock:
                for tool in tools:
                    queue = self._queues.get((kernel, tool))
                    if queue is None:
                        queue = self._queues[kernel, tool] = _Queue(kernel=kernel, tool=tool, slot=slot, inputs=inputs)
                    if not runs.canceled:
                        queue.pending.append(runs)
                    queues.append(queue)
        except BaseException as exc:
            runs.fail(exc)
        finally:
            with self._lock:  # counted as ready only now, so a gathering batch waits for it
                inputs.unready -= 1
        for queue in queues:
            self._dispatch(job, queue)

    def _dispatch(self, job: Job, queue: _Queue) -> None:
        """Start the queue's next runs while it has room: parts of split batches first, then a new batch."""
        while True:
            with self._lock:
                if queue.running >= self.per_queue:
                    return
                if queue.parts:
                    part = [r for r in queue.parts.pop(0) if not r.canceled]
                    if not part:
                        continue
                elif queue.pending and not queue.gathering:
                    queue.gathering = True
                    queue.running += 1
                    self._spawn(self._gather_and_run, job, queue)
                    continue
                else:
                    return
                queue.running += 1
            self._spawn(self._run_batch, job, queue, part)

    def _gather_and_run(self, job: Job, queue: _Queue) -> None:
        """Wait a moment for siblings still being built (unless the batch is full), then run what is pending."""
        with self._lock:  # an even share of the kernel's candidates among the runs it may have at once
            size = max(1, min(self.batch, math.ceil(queue.inputs.total / self.per_queue)))
        deadline = time.monotonic() + (GATHER_S if size > 1 else 0.0)
        while time.monotonic() < deadline:
            with self._lock:
                if len(queue.pending) >= size or queue.inputs.unready == 0:
                    break
            time.sleep(0.05)
        with self._lock:
            part, queue.pending = queue.pending[:size], queue.pending[size:]
            queue.gathering = False
        if part:
            self._dispatch(job, queue)  # the rest of what waits starts beside this run, where there is room
            self._run_batch(job, queue, part)
        else:
            with self._lock:
                queue.running -= 1
            self._dispatch(job, queue)

    def _run_batch(self, job: Job, queue: _Queue, part: list[SanitizeRuns]) -> None:
        """One run over ``part``; a clean run clears it, a batch of one gets its verdict, anything else splits."""
        try:
            with self.processes.take(None):  # a place first: candidates canceled while it waited are left out
                members = [r for r in part if not r.canceled and r.library is not None]
                if members:
                    found = self._run_tool(job, queue, members)
                    self._settle(queue, members, found)
        except BaseException as exc:
            for runs in part:
                runs.fail(exc)
        finally:
            with self._lock:
                queue.running -= 1
        self._dispatch(job, queue)

    def _settle(self, queue: _Queue, members: list[SanitizeRuns], found: BatchRun) -> None:
        tool, outcome = queue.tool, found.outcome
        if outcome.verdict == "clean":
            for runs in members:
                runs.settle(tool, outcome)
            return
        if len(members) == 1 and outcome.verdict != "canceled":
            members[0].settle(tool, outcome)
            return
        if outcome.verdict == "canceled":  # stopped for a canceled member: the others run again
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

    def _run_tool(self, job: Job, queue: _Queue, members: list[SanitizeRuns]) -> BatchRun:
        runner = queue.slot.sanitizer
        assert runner is not None
        with self._lock:
            self._files += 1
            job_file = queue.inputs.directory / f"run-{queue.tool}-{self._files}.json"
        sanitize_job: SanitizeJob = {
            "libs": [str(r.library) for r in members],
            "entry": job.spec.name,
            "argtypes": arg_codes(job.spec),
            "shapes": queue.inputs.shapes,
            "token": secrets.token_hex(8),
        }
        hold = queue.slot.quiet.hold_file
        if hold is not None:
            sanitize_job["hold"] = str(hold)
        job_file.write_text(json.dumps(sanitize_job))
        stop = threading.Event()

        def watch() -> None:  # a canceled member stops the run when it is the one running (it may hang)
            while not stop.wait(0.5):
                now = runner.running(job_file)
                if (now is not None and now < len(members) and members[now].canceled) or all(
                    r.canceled for r in members
                ):
                    runner.cancel(job_file)
                    return

        watcher = threading.Thread(target=watch, name="r1build-sanitizer-watch", daemon=True)
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
            if self._span is not None:
                self._span("sanitizer_run", f"{queue.kernel.kernel}/{queue.kernel.arch}", start)
        log.info(
            "%s %s/%s: %d candidates in %.1f s: %s%s",
            queue.tool,
            queue.kernel.kernel,
            queue.kernel.arch,
            len(members),
            seconds,
            found.outcome.verdict,
            "" if found.suspect is None else f" (markers point at #{found.suspect})",
        )
        return found

    def _shapes(self, job: Job, inputs: _Inputs, plans: list[ShapePlan]) -> list[SanitizeShape]:
        """The kernel's sanitizer shapes, their inputs written once."""
        with self._lock:
            if not (inputs.shapes or inputs.directory.exists()):
                inputs.shapes = write_shapes(job.spec, plans, inputs.directory)
            return inputs.shapes


def write_shapes(spec: KernelSpec, plans: list[ShapePlan], directory: Path) -> list[SanitizeShape]:
    """The harness shapes of a kernel: its two largest small shapes (at most :data:`SANITIZE_MAX_BYTES`), their
    input arrays written as files in ``directory``."""
    small = [p for p in plans if bytes_moved(spec, p.sizes) <= SANITIZE_MAX_BYTES]
    small.sort(key=lambda p: bytes_moved(spec, p.sizes))
    directory.mkdir(parents=True, exist_ok=True)
    shapes: list[SanitizeShape] = []
    for si, plan in enumerate(small[-2:]):
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
