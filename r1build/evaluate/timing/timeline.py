"""How much and when the evaluator did what: counters, and spans of named work per job, so a benchmark can show
which job waited for what.

The evaluator's counters say how long each kind of work took in all; they cannot say that the GPU thread waited
for the first job's sanitizer runs while the last job's were already done. A :class:`Timeline` keeps each piece of
work as a :class:`Span` (what, the job, start and end in seconds since the timeline began, the thread), cheaply
and thread-safely, up to a bound; :func:`milestones` turns them into a row per job: when its compiles, checks,
sanitizer runs and timing ended, and when the GPU thread reached it. A :class:`Meter` holds an evaluator's
counters (candidates, builds, seconds per phase) and its timeline together: a phase is counted and kept as a span in
one call.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from ...convert import asdict, record

__all__ = ["Meter", "Span", "Timeline", "milestones"]

T = TypeVar("T")

LIMIT = 100_000
"""Most spans one timeline keeps (later ones are counted, not kept)."""


@record(frozen=True)
class Span:
    """One piece of work."""

    what: str
    """The work's name (the evaluator's counter names: ``build_s``, ``checks_s``, ``timing_s`` ...)."""
    job: str
    """``kernel/arch`` of the job it was for ('' where it served no one job)."""
    start: float
    """Seconds since the timeline began."""
    end: float
    """Seconds since the timeline began."""
    thread: str
    """The thread that did it."""


class Timeline:
    """Spans of work, appended from any thread."""

    def __init__(self, limit: int = LIMIT) -> None:
        self.origin = time.perf_counter()
        """The ``perf_counter`` reading spans count from."""
        self.limit = limit
        """Most spans kept."""
        self.dropped = 0
        """Spans not kept for the limit."""
        self._spans: list[Span] = []
        self._lock = threading.Lock()

    def add(self, what: str, job: str, start: float, end: float | None = None) -> None:
        """Keep a span that began at ``perf_counter()`` reading ``start`` and ends at ``end`` (now when None)."""
        stop = time.perf_counter() if end is None else end
        span = Span(what, job, start - self.origin, stop - self.origin, threading.current_thread().name)
        with self._lock:
            if len(self._spans) < self.limit:
                self._spans.append(span)
            else:
                self.dropped += 1

    def spans(self) -> list[Span]:
        """The spans kept so far, in the order they ended."""
        with self._lock:
            return list(self._spans)

    def as_json(self) -> list[dict[str, Any]]:
        return [asdict(s) for s in self.spans()]


class Meter:
    """An evaluator's counters and its timeline, from any thread."""

    def __init__(self, counters: tuple[str, ...] = ("candidates", "built", "checked", "timed")) -> None:
        self.timeline = Timeline()
        """When each piece of work ran, per job."""
        self._stats: dict[str, float] = dict.fromkeys(counters, 0.0)
        self._lock = threading.Lock()

    def count(self, name: str, value: float) -> None:
        """Add ``value`` to counter ``name``."""
        with self._lock:
            self._stats[name] = self._stats.get(name, 0.0) + value

    def phase(self, name: str, start: float, job: str = "") -> None:
        """The seconds since ``perf_counter()`` reading ``start`` added to counter ``name`` and kept as a span of
        ``job``."""
        end = time.perf_counter()
        self.count(name, end - start)
        self.timeline.add(name, job, start, end)

    def timed(self, counter: str, job: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)``, its wall seconds a phase ``counter`` of ``job``."""
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.phase(counter, start, job)

    def counters(self) -> dict[str, float]:
        """A copy of the counters."""
        with self._lock:
            return dict(self._stats)


_MILESTONES = {
    "gate": ("gate_s",),
    "built": ("build_s",),
    "checked": ("checks_s",),
    "sanitized": ("sanitizer_run",),
    "gpu_reached": ("wait_ready_s",),
    "timed": ("timing_s",),
    "settled": ("settle_s",),
}
"""Per job, the span names whose last end is each milestone (``gpu_reached``: the end of the GPU thread's wait for a
ready job, when it took this one)."""


def milestones(spans: list[Span]) -> list[dict[str, Any]]:
    """A row per job in the order the GPU thread reached it: when the last span of each kind ended (the start of
    the GPU thread taking it for ``gpu_reached``), and the GPU thread's waits for it (``wait_*`` seconds)."""
    rows: dict[str, dict[str, Any]] = {}
    for span in spans:
        if not span.job:
            continue
        row = rows.setdefault(span.job, {"job": span.job})
        for name, whats in _MILESTONES.items():
            if span.what in whats:
                row[name] = max(row.get(name, span.end), span.end)
        if span.what.startswith("wait_") or span.what in ("check_phase_s", "timing_s"):
            row[span.what] = row.get(span.what, 0.0) + (span.end - span.start)
        if span.what == "sanitizer_run":
            row["sanitizer_runs"] = row.get("sanitizer_runs", 0) + 1
    return sorted(rows.values(), key=lambda r: (r.get("gpu_reached", float("inf")), r["job"]))
