"""Processes that judge what the timed calls left at the benchmark shapes.

The outputs of one timing are hundreds of MB (three input sets of a 64M-element transpose: 768 MB), compared with
the reference element by element in float64. Threads of the evaluator's process doing that share its interpreter
lock with everything else the process does (the GPU thread, the check workers' judging, the sanitizer runs'
readers), so the comparisons run in processes of their own, which read the outputs and the reference's outputs
through memory maps and go through them in cache-sized chunks (:data:`~.compare.CACHED_CHUNK`). The plan travels
without its arrays (:meth:`~.bench_checks.BenchPlan.for_judging`).

A pool that breaks (a judging process killed, say for memory) is replaced at the next call; the call that found
it broken is judged in this process instead, so a verdict never depends on the pool.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from ..manifest.model import KernelSpec
from .bench_checks import BenchPlan, judge_bench
from .checks import Verdict
from .child.messages import TimedShape
from .compare import CACHED_CHUNK

__all__ = ["JudgePool", "default_processes"]


def default_processes() -> int:
    """Half the cores, at most 8: judging shares the machine with compiles and compute-sanitizer runs."""
    return max(1, min(8, (os.cpu_count() or 2) // 2))


class JudgePool:
    """Judges benchmark-shape outputs in ``processes`` processes started on first use (0: in the caller's
    thread)."""

    def __init__(self, processes: int | None = None) -> None:
        self.processes = default_processes() if processes is None else max(0, processes)
        """How many judging processes run at most."""
        self._lock = threading.Lock()
        self._pool: ProcessPoolExecutor | None = None
        self._light: dict[int, tuple[BenchPlan, BenchPlan]] = {}
        self._closed = False

    def judge(self, spec: KernelSpec, plan: BenchPlan, shapes: Sequence[TimedShape]) -> Verdict | None:
        """:func:`~.bench_checks.judge_bench` of one timing, in a judging process where there is one."""
        pool = self._get()
        if pool is not None:
            try:
                return pool.submit(
                    judge_bench, spec, self._for_judging(plan), list(shapes), chunk=CACHED_CHUNK
                ).result()
            except BrokenProcessPool:
                with self._lock:
                    if self._pool is pool:
                        self._pool = None
                pool.shutdown(wait=False, cancel_futures=True)
        return judge_bench(spec, plan, shapes)

    def close(self) -> None:
        """Stop the judging processes (judgings after this run in the caller's thread)."""
        with self._lock:
            pool, self._pool, self._closed = self._pool, None, True
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def _get(self) -> ProcessPoolExecutor | None:
        with self._lock:
            if self._pool is None and self.processes and not self._closed:
                # spawned, not forked: the evaluator's process runs threads
                self._pool = ProcessPoolExecutor(self.processes, mp_context=multiprocessing.get_context("spawn"))
            return self._pool

    def _for_judging(self, plan: BenchPlan) -> BenchPlan:
        with self._lock:
            held = self._light.get(id(plan))
            if held is None or held[0] is not plan:
                held = self._light[id(plan)] = (plan, plan.for_judging())
            return held[1]
