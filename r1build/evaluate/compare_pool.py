"""Processes that compare what the timed calls left at the benchmark shapes.

The outputs of one timing are hundreds of MB (three input sets of a 64M-element transpose: 768 MB), compared with
the reference element by element in float64. Threads of the evaluator's process doing that share its interpreter
lock with everything else the process does (the GPU thread, the check workers' judging, the sanitizer runs'
readers), so the comparisons run in processes of their own, which copy the outputs (never mapped: the worker may
still change them) and map the reference's outputs, and go through them in cache-sized chunks
(:data:`~.compare.CACHED_CHUNK`). The plan travels without its arrays (:meth:`~.bench_checks.BenchPlan.for_comparing`).

Where the comparer process on the GPU passed every output (:mod:`.child.gpu_compare`), nothing is read from files
and the rest of the judging runs on the caller's executor: the processes start only when some output needs the CPU's
rules.
A pool that breaks (a comparing process killed, say for memory) is replaced at the next call; the calls that found
it broken are judged in this process instead (on the caller's executor), so a verdict never depends on the pool.
No thread waits for a comparing process: :meth:`ComparePool.submit` returns a future.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from ..manifest.model import KernelSpec
from .child.messages import TimedShape
from .correctness.bench import BenchPlan
from .correctness.bench_extra import timed_verdict
from .correctness.compare import CACHED_CHUNK
from .correctness.plan import Verdict

__all__ = ["ComparePool", "default_processes"]

Submit = Callable[..., "Future[Any]"]


def default_processes() -> int:
    """Half the cores, at most 8: judging shares the machine with compiles and compute-sanitizer runs. None (0) in
    a daemonic process, which may not start processes of its own (a Dask worker's evaluator)."""
    if multiprocessing.current_process().daemon:
        return 0
    return max(1, min(8, (os.cpu_count() or 2) // 2))


def _in_a_thread(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[Any]:
    """``fn`` on a thread of its own (where no other executor is given)."""
    done: Future[Any] = Future()

    def run() -> None:
        try:
            done.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            done.set_exception(exc)

    threading.Thread(target=run, name="r1build-compare", daemon=True).start()
    return done


class ComparePool:
    """Judges benchmark-shape outputs in ``processes`` processes started on first use (0: on ``submit``, the
    caller's executor, as it does where the pool is broken or closed)."""

    def __init__(self, processes: int | None = None, *, submit: Submit | None = None) -> None:
        self.processes = default_processes() if processes is None else max(0, processes)
        """How many comparing processes run at most."""
        self._submit = submit or _in_a_thread
        self._lock = threading.Lock()
        self._pool: ProcessPoolExecutor | None = None
        self._light: dict[int, tuple[BenchPlan, BenchPlan]] = {}
        self._closed = False

    def submit(
        self, spec: KernelSpec, plan: BenchPlan, shapes: Sequence[TimedShape], within: Path | None = None
    ) -> Future[Verdict | None]:
        """:func:`~.bench_extra.timed_verdict` of one timing, in a comparing process where there is one; no thread
        waits for it. The outputs are read only from beneath ``within``, the worker's folder."""
        shapes = list(shapes)
        if not _reads_files(shapes):  # everything judged on the GPU (child/gpu_compare.py): nothing heavy left to do
            return self._here(spec, plan, shapes, within)
        pool = self._get()
        if pool is None:
            return self._here(spec, plan, shapes, within)
        try:
            light = self._for_comparing(plan)
            judged = pool.submit(timed_verdict, spec, light, shapes, chunk=CACHED_CHUNK, within=within)
        except (BrokenProcessPool, RuntimeError):  # broken, or shut down by close() meanwhile
            self._drop(pool)
            return self._here(spec, plan, shapes, within)
        outcome: Future[Verdict | None] = Future()

        def done(f: Future[Verdict | None]) -> None:
            if f.cancelled() or isinstance(f.exception(), BrokenProcessPool):
                self._drop(pool)
                _copy(self._here(spec, plan, shapes, within), outcome)
            elif f.exception() is not None:
                outcome.set_exception(f.exception())
            else:
                outcome.set_result(f.result())

        judged.add_done_callback(done)
        return outcome

    def compare(self, spec: KernelSpec, plan: BenchPlan, shapes: Sequence[TimedShape]) -> Verdict | None:
        """:meth:`submit`, waited for."""
        return self.submit(spec, plan, shapes).result()

    def close(self) -> None:
        """Stop the comparing processes: judgings not started are canceled (and run on the caller's executor, if
        anything still waits for them), running ones end first, so no process or semaphore is left behind."""
        with self._lock:
            pool, self._pool, self._closed = self._pool, None, True
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def _here(
        self, spec: KernelSpec, plan: BenchPlan, shapes: list[TimedShape], within: Path | None
    ) -> Future[Verdict | None]:
        try:
            return self._submit(timed_verdict, spec, plan, shapes, within=within)
        except RuntimeError:  # the caller's executor is shut down too: a thread of its own
            return _in_a_thread(timed_verdict, spec, plan, shapes, within=within)

    def _drop(self, pool: ProcessPoolExecutor) -> None:
        """Forget a broken pool (the next call starts a fresh one)."""
        with self._lock:
            if self._pool is pool:
                self._pool = None
        pool.shutdown(wait=False, cancel_futures=True)

    def _get(self) -> ProcessPoolExecutor | None:
        with self._lock:
            if (
                self._pool is None
                and self.processes
                and not self._closed
                and not multiprocessing.current_process().daemon
            ):
                # spawned, not forked: the evaluator's process runs threads
                self._pool = ProcessPoolExecutor(self.processes, mp_context=multiprocessing.get_context("spawn"))
            return self._pool

    def _for_comparing(self, plan: BenchPlan) -> BenchPlan:
        with self._lock:
            held = self._light.get(id(plan))
            if held is None or held[0] is not plan:
                held = self._light[id(plan)] = (plan, plan.for_comparing())
            return held[1]


def _reads_files(shapes: Sequence[TimedShape]) -> bool:
    """Whether judging ``shapes`` reads any output from a file (not when the comparer process passed them all, nor
    when a call failed before it left any)."""
    for shape in shapes:
        for paths in [
            *(shape.get("outputs") or []),
            shape.get("tweak_outputs") or [],
            *(shape.get("extra_outputs") or []),
        ]:
            if any(path is not None for path in paths):
                return True
    return False


def _copy(source: Future[Verdict | None], target: Future[Verdict | None]) -> None:
    """``target`` gets ``source``'s outcome once it has one."""

    def copy(f: Future[Verdict | None]) -> None:
        if f.cancelled():  # the caller's executor shut down: whoever waits must not wait forever
            target.set_exception(CancelledError("the judging was canceled: the evaluator is closing"))
            return
        exc = f.exception()
        if exc is not None:
            target.set_exception(exc)
        else:
            target.set_result(f.result())

    source.add_done_callback(copy)
