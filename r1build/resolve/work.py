"""The work on a miss (or a refresh): measure on a GPU and/or generate with the LLM, record the decision in the
cache; where neither is possible, the static gate on the user's own sources. One process at a time decides a key."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..cache import Cache, claim
from ..convert import record, replace
from ..errors import EndpointSilentError
from ..events import Stage, emit
from ..judge import CHECKS_VERSION, Evaluator
from ..manifest import Manifest
from ..manifest.model import TimingRegime
from ..records import Candidate, CandidateRef, Decision, Found, Result, Unresolved
from ..selection.regimes import mark_regimes, select_in_regime
from ..selection.rules import select_winner, unresolved
from ..settings import env_settings
from ..toolchain.nvcc import toolchain
from .judges import gate_batch
from .lookup import from_decision
from .model import Question, Resolved, Run

if TYPE_CHECKING:
    from ..perfmodel import PerfModel


def _perf_model(manifest: Manifest, evaluator: Evaluator | None) -> PerfModel | None:
    """The performance model a search on a GPU uses, when ``R1BUILD_PERF_MODEL`` asks for one."""
    settings = env_settings()
    if evaluator is None or settings.perf_model is None:
        return None
    from ..perfmodel import PerfModel

    return PerfModel(manifest, mode=settings.perf_model, skip_factor=settings.perf_model_skip)


def _stored_candidates(cache: Cache, previous: Decision | None) -> list[Candidate]:
    """The generated candidates of an earlier decision whose sources are still in the cache."""
    out = []
    for ref in previous.candidates if previous else []:
        if ref.origin.kind != "generated":
            continue
        source = cache.get_text(ref.source)
        if source is not None:
            out.append(Candidate(source, ref.origin, dict(ref.defines)))
    return out


def _generated_before(cache: Cache, key: str) -> tuple[list[Candidate], list[str]]:
    """The generated candidates (sources still in the cache) and transcripts that ``r1build generate`` recorded
    under ``key``: a resolve judges them rather than asking the model for the same answers again."""
    from ..cache import read_links

    links = read_links(cache, key)
    if links is None or links.candidates is None:  # none, or a record this version cannot read: generate again
        return [], []
    found = []
    for ref in links.candidates:
        source = cache.get_text(ref.source) if ref.origin.kind == "generated" else None
        if source is not None:
            candidate = Candidate(source, ref.origin, dict(ref.defines))
            if candidate.digest == ref.digest:
                found.append(candidate)
    return found, links.transcripts if found else []


def _with_known_rejections(
    candidates: Sequence[Candidate], results: Sequence[Result], prior: Decision | None
) -> list[Result]:
    """Gate-only ``results``, where ``prior`` (the cached decision of the same key) records a GPU's rejection of
    a candidate, carry that rejection: the static gate passing a kernel does not undo what a GPU found."""
    out = list(results)
    for i, (c, r) in enumerate(zip(candidates, results, strict=True)):
        known = prior.result_of(c.digest) if prior is not None and r.ok and r.stage == "gate" else None
        if known is not None and not known.ok and known.stage == "evaluate":
            out[i] = known
    return out


def _decide(run: Run, q: Question, seeds: list[Candidate]) -> Decision | None:
    """Real work on a miss: measure (GPU) and/or generate; None when neither is possible.

    With ``--refresh``, the generated candidates of the earlier decision are judged again (on a GPU now, say)
    rather than asking the model anew: a refresh re-evaluates, it does not re-generate.
    """
    cache, judges, options = run.cache, run.judges, run.options
    previous = cache.get_decision(q.key) if options.refresh else None
    stored = _stored_candidates(cache, previous)
    earlier: list[str] = []  # the transcripts of what `r1build generate` produced for this key
    if not stored and not options.refresh:
        stored, earlier = _generated_before(cache, q.key)
    generate = judges.endpoint(run.manifest, options) and not stored
    evaluator = judges.gpu_for(q.arch)
    if evaluator is None and not generate and (not stored or (previous is not None and previous.on_gpu)):
        # nothing to do, or only the gate to judge again what a GPU measured: keep the measured decision
        return None
    judged: _Judged
    if stored:
        q.note("info", f"judging {len(stored)} stored generated candidate(s) again (no new requests)")
        candidates = seeds + [c for c in stored if c.digest not in {s.digest for s in seeds}]
        results = (evaluator or judges.gate).evaluate(q.job(run.manifest, candidates))
        judged = _Judged(candidates, results, list(previous.transcripts) if previous else earlier)
    elif generate:
        from ..generate import SearchJob, search

        emit(Stage("generate", q.spec.name, q.arch))
        try:
            outcome = search(
                SearchJob(
                    run.manifest,
                    q.spec,
                    q.arch,
                    evaluator=evaluator or judges.gate,
                    cache=cache,
                    seeds=seeds,
                    profiler=judges.profiler_for(q.arch),
                    perf_model=_perf_model(run.manifest, evaluator),
                )
            )
        except EndpointSilentError as exc:
            if not options.build:
                raise
            # a build has the user's own sources to fall back on: go on as if no endpoint were configured
            q.note("warning", f"{exc}; building without generated candidates")
            judges.silence_endpoint()
            if evaluator is None:
                return None
            return _decide(run, q, seeds)
        judged = _Judged(outcome.candidates, outcome.results, outcome.transcripts)
    else:
        assert evaluator is not None
        emit(Stage("evaluate", q.spec.name, q.arch))
        judged = _Judged(seeds, evaluator.evaluate(q.job(run.manifest, seeds)), [])
    if evaluator is None:
        judged = replace(
            judged, results=_with_known_rejections(judged.candidates, judged.results, cache.get_decision(q.key))
        )
    return _record_decision(q, cache, judged, run.manifest.timing_regime_of(q.spec))


@record(frozen=True)
class _Judged:
    """What the work on a miss judged: the candidates in preference order, their results, and the transcripts of
    the search that generated some of them."""

    candidates: Sequence[Candidate]
    results: Sequence[Result]
    transcripts: Sequence[str]


def _record_decision(q: Question, cache: Cache, judged: _Judged, regime: TimingRegime = "back-to-back") -> Decision:
    """The decision of what was judged, stored in the cache with every candidate's source; ``regime`` ranks the
    candidates (:mod:`~r1build.selection.regimes`), and a winner the other regime would not pick is marked."""
    from datetime import datetime, timezone  # here: a run the lock answers records no decision

    candidates = judged.candidates
    results = mark_regimes(candidates, judged.results, regime)
    for c in candidates:
        cache.put_text(c.source)
    winner = select_in_regime(candidates, results, regime)
    measured = any(r.timing is not None for r in results)
    on_gpu = any(r.stage == "evaluate" for r in results)
    device = next((r.device for r in results if r.device), None)
    decision = Decision(
        key=q.key,
        kernel=q.spec.name,
        arch=q.arch,
        winner=CandidateRef.of(winner) if winner else None,
        candidates=[CandidateRef.of(c) for c in candidates],
        results=list(results),
        transcripts=list(judged.transcripts),
        measured=measured,
        device=device,
        toolchain=toolchain().ident,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        checks=CHECKS_VERSION if on_gpu else None,
    )
    cache.put_decision(decision)
    return decision


def work(run: Run, q: Question, seeds: list[Candidate], kept: Resolved | None = None) -> Resolved | Unresolved:
    """A miss (or a refresh): measure and/or generate; else what the lock or cache had (``kept``, for a refresh
    on a machine that cannot judge this arch); else the static gate on the user's own sources.

    One process at a time decides a key (:func:`~r1build.cache.claim.claim`): concurrent resolves of one
    manifest wait for the first and use the decision it stored instead of asking the model again."""
    with claim(run.cache.directory, q.key, what=f"{q.spec.name}/{q.arch}"):
        reused = None if run.options.refresh else run.cache.get_decision(q.key)  # stored while this one waited
        if reused is not None:
            found = from_decision(run, q, reused, "cached")
            if found is not None:
                return found
        decision = _decide(run, q, seeds)
    if decision is not None:
        how: Found = "generated" if decision.transcripts else ("measured" if decision.measured else "gated")
        resolved = from_decision(run, q, decision, how)
        if resolved is not None:
            return resolved
    elif kept is not None:
        q.note(
            "info",
            f"nothing here can judge this arch again (no GPU of it, no endpoint): keeping the {kept.state} winner",
        )
        return kept
    return _gated(run, q, seeds)


def _note_failed_baseline(q: Question, seeds: Sequence[Candidate], results: Sequence[Result], chosen: str) -> None:
    """A warning where the user's baseline failed the static gate and ``chosen`` wins in its place: said, never
    passed over in silence (a baseline that is no CUDA at all otherwise went unnoticed)."""
    for candidate, result in zip(seeds, results, strict=False):
        if candidate.origin.kind == "baseline" and not result.ok:
            detail = " ".join((result.detail or "").split("output:", 1)[-1].split())  # the compiler's words
            shown = detail if len(detail) <= 240 else detail[:240] + "..."
            q.note(
                "warning",
                f"the baseline {candidate.origin.path} failed the static gate ({result.status}: {shown}); "
                f"{chosen} wins in its place",
            )
            return


def _gated(run: Run, q: Question, seeds: list[Candidate]) -> Resolved | Unresolved:
    """No GPU of this arch and nothing to generate with: the static gate judges the user's own sources (baseline,
    ``candidates`` files, their tunable values); the first that passes in preference order wins, unvalidated.
    They are gated in that order a batch at a time (:func:`~.judges.gate_batch`), up to the first batch holding a
    winner: the rest could not change it, and a kernel with many tunable value sets would otherwise compile all.
    The first candidates whose verdicts need no compile (cached: compiled along with a GPU job's) are a batch of
    their own, so a winner among them compiles nothing. Nothing is cached as a decision (the gate's verdicts
    are), so a GPU measures on the next miss."""
    prior = run.cache.get_decision(q.key)
    results: list[Result] = []
    winner = None
    batch = gate_batch()
    first = run.judges.gate.known(q.job(run.manifest, seeds[:batch])) or batch  # a look-up each: one batch at most
    for start in [0, *range(first, len(seeds), batch)] if seeds else []:
        chunk = seeds[start : start + (batch if start else first)]
        results += _with_known_rejections(chunk, run.judges.gate.evaluate(q.job(run.manifest, chunk)), prior)
        winner = select_winner(seeds[: len(results)], results)
        if winner is not None:
            break
    if winner is None:
        return unresolved(q.spec.name, q.arch, [CandidateRef.of(c) for c in seeds], results)
    why = run.judges.unmeasured(q.arch)
    name = winner.origin.path or winner.origin.kind
    _note_failed_baseline(q, seeds, results, f"the {winner.provenance()} {name}")
    q.note("warning", f"{why}: the {winner.provenance()} {name} is chosen by the static gate alone, unvalidated")
    return Resolved(
        spec=q.spec,
        arch=q.arch,
        key=q.key,
        candidate=winner,
        state="gated",
        provenance=winner.provenance(),
        validation="unvalidated",
        toolchain=toolchain().ident,
    )
