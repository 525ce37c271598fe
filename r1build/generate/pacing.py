"""The pause and the circuit breaker that every sample of a search shares (:class:`Pacer`), what a server asks
to wait (``retry-after``), and failed requests in words."""

from __future__ import annotations

import asyncio
import email.utils
import math
import random
import re
import time
from collections import Counter
from http import HTTPStatus
from typing import Any

from ..convert import field, record
from .budget import StopReason

MAX_BACKOFF_S = 60.0
"""Longest pause between two attempts when the server does not ask for longer."""


def status_label(status: int, reason: str | None = None) -> str:
    """``HTTP 503 Service Unavailable``."""
    if not reason:
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = ""
    return f"HTTP {status} {reason}".rstrip()


@record
class Pacer:
    """The pause and the circuit breaker shared by every sample of a search.

    A failed attempt sets a pause before which no request of any sample leaves: what the server asked for
    (``retry-after``), else an exponential backoff. The backoff grows with each failure that happens after the
    last pause began (failures of requests that were already in flight do not compound it) and starts again from
    ``backoff_s`` once an answer arrives. A pause that would end after ``deadline`` stops the search
    (``wall_time``); ``breaker`` failed attempts in a row with no answer in between stop it too
    (``endpoint_failing``). Stopped, no attempt is sent any more; requests already in flight finish.
    """

    backoff_s: float
    """The first backoff."""
    breaker: int
    """Failed attempts in a row that stop the search."""
    deadline: float
    """The search's deadline (``time.monotonic``)."""
    rng: random.Random = field(default_factory=random.Random)
    resume_at: float = 0.0
    """No request leaves before this (``time.monotonic``)."""
    streak: int = 0
    """Failed attempts in a row, all samples together, with no answer in between."""
    streak_faults: Counter[str] = field(default_factory=Counter)
    """The streak's faults by label."""
    level: int = 0
    """How many times the backoff doubled."""
    level_since: float = 0.0
    """When the backoff last grew."""
    stopped: StopReason | None = None
    """Why no request may leave any more."""
    cause: str = ""
    """The stop in words."""

    def answered(self) -> None:
        """An answer arrived: the streak and the backoff start again."""
        self.streak = 0
        self.streak_faults.clear()
        self.level = 0

    def failed(self, label: str, started: float, retry_after: float | None) -> float:
        """Record a failed attempt that started at ``started``; returns the pause from now before the next
        request (the search may be stopped by it: see :attr:`stopped`)."""
        now = time.monotonic()
        self.streak += 1
        self.streak_faults[label] += 1
        if retry_after is not None:
            wait = retry_after
        else:
            if started >= self.level_since or self.level == 0:
                self.level += 1
                self.level_since = now
            base = self.backoff_s * 2.0 ** (self.level - 1)
            wait = min(MAX_BACKOFF_S, base * self.rng.uniform(0.75, 1.25))
        self.resume_at = max(self.resume_at, now + wait)
        if self.stopped is None:
            if self.streak >= self.breaker:
                self.stop(
                    "endpoint_failing",
                    f"the endpoint failed {self.streak} requests in a row with no answer: {self.describe_streak()}",
                )
            elif self.resume_at > self.deadline and now < self.deadline:
                # (with the deadline already past, the wall time stopped the search, not this pause)
                left = self.deadline - now
                asked = (
                    f"the server asked to wait {_seconds(retry_after)} (retry-after)"
                    if retry_after is not None
                    else f"r1build backs off {wait:.1f} s after {_after(label)}"
                )
                self.stop("wall_time", f"{asked}, longer than the {left:.1f} s left of the wall-time budget")
        return max(0.0, self.resume_at - now)

    def stop(self, reason: StopReason, cause: str) -> None:
        """No request may leave any more."""
        if self.stopped is None:
            self.stopped, self.cause = reason, cause

    def describe_streak(self) -> str:
        """The streak's faults in words: ``20 requests, all HTTP 503 Service Unavailable``."""
        return describe_faults(self.streak_faults)

    async def turn(self) -> bool:
        """Wait for the shared pause to end; False when the search stopped meanwhile (send nothing)."""
        while self.stopped is None:
            wait = self.resume_at - time.monotonic()
            if wait <= 0:
                return True
            await asyncio.sleep(wait)
        return False


def _after(label: str) -> str:
    """A failed attempt's label after "backs off N s after": ``a request that timed out after 5 s``, ``HTTP 503
    Service Unavailable``."""
    return f"a request that {label}" if label.startswith(("timed out", "connection failed")) else label


def _seconds(value: float) -> str:
    """A wait in words: ``300 s``, ``1,000,000,000 s``."""
    return f"{value:g} s" if value < 1e5 else f"{value:,.0f} s"


def describe_faults(faults: Counter[str]) -> str:
    """Failed requests by fault in words."""
    total = sum(faults.values())
    if not faults:
        return "no request failed"
    if len(faults) == 1:
        ((label, _),) = faults.items()
        if label == "a cut stream":
            return f"every stream was cut ({total} requests)"
        if label.startswith("timed out"):
            return f"{total} requests, all {label}"
        return f"{total} requests, all {label}"
    parts = ", ".join(f"{n} {label}" for label, n in faults.most_common())
    return f"{total} requests: {parts}"


_WAIT = re.compile(r"\s*[0-9]+(?:\.[0-9]+)?\s*")
"""A wait in seconds (or milliseconds) as a ``retry-after`` header writes it."""


def parse_retry_after(headers: Any) -> float | None:
    """Seconds a response asks to wait (``retry-after-ms``, ``retry-after`` as seconds or HTTP date)."""
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        # digits (and a fraction), as the header is written: Python's float() also takes "1_0", "1e3", "inf" and
        # "-5", which no server means as a wait (the backoff decides then)
        if _WAIT.fullmatch(str(value)):
            seconds = float(value) / scale
            return seconds if math.isfinite(seconds) else None
        if name == "retry-after":
            try:
                when = email.utils.parsedate_to_datetime(value)
            except (TypeError, ValueError, OverflowError, IndexError):
                return None
            return max(0.0, when.timestamp() - time.time())
    return None
