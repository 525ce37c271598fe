"""The continuous search (``generation.search = "continuous"``, the default): no round is a barrier.

``generation.max-concurrency`` request slots (at most a round's ``samples``) each loop: take the next sample,
plan it from what is judged at that moment (:meth:`~.planning.Planner.plan_one`: a fresh task until a generated
candidate was judged, then a refinement from the best lineage so far, with feedback from that lineage's own judged
candidates), send it, and take the next the moment its answer is in. Each answer is extracted and queued for the
judge as soon as it completes, and a streamed answer's code as soon as its block closes
(:attr:`~.exchange.Meter.on_code`), so the judge works while other answers are still being written and an answer
cut off later still yields its finished code. The judge checks the stop rules after every batch: the target
share of the floor, a generated candidate that passed where nothing can be timed, and ``patience`` (counted in
answers: ``patience`` x ``samples`` answers judged without a faster kernel). A stop cancels the requests not yet
sent; where the provider's profile frees a request when its connection closes (vLLM, SGLang), a stop by one of
those rules also cancels the requests in flight, which can no longer matter. Answers already paid for are kept
and judged.

The n-th request of the search is still addressed as round ``n // samples``, sample ``n % samples`` (the
transcripts, replay and resume keep their words); a round is bookkeeping only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..records import Candidate
from .budget import StopReason
from .exchange import Meter
from .extract import complete_part, extract_source
from .planning import Plan

if TYPE_CHECKING:
    from .controller import _Search

__all__ = ["IRRELEVANT_AFTER", "MIN_GAIN", "Continuous"]

IRRELEVANT_AFTER: frozenset[StopReason] = frozenset({"target", "passed_gate", "patience"})
"""Stops after which the answers still being written can no longer matter (the budgets' stops leave them be)."""

MIN_GAIN = 0.02
"""Smallest relative speed-up of the best kernel that counts as an improvement for ``patience``."""


class Continuous:
    """One continuous search around a live :class:`~.controller._Search`."""

    def __init__(self, search: _Search, done: dict[int, set[int]]) -> None:
        self.search = search
        budget = search.budget
        self.per_round = budget.samples
        self.total = budget.rounds * budget.samples
        self.skip = {r * budget.samples + s for r, samples in done.items() for s in samples}
        """Samples a search cut short already received (not asked again)."""
        self.next = 0
        self.highest = max(self.skip, default=-1)
        """The latest sample started (its round is the last the outcome counts)."""
        self.width = min(search.generation.max_concurrency, budget.samples)
        """Request slots: ``max-concurrency``, and no more than a round's parallel ``samples``."""
        self.slots = asyncio.Semaphore(self.width)
        self.current: dict[asyncio.Task[None], tuple[Meter, tuple[int, int]]] = {}
        """The meter and the (round, sample) of each slot's sample in progress."""
        self.best = search.pool.best_time()
        self.improved_at = 0
        """How many answers were judged when the best time last improved (or the search began)."""

    def take(self) -> int | None:
        """The next sample to ask, or None when the rounds' samples are all asked."""
        while self.next in self.skip:
            self.next += 1
        if self.next >= self.total:
            return None
        index, self.next = self.next, self.next + 1
        self.highest = max(self.highest, index)
        return index

    async def slot(self) -> None:
        """One request slot: samples one after another until the search stops or runs out of samples."""
        search = self.search
        task = asyncio.current_task()
        assert task is not None
        while search.stop_reason is None:
            reason = search.exhausted()
            if reason == "candidates":
                return
            if reason is not None:
                search.stop(reason)
                return
            index = self.take()
            if index is None:
                return
            round_no, sample = divmod(index, self.per_round)
            search.round = max(search.round, round_no)
            plan = search.planner.plan_one(index, search.pool, search.round_notes)
            meter = Meter()
            meter.on_code = lambda text, r=round_no, s=sample, p=plan: self.early(r, s, p, text)
            self.current[task] = (meter, (round_no, sample))
            try:
                await search.sample(round_no, sample, plan, self.slots, meter)
            finally:
                del self.current[task]
            if search.fatal is not None:
                return

    def early(self, round_no: int, sample: int, plan: Plan, content: str) -> None:
        """Gate the code of an answer still streaming once a block that defines the kernel has closed."""
        search = self.search
        if (round_no, sample) in search.early:
            return
        kept = complete_part(content, search.spec.name)
        source = extract_source(kept, search.spec.name).source if kept is not None else None
        if kept is None or source is None:
            return
        search.early[(round_no, sample)] = source
        search.admit(round_no, sample, plan, source, kept, transcript="")
        search.progress()

    def cancel(self, reason: StopReason) -> int:
        """On a stop: cancel the samples not on the wire (waiting for the first answer, a pause or the budget) and,
        where the profile frees a closed request and the stop leaves them nothing to matter for, those in flight.
        An answer whose code was already gated is let finish (it is that candidate's transcript). Returns how many
        in flight it cancelled."""
        in_flight_too = reason in IRRELEVANT_AFTER and self.search.endpoint.profile.frees_on_disconnect
        current = asyncio.current_task()
        cut = 0
        for task, (meter, where) in self.current.items():
            if task is current or task.done():
                continue
            if not meter.on_the_wire:
                task.cancel()
            elif in_flight_too and where not in self.search.early:
                task.cancel()
                cut += 1
        return cut

    async def judged(self, batch: Sequence[Candidate]) -> None:
        """After a batch is judged: its finalists profiled, then the stop rules that judging decides."""
        search, pool = self.search, self.search.pool
        await search.profile_finalists([pool.known[c.digest] for c in batch if c.digest in pool.known])
        if search.stop_reason is not None:
            return
        if pool.target_reached(search.budget.target_share):
            search.stop("target")
        elif not pool.timed():
            if pool.generated_passed:  # nothing can be timed (no GPU): a pass is all the search can learn
                search.stop("passed_gate")
        else:
            answers = len({(k.candidate.origin.round, k.candidate.origin.sample) for k in pool.generated_known()})
            best = pool.best_time()
            if best is not None and (self.best is None or best < self.best * (1.0 - MIN_GAIN)):
                self.best, self.improved_at = best, answers
            elif answers - self.improved_at >= search.budget.patience * self.per_round:
                search.stop("patience")

    async def run(self) -> int:
        """The search; returns the rounds it reached (bookkeeping)."""
        search = self.search
        search.on_stop = self.cancel
        if search.pool.target_reached(search.budget.target_share):  # the seeds (or answers resumed) suffice
            search.stop("target")
            return self.highest // self.per_round + 1 if self.highest >= 0 else 0
        judging = asyncio.create_task(search.desk.loop(self.judged))
        slots = [asyncio.create_task(self.slot()) for _ in range(self.width)]
        search.tasks.update(slots)

        def judge_failed(task: asyncio.Task[None]) -> None:
            if not task.cancelled() and task.exception() is not None:
                for slot in slots:
                    slot.cancel()

        judging.add_done_callback(judge_failed)
        await search.await_all(slots, judging)
        if search.stop_reason is None:
            if search.pool.target_reached(search.budget.target_share):
                search.stop("target")
            else:
                all_asked = self.take() is None
                search.stop("rounds" if all_asked else "candidates")
        return self.highest // self.per_round + 1 if self.highest >= 0 else 0
