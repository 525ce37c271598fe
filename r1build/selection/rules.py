"""Select stage: the winner per arch from typed results, noise-aware.

Rules:
- only candidates that may win are eligible (:func:`may_win`): passed on a GPU of the arch (``validated``, with a
  time above zero: :func:`measured`), or
  passed the static gate alone when the user wrote the source (``unvalidated``: baseline, ``candidates`` files,
  their tunable values). A rejected candidate never wins, and a generated one never wins on the gate alone
  (it is ``pending`` until a GPU of the arch judges it);
- with timings, find the fastest; the winner is the *earliest* eligible candidate (in preference order) that the
  fastest does not beat by more than the noise, where the noise of a comparison is three standard errors of the
  difference of the two medians (estimated from each one's spread and sample count: single cold launches
  scatter by a few percent, their median of hundreds of samples by a fraction of that) and at least
  ``min_lead``, which covers what varies between runs (clocks, temperature). So the fastest wins only when its
  lead over every earlier candidate is larger than the noise, and a tie goes to the simpler or earlier one.
  Candidates are given in preference order (baseline, hand-written files, tuned variants, generated in order);
- candidates that passed without a timing (no GPU measured them) only win when none was timed;
- without timings (static gate only), the first eligible candidate in preference order wins.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

from ..keys import variant_digest
from ..records import (
    CandidateOutcome,
    CandidateRef,
    Decision,
    Origin,
    OriginKind,
    Result,
    Unresolved,
    Validation,
    provenance_of,
    validation_of,
)
from .noise import median_error

__all__ = [
    "MIN_LEAD",
    "beats",
    "decision_problem",
    "decision_winner",
    "may_win",
    "measured",
    "median_error",
    "outcomes",
    "rejection",
    "select_winner",
    "unresolved",
]

MIN_LEAD = 0.02
"""Smallest relative lead that counts as faster, whatever the measured spread."""


def beats(challenger: Result, holder: Result, min_lead: float = MIN_LEAD) -> bool:
    """Whether ``challenger`` is faster than ``holder`` by more than the noise of the two measurements."""
    a, b = challenger.timing, holder.timing
    assert a is not None and b is not None
    error = math.hypot(median_error(a.spread, a.samples), median_error(b.spread, b.samples))
    noise = max(3.0 * error, min_lead)
    return bool(a.median_us * (1.0 + noise) < b.median_us)


if TYPE_CHECKING:  # a Protocol class costs a few milliseconds to make, and only the type checker reads it

    class _Sourced(Protocol):
        @property
        def origin(self) -> Origin: ...


C = TypeVar("C", bound="_Sourced")

WINNABLE: tuple[Validation, ...] = ("validated", "unvalidated")
"""The validation states a winner may have."""


def may_win(validation: Validation) -> bool:
    """Whether a candidate checked this far may be a winner."""
    return validation in WINNABLE


def measured(result: Result) -> bool:
    """Whether ``result`` holds a time: a median that is finite and above zero (a time of zero is no
    measurement: the timing saw none of the work)."""
    t = result.timing
    return t is not None and math.isfinite(t.median_us) and t.median_us > 0


def _winnable(kind: OriginKind, result: Result) -> bool:
    """Whether a candidate of origin ``kind`` may win by ``result``: its validation may (:func:`may_win`), a
    timing it has is a time, and one validated on a GPU has one (as :func:`decision_problem` requires)."""
    validation = validation_of(kind, result)
    if not may_win(validation) or (result.timing is not None and not measured(result)):
        return False
    return validation != "validated" or measured(result)


def select_winner(candidates: Sequence[C], results: Sequence[Result], *, min_lead: float = MIN_LEAD) -> C | None:
    """The winning candidate, or None when none may win. ``results[i]`` judges ``candidates[i]``."""
    if len(candidates) != len(results):
        raise ValueError("one result per candidate is needed")
    eligible = [(c, r) for c, r in zip(candidates, results, strict=True) if _winnable(c.origin.kind, r)]
    if not eligible:
        return None
    timed = [(c, r) for c, r in eligible if r.timing is not None]
    if not timed:
        return eligible[0][0]
    fastest = min(timed, key=lambda cr: cr[1].timing.median_us if cr[1].timing else float("inf"))[1]
    for c, r in timed:
        if r is fastest or not beats(fastest, r, min_lead):
            return c
    return None  # unreachable: the fastest does not beat itself


def decision_winner(decision: Decision) -> CandidateRef | None:
    """The winner a cached decision may give: its recorded winner when that may win by its own result; else the
    winner among its candidates by the rules above (a decision recorded by an older r1build, or brought in a
    bundle, may name a rejected or gate-only generated winner); None when none may win."""
    if decision.winner is not None and may_win(decision.validation(decision.winner)):
        return decision.winner
    judged = [(ref, r) for ref in decision.candidates if (r := decision.result_of(ref.digest)) is not None]
    return select_winner([ref for ref, _ in judged], [r for _, r in judged])


def decision_problem(decision: Decision) -> str | None:
    """Why the winner :func:`decision_winner` gives contradicts the decision itself (None when it does not, or
    when it gives none): a winner whose digest is not that of its source and defines, a result judged for
    another arch, or one that counts as validated on a GPU with no time measured or no GPU named. r1build never
    records such a decision (the GPU evaluator's passed results carry both); a cache, bundle or remote may."""
    winner = decision_winner(decision)
    if winner is None:
        return None
    if variant_digest(winner.source, winner.defines) != winner.digest:
        return f"its winner {winner.digest[:12]} is not the digest of its source and defines"
    result = decision.result_of(winner.digest)
    if result is not None and result.arch != decision.arch:
        return f"its winner {winner.digest[:12]} was judged for {result.arch!r}, not {decision.arch}"
    if decision.validation(winner) == "validated":
        if result is None or not measured(result):
            return f"it records its winner {winner.digest[:12]} as validated on a GPU, but no time measured there"
        if not ((result.device if result else None) or decision.device):
            return f"it records its winner {winner.digest[:12]} as validated on a GPU, but names no GPU"
    return None


def rejection(decision: Decision, digest: str) -> str | None:
    """Why ``decision`` records the candidate ``digest`` as rejected (the judge, status and first line of the
    detail), or None when it does not."""
    result = decision.result_of(digest)
    if result is None or result.ok:
        return None
    judge = "the static gate" if result.stage == "gate" else f"the GPU checks ({result.device or 'GPU'})"
    line = _first_error(result.detail)
    return f"{judge} rejected it ({result.status}{': ' + line if line else ''})"


def _first_error(detail: str) -> str:
    """One line that says why: the judge's own first sentence, else (a bare compiler report) the first error the
    compiler printed."""
    lines = [line.strip() for line in detail.splitlines() if line.strip()]
    if not lines:
        return ""
    if not lines[0].startswith("command:"):
        return lines[0]
    errors = [
        line
        for line in lines
        if re.search(r"\berror\b", line, re.IGNORECASE) and not line.startswith(("command:", "return code:"))
    ]
    meaningful = [line for line in lines if not line.startswith(("command:", "return code:", "output:"))]
    return (errors or meaningful or lines)[0]


def _reason(validation: Validation, result: Result | None, arch: str) -> str:
    if result is None:
        return "never judged"
    if validation == "pending":
        return (
            f"passed the static gate; a generated candidate waits for a GPU of {arch} to judge it "
            "(`r1build resolve --refresh` on a machine with one)"
        )
    line = _first_error(result.detail) or result.status.replace("_", " ")
    if len(line) > 160 and ". " in line[:160]:  # a long explanation: its first sentence names what failed
        line = line[: line.index(". ") + 1]
    return line if len(line) <= 240 else line[:237] + "..."


def _origin_text(origin: Origin) -> str:
    if origin.kind == "generated":
        return f"{origin.model or 'model'} round {origin.round} sample {origin.sample}"
    return origin.path or origin.kind


def outcomes(candidates: Sequence[CandidateRef], results: Sequence[Result], arch: str) -> list[CandidateOutcome]:
    """A table row per candidate (matched to its result by digest), for a kernel × arch where none may win."""
    by_digest = {r.candidate: r for r in results}
    rows = []
    for ref in candidates:
        result = by_digest.get(ref.digest)
        validation = validation_of(ref.origin.kind, result)
        rows.append(
            CandidateOutcome(
                candidate=ref.digest,
                provenance=provenance_of(ref.origin, ref.defines),
                origin=_origin_text(ref.origin),
                validation=validation,
                stage=result.stage if result else None,
                status=result.status if result else None,
                reason=_reason(validation, result, arch),
            )
        )
    return rows


def unresolved(kernel: str, arch: str, candidates: Sequence[CandidateRef], results: Sequence[Result]) -> Unresolved:
    """A kernel × arch where no candidate may win, with each candidate's standing and what to do about it."""
    rows = outcomes(candidates, results, arch)
    if any(row.validation == "pending" for row in rows):
        fix = (
            f"judge the pending generated candidates on a GPU of {arch} (`r1build resolve --refresh` there, or "
            "import a bundle from such a machine), or add a hand-written `baseline` that passes"
        )
    elif not rows:
        fix = (
            'add `baseline = "path.cu"` to the kernel, import a cache bundle (`r1build cache import`), vendor '
            "winners from a machine that has them (`r1build vendor`), or configure an LLM endpoint and run "
            "`r1build resolve`"
        )
    else:
        fix = (
            "fix the baseline or add a `candidates` file that passes (the table says why each failed), or "
            "configure an LLM endpoint to generate more"
        )
    return Unresolved(kernel=kernel, arch=arch, outcomes=rows, fix=fix)
