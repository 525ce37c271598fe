"""Timing on one GPU: the device's floors, the reference on cupy, and each candidate at every benchmark shape.

:class:`Timer` asks a :class:`~.slots.Slot`'s worker for samples (requests built by :mod:`.timing`), judges what
the timed calls left at the benchmark shapes (:mod:`.bench_checks`) and rejects times below the hardware floor.
The evaluator calls it with the GPU quiet (no sanitizer runs beside it).
"""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ...errors import EvaluationError
from ...judge import Job
from ...manifest.model import KernelSpec
from ...manifest.reference import ReferenceProblem, load_reference, stage_references
from ...sandbox.files import make_beneath, remove_beneath
from ..child.gpu_compare import park_layout, parked_size
from ..child.messages import (
    BenchShapeRequest,
    CompareItem,
    CompareRequest,
    FloorsRequest,
    ParkedItem,
    ParkedOutputs,
    SaveItem,
    SaveParkedRequest,
    TimedShape,
    TimeReply,
)
from ..compare_pool import ComparePool
from ..correctness.bench import BenchPlan, implausible, plan_bench, shape_requests
from ..correctness.bench_extra import place_set
from ..correctness.plan import Verdict
from ..library import Library
from ..process import WorkerDied, WorkerTimedOut
from ..sanitizer.schedule import KernelKey
from ..slots import Slot, library_key
from .floors import FLOORS_NAMESPACE, DeviceFloors
from .stats import LibraryTime, SampleStats, library_time, reference_request, summarize, time_request
from .torch_bar import TorchTime, torch_request, torch_time

if TYPE_CHECKING:
    from ...cache import Cache

__all__ = ["Timer"]


def _place(shape: TimedShape, k: int, sets: int) -> tuple[list[str | None], list[bool]] | None:
    """The output paths and judged flags of the call at place ``k`` of a shape's parked layout (a timed set, the
    tweaked set at ``sets``, the extra calls above it), or None where that call left nothing."""
    if k < sets:
        outputs = shape["outputs"]
        return (outputs[k], shape["judged"][k]) if k < len(outputs) else None
    if k == sets:
        tweak = shape.get("tweak_outputs")
        return (tweak, shape["tweak_judged"]) if tweak is not None else None
    extras, e = shape.get("extra_outputs") or [], k - sets - 1
    return (extras[e], shape["extra_judged"][e]) if e < len(extras) else None


def _settled(verdict: Verdict) -> Future[Verdict | list[SampleStats]]:
    """A future that already holds ``verdict``."""
    done: Future[Verdict | list[SampleStats]] = Future()
    done.set_result(verdict)
    return done


@dataclass
class _SharedPlan:
    """A kernel's benchmark plan while jobs use it (:meth:`Timer.bench_plan`, :meth:`Timer.release`)."""

    plan: Future[BenchPlan]
    folders: tuple[Path, Path]
    """Its input files' folder and the reference's outputs' folder."""
    users: int = 0
    """Jobs that asked for it and are not done with it."""


class Timer:
    """Timing requests of one evaluator (see the module docstring)."""

    def __init__(
        self,
        *,
        cache: Callable[[], Cache],
        submit: Callable[..., Future[Any]],
        note: Callable[..., None],
        count: Callable[[str, float], None],
        root: Path,
        seed: int,
        call_timeout_s: float,
        timeout_s: float,
        budget_s: float,
        compare_pool: ComparePool,
    ) -> None:
        self._cache = cache
        self._submit = submit
        self._note = note
        self._count = count
        self._root = root
        self._seed = seed
        self._call_timeout_s = call_timeout_s
        self.timeout_s = timeout_s
        """Longest a benchmark shape may go without progress."""
        self._budget_s = budget_s
        self._compare_pool = compare_pool
        self._lock = threading.Lock()
        self._plans: dict[tuple[KernelKey, int], _SharedPlan] = {}
        self._plans_made = 0
        self._timings = 0

    def floors(self, slot: Slot) -> DeviceFloors | None:
        """The slot's bandwidth and fp32 peak: measured once per device and cached."""
        if slot.floors is not None:
            return slot.floors
        cache = self._cache()
        cached = DeviceFloors.from_json(cache.get_json(FLOORS_NAMESPACE, slot.gpu.key))
        if cached is None:
            try:
                floors: FloorsRequest = {"op": "floors"}
                reply, _ = slot.request(floors, timeout_s=self.timeout_s)
            except (WorkerDied, WorkerTimedOut) as exc:
                self._note(f"measuring the floors of {slot.gpu.name} failed: {exc}")
                return None
            if not reply.get("ok"):
                self._note(f"measuring the floors of {slot.gpu.name} failed: {reply.get('error')}")
                return None
            cached = DeviceFloors(slot.gpu.name, float(reply["bandwidth_bps"]), float(reply["fp32_flops"]))
            cache.put_json(FLOORS_NAMESPACE, slot.gpu.key, cached.to_json())
        slot.floors = cached
        return cached

    def _references(self, job: Job) -> str:
        """Where the worker loads the kernel's references from: copies of their modules in the evaluator's folder,
        which the sandboxed worker reads (it may not read the project next to the manifest)."""
        spec = job.spec
        refs = [r for r in (spec.reference, spec.gpu_reference, spec.torch_reference) if r is not None]
        return str(stage_references(job.manifest.root, refs, self._root / "references"))

    def library(self, job: Job, slot: Slot) -> LibraryTime:
        """The library's median time at the first benchmark shape (the kernel's gpu-reference, else the numpy
        reference run on cupy), or why it has none (kept: the lock and ``status`` say it)."""
        try:
            reply = self._reference_reply(job, slot)
        except (WorkerDied, WorkerTimedOut, ReferenceProblem, OSError) as exc:
            found = LibraryTime(None, f"timing the library on cupy failed: {exc}"[:300])
        else:
            found = library_time(job.spec, dict(reply))
        if found.note is not None:
            self._note(f"{job.spec.name}: {found.note}; no speedup over the library", job.spec.name)
        return found

    def warm_library(self, job: Job, slot: Slot) -> None:
        """Call the library once at each benchmark shape, timing nothing, so what cupy compiles for it is compiled
        before the GPU is taken alone (the caller shares the GPU with the checks); a failure here is left for
        :meth:`library` to meet and report."""
        with contextlib.suppress(WorkerDied, WorkerTimedOut, ReferenceProblem, OSError):
            self._reference_reply(job, slot, warm=True)

    def _reference_reply(self, job: Job, slot: Slot, *, warm: bool = False) -> dict[str, Any]:
        """The worker's reply to the library's timing request at the benchmark shapes (``warm``: calls only)."""
        header = reference_request(job.spec, self._references(job))
        if warm:
            header["warm"] = True
        reply, _ = slot.request(header, timeout_s=self.timeout_s)
        return reply

    def torch(self, job: Job, slot: Slot) -> TorchTime | None:
        """The torch bar at the first benchmark shape (the faster of eager and ``torch.compile`` of the kernel's
        ``torch-reference``), or why it has none (kept: the lock and ``status`` say it); None where the kernel
        names no torch reference."""
        if job.spec.torch_reference is None:
            return None
        try:  # torch.compile compiles once per shape in the worker: a slow first call, within the request's limit
            library = reference_request(job.spec, self._references(job))
            header = torch_request(job.spec, library["root"], library["shapes"])
            reply, _ = slot.request(header, timeout_s=self.timeout_s)
        except (WorkerDied, WorkerTimedOut, ReferenceProblem, OSError) as exc:
            found = TorchTime(None, note=f"timing the torch-reference failed: {exc}"[:300])
        else:
            found = torch_time(job.spec, dict(reply))
        if found.note is not None:
            self._note(f"{job.spec.name}: {found.note}; no speedup over torch", job.spec.name)
        return found

    def bench_plan(self, job: Job, arch: str, slot: Slot) -> Future[BenchPlan]:
        """The benchmark-shape checks of a job's kernel for GPUs of this slot's L2 size, made once for the jobs
        that use it until the last of them is done (:meth:`release`). Plans are made one at a time, in the order
        asked for where ``submit`` (the constructor's) runs one thing at a time, as the evaluator's does: the
        reference runs at the benchmark shapes and its inputs and outputs are written out (GBs for large shapes)
        beside the gate's compiles rather than in their way, and the first job asks first."""
        l2 = slot.gpu.l2_bytes or (40 << 20)
        key = (KernelKey.of(job, arch), l2)
        with self._lock:
            shared = self._plans.get(key)
            if shared is None:
                reference = load_reference(job.manifest.root, job.spec.reference)
                name = f"{job.spec.name}-{self._plans_made}"  # the reference's outputs where no worker reads them
                self._plans_made += 1
                directory, expected = self._root / "bench" / name, self._root / "expected" / name
                plan = self._submit(
                    plan_bench, job.spec, reference, l2, directory, seed=self._seed, expected_directory=expected
                )
                shared = self._plans[key] = _SharedPlan(plan, (directory, expected))
            shared.users += 1
            return shared.plan

    def release(self, job: Job, arch: str, slot: Slot) -> None:
        """A job that asked for its kernel's benchmark plan is done with it: after the last such job the plan's
        arrays and files (the inputs and the reference's outputs, GBs for large shapes) go now, not when the
        evaluator closes; a later job of the kernel makes the plan again (the same seed, the same inputs)."""
        key = (KernelKey.of(job, arch), slot.gpu.l2_bytes or (40 << 20))
        with self._lock:
            shared = self._plans.get(key)
            if shared is None:
                return
            shared.users -= 1
            if shared.users > 0:
                return
            del self._plans[key]
        shared.plan.add_done_callback(lambda _: _remove_plan(shared.folders))

    def time(
        self,
        job: Job,
        slot: Slot,
        lib: Library,
        bench: Future[BenchPlan],
        floors: DeviceFloors | None,
        medians: dict[str, float] | None = None,
    ) -> Future[Verdict | list[SampleStats]]:
        """Samples of one candidate at every benchmark shape, or why it fails there (what the timed calls left,
        a time below the hardware floor, a hang or a crash). The GPU part runs now; what the calls left is
        judged on the CPU pool (the future), so the GPU times the next candidate meanwhile. ``medians`` gets the
        first shape's median under the library's key at once (to pick the finalists before the judging ends)."""
        try:
            plan = bench.result()
        except EvaluationError as exc:
            return _settled(Verdict("crashed", f"the reference failed at the benchmark shapes: {exc}"))
        with self._lock:  # its own folder per timing: the judging of an earlier timing of the library may still read
            self._timings += 1
            out_dir = slot.workdir / "bench-out" / f"{lib.digest[:24]}-{self._timings}"
        timed = self._run(job.spec, slot, lib, plan, out_dir)
        if not isinstance(timed, Verdict):
            self._count_seconds(timed)
            if medians is not None and timed and timed[0]["samples_us"]:
                medians[library_key(lib)] = summarize(timed[0]["samples_us"]).median_us
        if isinstance(timed, Verdict):
            _remove(slot, out_dir)
            return _settled(timed)
        return self._bench_verdict(job.spec, plan, timed, floors, out_dir, slot, slot.gpu.l2_bytes or (40 << 20))

    def idle_time(self, job: Job, slot: Slot, lib: Library, bench: Future[BenchPlan]) -> SampleStats | None:
        """The first benchmark shape of a timed finalist sampled again in the ``idle-gaps`` regime (no checks: its
        back-to-back timing checked what its calls left); None where that fails (a note says why: the
        back-to-back time stands alone)."""
        plan = bench.result()
        requests = shape_requests(job.spec, plan, make_beneath(slot.workdir, "bench-idle"))[:1]
        header = time_request(library_key(lib), requests, budget_s=self._budget_s, regime="idle-gaps")
        try:
            failed = slot.load(job.spec, lib, timeout_s=self._call_timeout_s)  # again after a worker restart
            reply, _ = slot.request(header, timeout_s=self.timeout_s) if failed is None else ({"error": failed}, [])
        except (WorkerDied, WorkerTimedOut) as exc:
            self._note(f"{job.spec.name}: timing {lib.digest[:12]} with idle gaps failed: {exc}", job.spec.name)
            return None
        shapes = cast(TimeReply, reply).get("shapes") or [] if reply.get("ok") else []
        if not shapes or not shapes[0]["samples_us"]:
            why = reply.get("error") or "no samples"
            self._note(f"{job.spec.name}: timing {lib.digest[:12]} with idle gaps failed: {why}", job.spec.name)
            return None
        return summarize(shapes[0]["samples_us"])

    def _count_seconds(self, shapes: list[TimedShape]) -> None:
        """The worker's account of its time (``worker_sets_s``, ``worker_samples_s``, ``worker_checks_s`` and its
        parts, ``worker_check_lazy_s`` ...: every name of :attr:`~.messages.TimedShape.seconds`): numbers only, for
        the evaluator's statistics (a candidate shares the worker's process, so nothing is judged by them)."""
        for shape in shapes:
            seconds = shape.get("seconds")
            if not isinstance(seconds, dict):
                continue
            for name, value in seconds.items():
                if str(name).isidentifier() and isinstance(value, (int, float)) and 0 <= value < 1e6:
                    self._count(f"worker_{name}_s", float(value))

    def _run(
        self, spec: KernelSpec, slot: Slot, lib: Library, plan: BenchPlan, out_dir: Path
    ) -> Verdict | list[TimedShape]:
        """The worker's timing of one library (its outputs left in ``out_dir``), or why it failed."""
        try:
            failed = slot.load(spec, lib, timeout_s=self._call_timeout_s)
            if failed is not None:
                return Verdict("crashed", failed)
            requests = shape_requests(spec, plan, make_beneath(slot.workdir, out_dir))
            header = time_request(library_key(lib), requests, budget_s=self._budget_s, park=slot.comparer is not None)
            reply, _ = slot.request(header, timeout_s=self.timeout_s)
            if reply.get("ok") and reply.get("parked"):
                not_saved = self._compare_parked(spec, slot, plan, requests, cast(TimeReply, reply), out_dir)
                if not_saved is not None:
                    return not_saved
        except WorkerTimedOut:
            return Verdict(
                "timed_out",
                f"at a benchmark shape a call made no progress for {self.timeout_s:g} "
                "s; the worker was killed (a deadlock between blocks at the benchmark size?)",
            )
        except WorkerDied as exc:
            return Verdict("crashed", f"the worker process died while timing ({exc}): {exc.log[-600:]}")
        if not reply.get("ok"):
            error = str(reply.get("error"))
            if error.startswith("returned"):
                return Verdict("incorrect", f"while timing at the benchmark shapes: the call {error}")
            return Verdict("crashed", f"while timing at the benchmark shapes: {error}")
        return cast(TimeReply, reply)["shapes"]

    def _compare_parked(
        self,
        spec: KernelSpec,
        slot: Slot,
        plan: BenchPlan,
        requests: list[BenchShapeRequest],
        reply: TimeReply,
        out_dir: Path,
    ) -> Verdict | None:
        """The comparer's verdict on each parked output (:mod:`.child.gpu_compare`): one it finds clear is marked
        judged in the reply's shapes, every other one the worker writes to a file for the CPU's rules (as without
        parking). None, or why the worker could not write them. Raises what :meth:`Slot.request` raises."""
        start = time.perf_counter()
        shapes, parked = reply.get("shapes") or [], reply["parked"]
        layout = park_layout(requests)
        clear = [False] * len(layout)
        if int(parked.get("size") or 0) >= parked_size(layout):
            clear = self._clear_on_gpu(spec, slot, plan, layout, parked) or clear
        self._count("judge_gpu_s", time.perf_counter() - start)
        self._count("outputs_judged_on_gpu", sum(clear))
        _mark_unjudged(shapes, requests, plan)
        saves = _cpu_saves(shapes, plan, layout, clear, out_dir)
        self._count("outputs_judged_on_cpu", len(saves))
        save: SaveParkedRequest = {"op": "save_parked", "items": saves}  # sent with none too: the worker zeroes them
        said_save, _ = slot.request(save, timeout_s=self.timeout_s)
        if not said_save.get("ok"):
            return Verdict(
                "crashed", f"the worker could not write or zero what the timed calls left: {said_save.get('error')}"
            )
        return None

    def _clear_on_gpu(
        self, spec: KernelSpec, slot: Slot, plan: BenchPlan, layout: list[ParkedItem], parked: ParkedOutputs
    ) -> list[bool] | None:
        """Which parked outputs the comparer process finds clear, or None when it said nothing usable."""
        names = [a.name for a in spec.args if a.is_array]
        items: list[CompareItem] = []
        for item in layout:
            bench_set = place_set(plan.shapes[item["shape"]], item["set"])
            expected = bench_set.expected_files.get(names[item["array"]])
            dtype = item["dtype"] if expected is not None else ""  # no file: not for the comparer
            items.append(
                {"offset": item["offset"], "nbytes": item["nbytes"], "dtype": dtype, "expected": expected or ""}
            )
        request: CompareRequest = {
            "op": "compare",
            "handle": str(parked["handle"]),
            "size": int(parked["size"]),
            "items": items,
            "rtol": spec.tolerance.rtol,
            "atol": spec.tolerance.atol,
        }
        said = slot.ask_comparer(request, timeout_s=self.timeout_s)
        if slot.comparer is None:  # closed just now, after its last failure
            self._note(
                f"{slot.gpu.name}: the comparer process failed {slot.comparer_failures} times; what the timed calls "
                "leave is judged on the CPU from now on"
            )
        found = said.get("clear") if said is not None else None
        if isinstance(found, list) and len(found) == len(layout):
            return [x is True for x in found]
        return None

    def _bench_verdict(
        self,
        spec: KernelSpec,
        plan: BenchPlan,
        shapes: list[TimedShape],
        floors: DeviceFloors | None,
        out_dir: Path,
        slot: Slot,
        l2_bytes: int,
    ) -> Future[Verdict | list[SampleStats]]:
        """What the timed calls left (judged in a comparing process, no thread waiting for it: read only from beneath
        the slot's folder, which the worker writes), and whether the times are possible."""
        start = time.perf_counter()
        outcome: Future[Verdict | list[SampleStats]] = Future()

        def judged(f: Future[Verdict | None]) -> None:
            _remove(slot, out_dir)
            self._count("judge_bench_s", time.perf_counter() - start)
            try:
                verdict = f.result()
                outcome.set_result(verdict if verdict is not None else self._plausible(spec, shapes, floors, l2_bytes))
            except BaseException as exc:
                outcome.set_exception(exc)

        self._compare_pool.submit(spec, plan, shapes, slot.workdir).add_done_callback(judged)
        return outcome

    @staticmethod
    def _plausible(
        spec: KernelSpec, shapes: list[TimedShape], floors: DeviceFloors | None, l2_bytes: int
    ) -> Verdict | list[SampleStats]:
        """The samples' statistics, or a rejection where a median is no time or below the hardware floor."""
        stats = [summarize(s["samples_us"]) for s in shapes]
        warm = [s.get("mode") == "graph" for s in shapes]
        return implausible(spec, stats, floors, warm, l2_bytes=l2_bytes) or stats


def _mark_unjudged(shapes: list[TimedShape], requests: list[BenchShapeRequest], plan: BenchPlan) -> None:
    """Every judged flag of the reply's shapes False, until the comparer passed that output."""
    for si, shape_out in enumerate(shapes):
        arrays = len(requests[si]["arrays"])
        shape_out["judged"] = [[False] * arrays for _ in plan.shapes[si].sets]
        shape_out["tweak_judged"] = [False] * arrays
        shape_out["extra_judged"] = [[False] * arrays for _ in shape_out.get("extra_outputs") or []]


def _cpu_saves(
    shapes: list[TimedShape], plan: BenchPlan, layout: list[ParkedItem], clear: list[bool], out_dir: Path
) -> list[SaveItem]:
    """Mark the outputs the comparer found clear as judged; the files the worker writes for the others, for the CPU's
    rules (each output's path set in the reply's shapes)."""
    saves: list[SaveItem] = []
    for item, ok in zip(layout, clear, strict=True):
        if item["shape"] >= len(shapes):
            continue
        shape_out = shapes[item["shape"]]
        k, j = item["set"], item["array"]
        found = _place(shape_out, k, len(plan.shapes[item["shape"]].sets))
        if found is None or j >= len(found[0]):
            continue  # the call failed before it left this output (check_error says so)
        paths, flags = found
        if ok:
            flags[j] = True
            continue
        path = out_dir / f"parked-s{item['shape']}-{k}-{j}.bin"
        paths[j] = str(path)
        saves.append({"offset": item["offset"], "nbytes": item["nbytes"], "path": str(path)})
    return saves


def _remove_plan(folders: tuple[Path, Path]) -> None:
    """Remove a benchmark plan's folders (the evaluator's own: workers only read them)."""
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


def _remove(slot: Slot, out_dir: Path) -> None:
    """Remove what a timing left in ``out_dir``, beneath the slot's folder, which its worker writes: moved through no
    link the worker planted into the evaluator's own trash first (:func:`~r1build.sandbox.files.remove_beneath`)."""
    remove_beneath(slot.workdir, out_dir, slot.workdir.parent / "trash")
