"""The judge's desk of one live search: the queue of candidates waiting for the judge, the batches it judges, and
what the progress lines say of it (its queue, what it works on, how long it has been busy).

Candidates are queued as answers arrive and judged in batches (all that waited when the judge became free), while
other requests still stream; ``None`` on the queue says that nothing more comes. Where the judge measures after its
static gate (a GPU evaluator), the gate's finished stage of a batch moves its passed candidates on to the GPU in the
counts, and the seconds after it count as the GPU's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence

from ..events import Event, Stage, watch
from ..records import Candidate
from .pool import Pool

__all__ = ["JudgeDesk"]


class JudgeDesk:
    """The judge's queue and counts; ``changed`` is called whenever they change (the search's progress line)."""

    def __init__(self, pool: Pool, kernel: str, changed: Callable[[], None]) -> None:
        self.pool = pool
        self.kernel = kernel
        self.changed = changed
        self.queue: asyncio.Queue[Candidate | None] = asyncio.Queue()
        self.waiting = 0
        """Candidates queued for the judge (the gate, then the GPU where there is one), not yet handed to it."""
        self.judging = 0
        """Candidates the judge works on now."""
        self.busy_s = 0.0
        """Seconds the judge has worked so far (on a GPU machine: the gate and the GPU's checks and timing)."""
        self.at_gate = 0
        """Of the candidates the judge works on, those still at its static gate."""
        self.for_gpu = 0
        """Of the candidates the judge works on, those past the gate, waiting for the GPU or on it (a judge that
        measures: the gate's finished stage says how many passed)."""
        self.gpu_busy_s = 0.0
        """Seconds the judge has worked past the gate of its batches (the GPU's checks and timing)."""
        self._past_gate: float | None = None
        self.first_queued: float | None = None
        """When the first generated candidate was queued (``time.monotonic``): the judge's busy share runs
        from there."""

    def put(self, candidate: Candidate) -> None:
        """Queue ``candidate`` for the judge."""
        if self.first_queued is None:
            self.first_queued = time.monotonic()
        self.waiting += 1
        self.queue.put_nowait(candidate)

    def close(self) -> None:
        """Nothing more comes (the judge loop ends after the batches queued)."""
        self.queue.put_nowait(None)

    def fields(self) -> dict[str, int | str]:
        """What the progress line says of the judge."""
        return {
            "waiting": self.waiting,
            "judging": self.judging,
            "at_gate": self.at_gate,
            "for_gpu": self.for_gpu,
            "judge_busy": self.busy_text(),
            "gpu_busy": f"{self.gpu_busy_s:.1f}s",
        }

    def busy_text(self) -> str:
        """The judge's busy time, and its share of the time since the first candidate was queued."""
        if self.first_queued is None:
            return f"{self.busy_s:.1f}s"
        span = time.monotonic() - self.first_queued
        return f"{self.busy_s:.1f}s/{span:.1f}s"

    async def loop(self, after: Callable[[Sequence[Candidate]], Awaitable[None]] | None = None) -> None:
        """Judge queued candidates in batches until ``None`` arrives (a round's end, or the end of a continuous
        search); ``after`` is called after each batch judged."""
        done = False
        while not done:
            batch = [await self.queue.get()]
            while not self.queue.empty():
                batch.append(self.queue.get_nowait())
            done = None in batch
            candidates = [c for c in batch if c is not None]
            if candidates:
                await self._judge(candidates)
                if after is not None:
                    await after(candidates)
            self.changed()

    async def _judge(self, candidates: list[Candidate]) -> None:
        self.waiting -= len(candidates)
        self.judging = self.at_gate = len(candidates)
        self.changed()
        started = time.monotonic()
        try:
            with watch(self._gate_watch()):
                await self.pool.judge(candidates)
        finally:
            now = time.monotonic()
            self.busy_s += now - started
            self.gpu_busy_s += now - self._past_gate if self._past_gate is not None else 0.0
            self.judging = self.at_gate = self.for_gpu = 0
            self._past_gate = None

    def _gate_watch(self) -> Callable[[Event], None]:
        """What sees the judge's events while it works on a batch: where the judge measures after its gate (not
        the static gate alone), the gate's finished stage moves the batch's passed candidates on to the GPU."""
        from ..gate.static import StaticGate

        loop = asyncio.get_running_loop()
        measures = not isinstance(self.pool.evaluator, StaticGate)

        def seen(event: Event) -> None:
            if (
                measures
                and isinstance(event, Stage)
                and event.stage == "gate"
                and event.done
                and event.kernel == self.kernel
                and event.passed is not None
            ):
                loop.call_soon_threadsafe(self._passed_gate, event.passed)

        return seen

    def _passed_gate(self, passed: int) -> None:
        """The batch the judge works on passed its gate: ``passed`` candidates go on to the GPU."""
        if not self.judging:
            return
        self.at_gate, self.for_gpu = 0, min(passed, self.judging)
        self._past_gate = time.monotonic()
        self.changed()
