"""The process's compile slots: never more holders than slots, and a freed slot goes to the lowest rank waiting,
first come first served among equals, unranked work last."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from r1build.cache import Cache
from r1build.gate import StaticGate
from r1build.gate.compile_slots import PrioritySlots
from r1build.manifest import Manifest, load_manifest
from tests.gate.gate_support import ROOT
from tests.gate.test_gate import silu_candidate


def _waiters(slots: PrioritySlots, ranks: list[int | None]) -> tuple[list[int | None], list[threading.Thread]]:
    """A thread per rank that waits for a slot (started in this order, a moment apart) and records its rank when
    it gets one."""
    got: list[int | None] = []
    threads = []
    for rank in ranks:

        def take(rank: int | None = rank) -> None:
            with slots.take(rank):
                got.append(rank)
                time.sleep(0.01)

        t = threading.Thread(target=take)
        t.start()
        threads.append(t)
        time.sleep(0.05)  # arrival order is their order here
    return got, threads


def test_a_freed_slot_goes_to_the_lowest_rank_then_the_earliest() -> None:
    slots = PrioritySlots(1)
    with slots.take(None):  # all slots held: everyone below waits
        got, threads = _waiters(slots, [5, None, 2, 7, 2, 1, None])
        assert got == []
    for t in threads:
        t.join(5)
    assert got == [1, 2, 2, 5, 7, None, None]


def test_a_slot_taken_now_only_when_free_and_nobody_waits_for_it() -> None:
    slots = PrioritySlots(2)
    first = slots.take_now()
    assert first is not None
    with first:
        with slots.take(None):
            assert slots.take_now() is None  # both held
        got, threads = _waiters(slots, [None])  # one free slot: the waiter has it at once
        for t in threads:
            t.join(5)
        assert got == [None]
        second = slots.take_now()
        assert second is not None
        with second:
            got, threads = _waiters(slots, [3])  # both held: 3 waits
            assert got == [] and slots.take_now() is None
    for t in threads:  # the slots given back (by the with blocks): the waiter is served, none is lost
        t.join(5)
    assert got == [3]
    with slots.take(None), slots.take(None):
        pass


def test_never_more_holders_than_slots_and_all_are_served() -> None:
    slots = PrioritySlots(3)
    lock = threading.Lock()
    running = peak = 0

    def work(rank: int | None) -> None:
        nonlocal running, peak
        with slots.take(rank):
            with lock:
                running += 1
                peak = max(peak, running)
            time.sleep(0.005)
            with lock:
                running -= 1

    threads = [threading.Thread(target=work, args=(r % 4 if r % 5 else None,)) for r in range(60)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads)
    assert peak == 3


@pytest.fixture
def one_slot(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int | None]]:
    """The process's compile slots replaced by one slot that records the rank of each compile it lets run."""
    from r1build.gate import compile_slots

    order: list[int | None] = []

    class Recording(PrioritySlots):
        @contextlib.contextmanager
        def take(self, rank: int | None) -> Iterator[None]:
            with super().take(rank):
                order.append(rank)
                yield

    monkeypatch.setattr(compile_slots, "_SLOTS", Recording(1))
    yield order


@pytest.mark.slow  # five nvcc compiles and links one after another
@pytest.mark.heavy  # 9-10 s
def test_the_gate_compiles_the_lowest_ranked_work_first(tmp_path: Path, one_slot: list[int | None]) -> None:
    """Three pieces of work ask the gate for compiles at once, one compile slot between them: a job ranked 1 that
    started first, an unranked one, then a job ranked 0. Once they all wait, the rank-0 job's compiles go first,
    then the rest of rank 1, then the unranked (the GPU evaluator ranks its jobs in the order its GPU takes them); a
    link takes a slot as a compile does."""
    from r1build.gate.compile_slots import ranked

    manifest: Manifest = load_manifest(ROOT / "kernels.toml")
    spec = manifest.kernel("silu_mul")
    results: list[str] = []
    with Cache(tmp_path / "cache") as cache:
        gate = StaticGate(cache, jobs=2)

        def ask(rank: int | None, tag: int, count: int) -> None:
            pairs = [("sm_90", silu_candidate(f"    n += {tag * 10 + i};")) for i in range(count)]
            with ranked(rank) if rank is not None else contextlib.nullcontext():
                results.extend(r.status for r in gate.judge(manifest, spec, pairs))

        later = threading.Thread(target=ask, args=(1, 1, 2))
        later.start()
        while not one_slot:  # its first compile is running
            time.sleep(0.01)
        unranked = threading.Thread(target=ask, args=(None, 2, 1))
        unranked.start()
        time.sleep(0.1)
        first = threading.Thread(target=ask, args=(0, 3, 2))
        first.start()
        for t in (later, unranked, first):
            t.join(120)
    assert results == ["passed"] * 5
    # each compile and then its link (the gate links what it compiles): the rank-0 job's four before the unranked
    # work, rank 1's second compile before it too. A link asks for its slot only after its object is checked, and a
    # slot free at that moment goes to whoever waits: a rank-1 link may come after the unranked compile
    assert one_slot[0] == 1 and one_slot.count(0) == 4, one_slot
    assert one_slot.count(1) == 4 and one_slot.count(None) == 2, one_slot
    zeros = [i for i, rank in enumerate(one_slot) if rank == 0]
    assert zeros[-1] < one_slot.index(None), one_slot
    ones = [i for i, rank in enumerate(one_slot) if rank == 1]
    assert ones[1] < one_slot.index(None), one_slot  # rank 1 waited longer than the unranked work: it goes first


def test_a_waiter_that_leaves_while_waiting_does_not_block_the_rest() -> None:
    """A wait for a slot ended by an exception (here a signal's, as Ctrl-C's KeyboardInterrupt would) takes its
    place in line with it: a freed slot then goes to the next waiter instead of waiting for the one that left."""
    import os
    import signal

    class Interrupted(Exception):
        pass

    def interrupt(signum: int, frame: object) -> None:
        raise Interrupted

    slots = PrioritySlots(1)
    previous = signal.signal(signal.SIGUSR1, interrupt)
    try:
        with slots.take(None):

            def send() -> None:  # once the main thread waits
                _wait_until(lambda: len(slots._waiting) == 1)
                os.kill(os.getpid(), signal.SIGUSR1)

            sender = threading.Thread(target=send)
            sender.start()
            with pytest.raises(Interrupted), slots.take(0):  # the main thread waits, ranked first, and is interrupted
                pass
            sender.join(5)
            got, threads = _waiters(slots, [3])
        for t in threads:
            t.join(5)
        assert got == [3]
        assert not any(t.is_alive() for t in threads)
    finally:
        signal.signal(signal.SIGUSR1, previous)


def _wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 5
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
