"""compute-sanitizer over the evaluator's candidates: started as soon as a variant is built, beside its checks.

:class:`Sanitizing` owns the runs of one evaluator: per kernel × arch the small shapes' inputs (written once,
shared by its candidates), per candidate the future of its memcheck, racecheck and initcheck outcomes, their
cancellation when the candidate fails elsewhere, and the reasons a finding or an unfinished run becomes.
:mod:`.sanitize` runs one tool; this module decides when, on what, and what the outcome means.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..judge import Job
from ..records import Candidate, Status
from .checks import ShapePlan, Verdict, arg_codes, arg_items
from .child.messages import SanitizeArray, SanitizeJob, SanitizeShape
from .devices import gpu_runs_arch
from .floors import bytes_moved
from .library import Library, LibraryFailure
from .sanitize import TOOLS, SanitizerOutcome, uses_shared_memory
from .slots import Slot

__all__ = ["KernelKey", "Sanitizing"]

SANITIZE_MAX_BYTES = 2 << 20
"""Shapes whose arrays together exceed this are too large for a quick sanitizer run."""

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


class Sanitizing:
    """The sanitizer runs of one evaluator (see the module docstring)."""

    def __init__(
        self,
        slots: list[Slot],
        *,
        submit: Submit,
        note: Callable[[str], None],
        count: Callable[[str, float], None],
        cuobjdump: Callable[[], str | None],
    ) -> None:
        self._slots = slots
        self._submit = submit
        self._note = note
        self._count = count
        self._cuobjdump = cuobjdump
        self._lock = threading.Lock()
        self._inputs: dict[KernelKey, _Inputs] = {}
        self._runs: dict[tuple[KernelKey, str], tuple[Future[list[SanitizerOutcome]], Path]] = {}

    def slot_for(self, arch: str) -> Slot | None:
        """The GPU that sanitizes candidates of ``arch``: the first one of that arch with a sanitizer."""
        return next((s for s in self._slots if gpu_runs_arch(s.gpu, arch) and s.sanitizer is not None), None)

    def runs(self, job: Job, arch: str, candidate: Candidate) -> tuple[Future[list[SanitizerOutcome]], Path] | None:
        """The outcomes (a future) and job file of a candidate's runs, when they were started."""
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
        """Start compute-sanitizer on a variant as soon as its library and the job's plan exist, before (and
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
            done: Future[list[SanitizerOutcome]] = Future()
            job_file = inputs.directory / f"job-{candidate.digest[:16]}-{len(self._runs)}.json"
            self._runs[kernel, candidate.digest] = (done, job_file)
        started = threading.Event()
        started_lock = threading.Lock()

        def ready(_: object) -> None:
            with started_lock:
                if not (library.done() and plan.done()) or started.is_set():
                    return
                started.set()
            self._submit(self._run_all, job, slot, inputs, library, plan, done, job_file)

        library.add_done_callback(ready)
        plan.add_done_callback(ready)

    def cancel(self, job: Job, arch: str, candidate: Candidate, job_file: Path | None) -> None:
        """Stop a failed candidate's runs; a later evaluation of it starts afresh."""
        slot = self.slot_for(arch)
        if slot is None or slot.sanitizer is None or job_file is None:
            return
        slot.sanitizer.cancel(job_file)
        key = (KernelKey.of(job, arch), candidate.digest)
        with self._lock:
            found = self._runs.get(key)
            if found is not None and found[1] == job_file:
                del self._runs[key]

    def verdict(self, job: Job, arch: str, outcomes: list[SanitizerOutcome]) -> tuple[Status, str] | None:
        """What a candidate's finished runs make of it: a finding, or a run that did not finish, rejects."""
        for outcome in outcomes:
            if outcome.verdict == "finding":
                return "incorrect", self.detail(job, arch, outcome)
            if outcome.verdict == "unfinished":
                status: Status = "timed_out" if "did not finish" in outcome.detail else "crashed"
                return status, self.detail(job, arch, outcome)
        return None

    def race_found(
        self, job: Job, arch: str, runs: Future[list[SanitizerOutcome]] | None, verdict: Verdict, wait_s: float
    ) -> str | None:
        """For wrong outputs of a kernel racecheck examines: its finding, when it has one. A race shows in the
        outputs only now and then, racecheck finds it every time, so the reason is the same every run."""
        if verdict.kind not in ("value", "nan", "unwritten") or runs is None:
            return None
        try:
            outcomes = runs.result(timeout=wait_s)
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
    def _shapes(self, job: Job, inputs: _Inputs, plans: list[ShapePlan]) -> list[SanitizeShape]:
        """The two largest small shapes of the kernel, their inputs written once."""
        with self._lock:
            if inputs.shapes or inputs.directory.exists():
                return inputs.shapes
            spec = job.spec
            small = [p for p in plans if bytes_moved(spec, p.sizes) <= SANITIZE_MAX_BYTES]
            small.sort(key=lambda p: bytes_moved(spec, p.sizes))
            inputs.directory.mkdir(parents=True, exist_ok=True)
            for si, plan in enumerate(small[-2:]):
                arrays: list[SanitizeArray] = []
                for lay in plan.layouts:
                    item: SanitizeArray = {"nbytes": lay.nbytes, "input": None}
                    if lay.role != "out":
                        name = f"in-{si}-{lay.name}.bin"
                        data = np.ascontiguousarray(plan.calls[0].inputs[lay.name]).tobytes()
                        (inputs.directory / name).write_bytes(data)
                        item["input"] = name
                    arrays.append(item)
                inputs.shapes.append({"key": plan.key, "arrays": arrays, "args": arg_items(spec, plan.sizes)})
            return inputs.shapes

    def _run_all(
        self,
        job: Job,
        slot: Slot,
        inputs: _Inputs,
        library: Future[Library | LibraryFailure],
        plan: Future[list[ShapePlan]],
        done: Future[list[SanitizerOutcome]],
        job_file: Path,
    ) -> None:
        """Every tool over one candidate, each its own run on the CPU pool; ``done`` gets their outcomes."""
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
            shapes = self._shapes(job, inputs, plan.result())
            if not shapes:
                done.set_result([])
                return
            sanitize_job: SanitizeJob = {
                "lib": str(lib.path),
                "entry": job.spec.name,
                "argtypes": arg_codes(job.spec),
                "shapes": shapes,
            }
            job_file.write_text(json.dumps(sanitize_job))
            tools = [t for t in TOOLS if t != "racecheck" or uses_shared_memory(lib.path, self._cuobjdump())]
            runs: list[Future[SanitizerOutcome]] = [
                self._submit(self._run_tool, slot, tool, job_file) for tool in tools
            ]
        except BaseException as exc:
            done.set_exception(exc)
            return
        if not runs:
            done.set_result([])
            return
        lock = threading.Lock()

        def finished(_: object) -> None:
            with lock:  # the callback of the run that ends last sets the outcomes, once
                if done.done() or not all(r.done() for r in runs):
                    return
                try:
                    done.set_result([r.result() for r in runs])
                except BaseException as exc:
                    done.set_exception(exc)

        for run in runs:
            run.add_done_callback(finished)

    def _run_tool(self, slot: Slot, tool: str, job_file: Path) -> SanitizerOutcome:
        assert slot.sanitizer is not None
        with slot.quiet.shared():
            start = time.perf_counter()
            outcome = slot.sanitizer.run(tool, job_file)
            self._count("sanitizer_runs", 1)
            self._count("sanitizer_s", time.perf_counter() - start)
        return outcome
