"""The pool of a search: the distinct candidates it knows, in preference order (:class:`Order`), with their
results; how an answer becomes candidates (:func:`read_answer`, :meth:`Pool.admit_answer`: the one path taken by
the live search and by replay alike); judging them with the evaluator; and ranking those that passed."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from ..convert import field, record, replace
from ..errors import EvaluationError
from ..events import Note, emit
from ..judge import Evaluator, Job
from ..keys import canonical_json
from ..manifest.model import KernelSpec, Manifest
from ..records import Candidate, Origin, Result, Status
from ..toolchain.stopping import stoppable
from .budget import StopReason
from .extract import Extraction, complete_part, extract_source, normalized_digest, tunable_variants
from .outcome import SampleLoss, SearchOutcome, Usage

if TYPE_CHECKING:
    from ..perfmodel import PerfModel


FAILED: tuple[Status, ...] = ("compile_error", "rejected", "incorrect", "crashed", "timed_out")
"""The statuses of a candidate that failed, whose repair a later round may ask for."""


class Order(NamedTuple):
    """A candidate's place in preference order: the seeds first, in the manifest's order, then generated ones by
    round, sample and tunable variant. Of identical candidates the earliest is kept, and ties in time go to it."""

    generated: int
    """0 for a seed, 1 for a generated candidate."""
    round: int
    """Round of a generated candidate (0 for seeds)."""
    sample: int
    """Sample in its round; a seed's index among the seeds."""
    variant: int
    """Index of its tunable value set (0 without tunables)."""

    @classmethod
    def seed(cls, index: int) -> Order:
        """The ``index``-th seed's place."""
        return cls(0, 0, index, 0)

    @classmethod
    def answer(cls, round_no: int, sample: int, variant: int) -> Order:
        """The place of variant ``variant`` of the answer of round ``round_no``, sample ``sample``."""
        return cls(1, round_no, sample, variant)


@record
class Known:
    """A distinct candidate the search knows, with what a later round needs to build on it."""

    candidate: Candidate
    order: Order
    messages: list[dict[str, str]] = field(default_factory=list)
    """The task the model was given (a generated candidate's first user message), to continue the conversation."""
    answer: str = ""
    """The answer's content without its reasoning, sent back when the conversation continues."""
    result: Result | None = None
    """Its result, once judged."""
    parent: str | None = None
    """The digest of the candidate whose feedback asked for it (None for a seed or a fresh task): its lineage."""

    @property
    def label(self) -> str:
        o = self.candidate.origin
        if o.kind == "generated":
            return f"round {o.round} sample {o.sample}"
        return f"the {o.kind} {o.path}" if o.path else f"the {o.kind}"


def _defines_key(defines: dict[str, int | str]) -> str:
    return canonical_json(defines).decode()


class Pool:
    """The distinct candidates a search (or a replay) knows, in preference order, with their results.

    Of candidates with the same normalized source and values, the one earliest in preference order is kept,
    whatever order the answers arrived in, so a replay (which reads transcripts in order) keeps the same one. The
    pool judges candidates with the evaluator and ranks those that passed: by time where there are timings, else
    by preference order. The seeds are admitted first, in their order.
    """

    def __init__(
        self,
        manifest: Manifest,
        spec: KernelSpec,
        arch: str,
        *,
        evaluator: Evaluator,
        usage: Usage,
        seeds: Sequence[Candidate],
        perf_model: PerfModel | None = None,
    ) -> None:
        self.manifest = manifest
        self.spec = spec
        self.arch = arch
        self.evaluator = evaluator
        self.perf_model = perf_model
        """Orders (and in its skip mode, skips) generated candidates before the evaluator sees them."""
        self.usage = usage
        """Where duplicates are counted."""
        self.known: dict[str, Known] = {}
        """The candidates kept, by variant digest."""
        self.generated: set[str] = set()
        """Digests of the generated candidates kept, and of those that passed (counted without a scan: progress
        reports them at every event)."""
        self.generated_passed: set[str] = set()
        self.by_norm: dict[tuple[str, str], str] = {}
        """(normalized source digest, tunable values) -> the variant digest kept for them."""
        self.baseline = next((c for c in seeds if c.origin.kind == "baseline"), None)
        """The baseline among the seeds, which the evaluator times the others against."""
        for i, seed in enumerate(seeds):
            self.admit(seed, Order.seed(i), messages=[], answer="")

    def admit(
        self,
        candidate: Candidate,
        order: Order,
        *,
        messages: list[dict[str, str]],
        answer: str,
        parent: str | None = None,
    ) -> bool:
        """Register a candidate; returns whether it must be judged.

        A later arrival that is earlier in order replaces the kept one: for free when the text is the same, and
        judged once more when only comments or layout differ.
        """
        key = (normalized_digest(candidate.source), _defines_key(candidate.defines))
        kept = self.by_norm.get(key)
        if kept is None:
            self.by_norm[key] = candidate.digest
            self._keep(Known(candidate, order, messages, answer, parent=parent))
            return True
        self.usage.duplicates += 1 if candidate.origin.kind == "generated" else 0
        known = self.known[kept]
        if order >= known.order:
            return False
        if candidate.digest == kept:
            known.candidate, known.order, known.messages, known.answer = candidate, order, messages, answer
            return False
        del self.known[kept]
        self.generated.discard(kept)
        self.generated_passed.discard(kept)
        self.by_norm[key] = candidate.digest
        self._keep(Known(candidate, order, messages, answer, parent=parent))
        return True

    def _keep(self, known: Known) -> None:
        self.known[known.candidate.digest] = known
        if known.candidate.origin.kind == "generated":
            self.generated.add(known.candidate.digest)

    def admit_answer(
        self,
        source: str,
        *,
        model: str,
        round_no: int,
        sample: int,
        transcript: str,
        messages: list[dict[str, str]],
        answer: str,
        parent: str | None = None,
    ) -> list[Candidate]:
        """The candidates of the code ``source`` extracted from the answer of round ``round_no``, sample
        ``sample``: one per value set of the kernel's tunables, placed by :meth:`Order.answer`. Returns those that
        must be judged."""
        fresh = []
        for variant, defines in enumerate(tunable_variants(source, self.spec.tunables)):
            origin = Origin("generated", model=model, round=round_no, sample=sample, transcript=transcript)
            candidate = Candidate(source, origin, defines)
            order = Order.answer(round_no, sample, variant)
            if self.admit(candidate, order, messages=messages, answer=answer, parent=parent):
                fresh.append(candidate)
        return fresh

    async def judge(self, candidates: Sequence[Candidate]) -> None:
        """Judge candidates with the evaluator (in a worker thread) and record the results. With a performance
        model (:mod:`r1build.perfmodel`), generated candidates go to the evaluator in predicted order, and in its
        ``skip`` mode those predicted far slower than the best time so far are not judged (their result says so)."""
        if not candidates:
            return
        if self.perf_model is not None and all(c.origin.kind == "generated" for c in candidates):
            candidates, skipped = await asyncio.to_thread(
                self.perf_model.plan, self.spec, self.arch, candidates, self.best_time()
            )
            if skipped:
                emit(
                    Note(
                        "info",
                        f"the performance model skipped {len(skipped)} candidate(s) predicted more than "
                        f"{self.perf_model.skip_factor:g}x slower than the best measured so far",
                        kernel=self.spec.name,
                        arch=self.arch,
                    )
                )
            for result in skipped:
                known = self.known.get(result.candidate)
                if known is not None:
                    known.result = result
            if not candidates:
                return
        job = Job(self.manifest, self.spec, self.arch, list(candidates), baseline=self.baseline)
        with stoppable():  # a cancelled search (Ctrl-C) stops the compiles of this job at once
            results = await asyncio.to_thread(self.evaluator.evaluate, job)
        if len(results) != len(candidates):
            raise EvaluationError(f"the evaluator returned {len(results)} results for {len(candidates)} candidates")
        for candidate, result in zip(candidates, results, strict=True):
            known = self.known.get(candidate.digest)
            if known is not None:  # None: replaced meanwhile by an earlier sample's copy
                known.result = result
                if result.ok and candidate.digest in self.generated:
                    self.generated_passed.add(candidate.digest)

    def attach_transcript(self, round_no: int, sample: int, transcript: str) -> None:
        """Record the transcript of the answer of round ``round_no``, sample ``sample`` in the candidates admitted
        from it before it was stored (code gated while the answer still streamed)."""
        for known in self.known.values():
            o = known.candidate.origin
            if o.kind == "generated" and (o.round, o.sample) == (round_no, sample) and not o.transcript:
                known.candidate = replace(known.candidate, origin=replace(o, transcript=transcript))

    def lineage(self, digest: str) -> str:
        """The root of the lineage of candidate ``digest``: the seed or fresh answer its parents lead back to."""
        seen = {digest}
        known = self.known.get(digest)
        while known is not None and known.parent is not None and known.parent not in seen:
            digest = known.parent
            seen.add(digest)
            known = self.known.get(digest)
        return digest

    def _among(self, root: str | None) -> list[Known]:
        """The candidates kept, or those of lineage ``root`` only."""
        if root is None:
            return list(self.known.values())
        return [k for d, k in self.known.items() if self.lineage(d) == root]

    def in_order(self) -> list[Known]:
        """Every candidate kept, in preference order."""
        return sorted(self.known.values(), key=lambda k: k.order)

    def generated_known(self) -> list[Known]:
        """The generated candidates kept."""
        return [self.known[d] for d in self.generated]

    def ranked_best(self, limit: int = 2, root: str | None = None) -> list[Known]:
        """The best candidates that passed (of lineage ``root`` only, when given): the fastest where timed, else
        generated ones first in order."""
        passed = [k for k in self._among(root) if k.result is not None and k.result.ok]
        timed = [k for k in passed if k.result is not None and k.result.timing is not None]
        if timed:
            return sorted(timed, key=lambda k: (k.result.timing.median_us, k.order))[:limit]  # type: ignore[union-attr]
        generated = [k for k in passed if k.candidate.origin.kind == "generated"]
        return sorted(generated or passed, key=lambda k: k.order)[:limit]

    def recent_failures(self, limit: int, root: str | None = None) -> list[Known]:
        """The latest candidates that failed (of lineage ``root`` only, when given), one variant per source (one is
        enough to repair it)."""
        failed = [k for k in self._among(root) if k.result is not None and k.result.status in FAILED]
        failed.sort(key=lambda k: k.order, reverse=True)
        seen: set[str] = set()
        out = []
        for k in failed:
            if k.candidate.source_digest not in seen:
                seen.add(k.candidate.source_digest)
                out.append(k)
        return out[:limit]

    def best_time(self) -> float | None:
        """The best kernel's median time, when one was timed."""
        best = self.ranked_best(1)
        if best and best[0].result is not None and best[0].result.timing is not None:
            return best[0].result.timing.median_us
        return None

    def target_reached(self, target_share: float) -> bool:
        """Whether the best kernel reached ``target_share`` of the floor."""
        best = self.ranked_best(1)
        if not best or best[0].result is None or best[0].result.timing is None:
            return False
        share = best[0].result.timing.share_of_floor
        return share is not None and share >= target_share

    def timed(self) -> bool:
        """Whether any candidate was timed (a GPU judged)."""
        return any(k.result is not None and k.result.timing is not None for k in self.known.values())


INTERRUPTED = frozenset({"insufficient_system_resource", "abort", "error"})
"""Finish reasons of an answer the server ended before its end: DeepSeek's ``insufficient_system_resource`` (a busy
service), vLLM's and SGLang's ``abort``, and a plain ``error``. Read as ``stop`` they gave a half-written last block
to the gate, and its compile error to the model as its own."""


def read_answer(
    finish_reason: str | None, content: str, kernel: str, usage: Usage
) -> tuple[Extraction | None, SampleLoss | None]:
    """The one reading of a complete answer, by the search and by replay: its extraction, and why it gives no
    candidate (cut off at ``max_tokens``, ended early by the server (:data:`INTERRUPTED`), stopped by the content
    filter, no code block), counted in ``usage``. The extraction is None where the answer was cut off, ended early
    or filtered, except that an answer cut off after complete code (a closed block defining the kernel, which a
    continuous search gates while the answer streams) yields that code, still counted as ``truncated`` or
    ``interrupted``."""
    if finish_reason == "length" or finish_reason in INTERRUPTED:
        loss: SampleLoss = "truncated" if finish_reason == "length" else "interrupted"
        usage.count(loss)
        kept = complete_part(content, kernel)
        return (extract_source(kept, kernel) if kept is not None else None), loss
    if finish_reason == "content_filter":
        usage.count("content_filter")
        return None, "content_filter"
    extraction = extract_source(content, kernel)
    if extraction.source is None:
        usage.count("no_code")
        return extraction, "no_code"
    return extraction, None


def outcome_of(
    pool: Pool, usage: Usage, transcripts: list[str], reason: StopReason, rounds: int, cause: str
) -> SearchOutcome:
    """The outcome of a search or replay: the judged candidates in preference order, with their results."""
    judged = [k for k in pool.in_order() if k.result is not None]
    return SearchOutcome(
        candidates=[k.candidate for k in judged],
        results=[k.result for k in judged if k.result is not None],
        transcripts=transcripts,
        usage=usage,
        stop_reason=reason,
        rounds=rounds,
        cause=cause,
    )
