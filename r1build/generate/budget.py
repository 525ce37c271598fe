"""Budgets of a search: why it stops (one vocabulary for the whole stage and the CLI) and the token and money
ledger.

Tokens and money are counted from the usage the server reports for each request, or, where it reports none,
from the length of the text received (about four characters a token); never from how many chunks a stream had.
Before a request is sent, its ``max_tokens`` (and the price of its prompt and of that many completion tokens) is
reserved from what remains of the budget, and the request asks for no more than what could be reserved; when the
request ends, the reservation is replaced by what it really cost. So requests in flight can always finish (their
answers are paid for and kept), and a budget is exceeded by at most what one request's prompt estimate was off.
A request that cannot reserve enough for a whole answer waits for those in flight to settle (they may give
back what they did not use), and when none are left the budget is spent. Enough is the median length of the
complete answers so far, a quarter of ``max-tokens`` before there is one (at least :data:`MIN_REQUEST_TOKENS`, at
most ``max-tokens``): a request too small for a typical answer would be cut off at ``max_tokens``, paid for and
useless. Where a server reports no usage, an
attempt's estimate never exceeds its ``max_tokens`` (the server cannot have sent more).
"""

from __future__ import annotations

import asyncio
import statistics
from typing import Literal, get_args

from ..convert import field, record
from ..manifest.model import Budget, Prices

__all__ = ["MIN_REQUEST_TOKENS", "STOP_REASONS", "Ledger", "Reservation", "StopReason", "estimate_tokens"]

StopReason = Literal[
    "rounds",  # every round of the budget ran
    "candidates",  # the candidate budget (samples started) is spent
    "tokens",  # the token budget is spent
    "money",  # the money budget is spent
    "wall_time",  # the wall-clock budget is spent, or a pause the server asked for would outlast it
    "target",  # the best kernel reached the target share of the floor
    "patience",  # rounds in which candidates were timed brought no faster kernel
    "passed_gate",  # without timings, a generated candidate passed the gate: nothing can rank more
    "endpoint_failing",  # the circuit breaker: too many requests in a row failed with no answer
    "fatal",  # the provider refused in a way that ends the run (401, 402, ...)
    "interrupted",  # Ctrl-C
    "replay",  # a replay of stored transcripts (no search)
]
"""Why a search ended."""

STOP_REASONS: tuple[str, ...] = get_args(StopReason)

MIN_REQUEST_TOKENS = 256
"""A request is not sent with a smaller ``max_tokens`` than this (no R1 answer fits): the budget is spent."""

CHARS_PER_TOKEN = 4
"""Characters of text per token, to estimate usage a server did not report."""


def estimate_tokens(text_chars: int) -> int:
    """Tokens of ``text_chars`` characters of text, when a server reports none."""
    return text_chars // CHARS_PER_TOKEN


@record(eq=False)
class Reservation:
    """What one request holds of the budget while it runs."""

    max_tokens: int
    """The request's ``max_tokens``."""
    prompt_tokens: int
    """Estimated prompt tokens."""
    usd: float
    """Money held: the prompt estimate and ``max_tokens`` at the configured prices."""


@record(kw_only=True)
class Ledger:
    """Tokens and money spent and held by requests in flight, against a kernel's budget."""

    budget: Budget
    """The kernel's budget (``tokens``, ``money_usd``)."""
    prices: Prices
    """Prices per million tokens."""
    max_tokens: int
    """``max_tokens`` of a request when the budget does not cap it."""
    prompt_tokens: int = 0
    """Prompt tokens spent."""
    completion_tokens: int = 0
    """Completion tokens spent (reasoning included)."""
    usd: float = 0.0
    """Money spent."""
    held: set[Reservation] = field(default_factory=set)
    """Reservations of requests in flight."""
    answer_tokens: list[int] = field(default_factory=list)
    """Completion tokens of each complete answer so far."""
    _settled: asyncio.Event | None = None

    def observe(self, completion_tokens: int) -> None:
        """A complete answer (not cut off) of this many completion tokens arrived."""
        self.answer_tokens.append(completion_tokens)

    @property
    def least_request(self) -> int:
        """The smallest ``max_tokens`` worth sending: what a typical complete answer took so far."""
        typical = int(statistics.median(self.answer_tokens)) if self.answer_tokens else self.max_tokens // 4
        return max(MIN_REQUEST_TOKENS, min(typical, self.max_tokens))

    def describe_unaffordable(self) -> str:
        """Why a money budget paid for no request at all, and what to change."""
        least = self.least_request
        why = (
            f"the median answer so far, {least:,} completion tokens"
            if self.answer_tokens
            else f"{least:,} completion tokens, a quarter of generation.max-tokens ({self.max_tokens:,})"
        )
        return (
            f"the money budget (${self.budget.money_usd or 0:g}) pays for no request: the least request ({why}) "
            f"costs ${self.cost(0, least):.3g} and its prompt at the configured prices; raise budget.money-usd or "
            "lower generation.max-tokens"
        )

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        """Money of so many tokens at the configured prices."""
        return (prompt_tokens * self.prices.input_per_mtok + completion_tokens * self.prices.output_per_mtok) / 1e6

    @property
    def held_tokens(self) -> int:
        return sum(r.max_tokens for r in self.held)

    @property
    def held_usd(self) -> float:
        return sum(r.usd for r in self.held)

    def reserve(self, prompt_tokens: int) -> Reservation | StopReason:
        """Hold what one request with a prompt of ``prompt_tokens`` may cost, or the budget that does not allow
        it (now: requests in flight may still give some back)."""
        tokens = self.max_tokens
        if self.budget.tokens is not None:
            tokens = min(tokens, self.budget.tokens - self.completion_tokens - self.held_tokens)
            if tokens < self.least_request:
                return "tokens"
        if self.budget.money_usd is not None:
            left = self.budget.money_usd - self.usd - self.held_usd - self.cost(prompt_tokens, 0)
            per_token = self.prices.output_per_mtok / 1e6
            if left <= 0:
                return "money"
            if per_token > 0:
                tokens = min(tokens, int(left / per_token))
                if tokens < self.least_request:
                    return "money"
        reservation = Reservation(tokens, prompt_tokens, self.cost(prompt_tokens, tokens))
        self.held.add(reservation)
        return reservation

    async def acquire(self, prompt_tokens: int) -> Reservation | StopReason:
        """:meth:`reserve`, waiting for requests in flight to settle while the budget cannot allow it yet."""
        while True:
            reservation = self.reserve(prompt_tokens)
            if isinstance(reservation, Reservation) or not self.held:
                return reservation
            if self._settled is None or self._settled.is_set():
                self._settled = asyncio.Event()
            await self._settled.wait()

    def settle(self, reservation: Reservation | None, *, prompt_tokens: int, completion_tokens: int) -> float:
        """Replace ``reservation`` (if any) by what the request cost; returns the money it cost."""
        if reservation is not None:
            self.held.discard(reservation)
        cost = self.cost(prompt_tokens, completion_tokens)
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens
        self.usd += cost
        if self._settled is not None:
            self._settled.set()
        return cost

    def release(self, reservation: Reservation) -> None:
        """Give a reservation back unused (the request was never sent)."""
        self.settle(reservation, prompt_tokens=0, completion_tokens=0)

    def spent(self) -> StopReason | None:
        """The token or money budget, when what is spent leaves no room for another request."""
        if self.budget.tokens is not None and self.budget.tokens - self.completion_tokens < self.least_request:
            return "tokens"
        if self.budget.money_usd is not None:
            per_token = self.prices.output_per_mtok / 1e6
            left = self.budget.money_usd - self.usd
            if left <= 0 or (per_token > 0 and left / per_token < self.least_request):
                return "money"
        return None
