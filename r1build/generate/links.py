"""The links of one live search's transcripts under its decision key: how ``r1build replay`` and a resumed search
find what a search received, however it ended.

A search links its transcripts once when it ends (its stop reason and cause, for good). Where it runs as a
resolve's search of its own, it also links them as they are stored, as those of a search cut short
(``interrupted``), at most one write every :data:`LINK_EVERY_S` (hundreds of samples in flight would otherwise
rewrite a growing list once each): a process killed mid-search (SIGTERM, SIGKILL) leaves them to resume from.
"""

from __future__ import annotations

import asyncio
import time

from ..cache import Cache
from .budget import StopReason
from .transcripts import link_transcripts

__all__ = ["LINK_EVERY_S", "TranscriptLinks"]

LINK_EVERY_S = 1.0
"""Seconds between two links of the transcripts of a search still running (what a killed process leaves)."""


class TranscriptLinks:
    """The transcripts a search stored or took back, by (round, sample), and their link under ``key``."""

    def __init__(self, cache: Cache, key: str, *, kernel: str, arch: str) -> None:
        self.cache = cache
        self.key = key
        """The search's decision key."""
        self.kernel = kernel
        self.arch = arch
        self.stored: list[tuple[tuple[int, int], str]] = []
        """(round, sample) and digest of every transcript the search knows."""
        self.as_we_go = False
        """Whether the transcripts are linked as they are stored (within :data:`LINK_EVERY_S`), not only when the
        search ends."""
        self.linked_at = float("-inf")
        """When the transcripts were last linked as those of a search cut short (``time.monotonic``)."""
        self.due: asyncio.TimerHandle | None = None
        """The link that is due, when one is."""
        self.ended = False
        """Whether the search linked how it ended."""

    def add(self, where: tuple[int, int], digest: str, *, stored_now: bool) -> None:
        """Count the transcript ``digest`` of sample ``where``; one ``stored_now`` (not taken back from a search
        cut short) is linked soon where the links are kept as the search goes."""
        self.stored.append((where, digest))
        if stored_now and self.as_we_go:
            self.link_soon()

    def digests(self) -> list[str]:
        """The digests, in (round, sample) order."""
        self.stored.sort()
        return [digest for _, digest in self.stored]

    def link_soon(self) -> None:
        """Link the transcripts stored so far as those of a search cut short, now or, where the last such link is
        less than :data:`LINK_EVERY_S` old, that much later."""
        if self.due is not None:
            return
        wait = self.linked_at + LINK_EVERY_S - time.monotonic()
        if wait <= 0:
            self.link_cut_short()
        else:
            self.due = asyncio.get_running_loop().call_later(wait, self.link_cut_short)

    def link_cut_short(self) -> None:
        self.due = None
        if self.ended:  # the search linked how it ended: that stays
            return
        self.linked_at = time.monotonic()
        self.link("interrupted", "the process ended before the search did")

    def end(self, reason: StopReason, cause: str) -> None:
        """Link the transcripts as the search ended, for good (a link of the search cut short that is still due
        is not written)."""
        self.ended = True
        if self.due is not None:
            self.due.cancel()
            self.due = None
        self.link(reason, cause)

    def link(self, reason: StopReason, cause: str) -> None:
        """Link the transcripts stored so far under the decision key (``r1build replay`` finds them there)."""
        link_transcripts(
            self.cache,
            self.key,
            kernel=self.kernel,
            arch=self.arch,
            transcripts=self.digests(),
            stop_reason=reason,
            cause=cause,
        )
