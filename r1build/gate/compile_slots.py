"""The process's compile slots: at most one nvcc per core, handed out by rank.

Every nvcc the process runs takes a slot (:func:`compile_slot`): the gate's threads, the resolver's per-kernel
threads and the GPU evaluator's library builds share them, so a cold resolve of many kernels never runs more
compilers than cores. Where several pieces of work wait for slots at once, a freed slot goes to the waiting
compile of the lowest rank (:func:`ranked`), first come first served among equal ranks, and work without a rank
comes after all ranked work. The rank is carried by the context, so the threads a piece of work starts with a
copy of its context inherit it. The GPU evaluator ranks its jobs in the order it starts them (the one with the most
candidates first): the first job's compiles end first and its checks, sanitizer runs and timing begin while the
later jobs compile, instead of every job becoming ready at the end together.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import threading
from collections.abc import Iterator
from contextvars import ContextVar

__all__ = ["COMPILE_SLOTS", "PrioritySlots", "compile_slot", "cores", "ranked"]

_RANK: ContextVar[int | None] = ContextVar("r1build_compile_rank", default=None)


def cores() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


@contextlib.contextmanager
def ranked(rank: int) -> Iterator[None]:
    """Compiles started in this context (and in threads started with a copy of it) wait with ``rank``."""
    token = _RANK.set(rank)
    try:
        yield
    finally:
        _RANK.reset(token)


class PrioritySlots:
    """``n`` slots; a freed one goes to the waiter of the lowest rank (None: after every rank), first come first
    served among equals."""

    def __init__(self, n: int) -> None:
        self.n = max(1, n)
        """How many holders at once."""
        self._cond = threading.Condition()
        self._free = self.n
        self._waiting: list[tuple[int, int, int]] = []
        self._arrivals = itertools.count()

    @contextlib.contextmanager
    def take(self, rank: int | None) -> Iterator[None]:
        """Hold a slot (waiting for one, in rank order) for the ``with`` block."""
        entry = (0 if rank is not None else 1, rank if rank is not None else 0, next(self._arrivals))
        with self._cond:
            heapq.heappush(self._waiting, entry)
            try:
                self._cond.wait_for(lambda: self._free > 0 and self._waiting[0] == entry)
            except BaseException:  # left while waiting (KeyboardInterrupt): its place in line goes with it
                self._waiting.remove(entry)
                heapq.heapify(self._waiting)
                self._cond.notify_all()  # it may have been first in line, holding up a free slot
                raise
            heapq.heappop(self._waiting)
            self._free -= 1
            self._cond.notify_all()  # the next in line may take another free slot
        try:
            yield
        finally:
            self._give_back()

    def take_now(self) -> contextlib.AbstractContextManager[None] | None:
        """A slot for the ``with`` block when one is free and nobody waits for it; None otherwise (nothing
        taken): for work worth starting only on a place that would stay idle."""
        with self._cond:
            if self._free <= 0 or self._waiting:
                return None
            self._free -= 1
        return self._held()

    @contextlib.contextmanager
    def _held(self) -> Iterator[None]:
        try:
            yield
        finally:
            self._give_back()

    def _give_back(self) -> None:
        with self._cond:
            self._free += 1
            self._cond.notify_all()


COMPILE_SLOTS = cores()
"""Most nvcc processes this process runs at once (the cores it may run on)."""
_SLOTS = PrioritySlots(COMPILE_SLOTS)


def compile_slot() -> contextlib.AbstractContextManager[None]:
    """One of the process's compile slots, taken at the rank of the current context."""
    return _SLOTS.take(_RANK.get())
