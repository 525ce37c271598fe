"""``r1build replay``'s search: the candidates of stored transcripts re-extracted and judged again, with no
network, through the same pool and answer path as the live search."""

from __future__ import annotations

from collections.abc import Sequence

from ..events import Note, emit
from .budget import Ledger
from .job import SearchJob
from .outcome import SearchOutcome, Usage
from .pool import Pool, outcome_of, read_answer
from .transcripts import load_transcript


async def replay_search(job: SearchJob, transcripts: Sequence[str]) -> SearchOutcome:
    """Re-extract the candidates of stored transcripts and judge them again, with no network: the answers go
    through the search's own path (:func:`read_answer`, :meth:`Pool.admit_answer`), in round and sample order,
    so the same candidates are kept in the same order. ``job.profiler`` and ``job.perf_model`` are not used."""
    manifest, spec, arch, cache = job.manifest, job.spec, job.arch, job.cache
    usage = Usage()
    pool = Pool(manifest, spec, arch, evaluator=job.evaluator, usage=usage, seeds=job.seeds)
    stored = []
    for digest in transcripts:
        answer = load_transcript(cache, digest)
        if answer is None:
            usage.count("missing_transcript")
            emit(
                Note(
                    "warning",
                    f"transcript {digest[:12]} is missing or unreadable in the cache; skipped",
                    kernel=spec.name,
                    arch=arch,
                )
            )
            continue
        stored.append(answer)
    stored.sort(key=lambda a: (a.round, a.sample))
    for answer in stored:
        usage.samples += 1
        if answer.content is None:
            continue
        usage.answers += 1
        usage.prompt_tokens += int(answer.usage.get("prompt_tokens") or 0)
        usage.completion_tokens += int(answer.usage.get("completion_tokens") or 0)
        usage.reasoning_tokens += int(answer.usage.get("reasoning_tokens") or 0)
        extraction, _ = read_answer(answer.finish_reason, answer.content, spec.name, usage)
        if extraction is not None and extraction.source is not None:
            pool.admit_answer(
                extraction.source,
                model=answer.model,
                round_no=answer.round,
                sample=answer.sample,
                transcript=answer.digest,
                messages=[],
                answer="",
            )
    generation = manifest.settings.generation
    usage.cost_usd = Ledger(budget=spec.budget, prices=generation.prices, max_tokens=generation.max_tokens).cost(
        usage.prompt_tokens, usage.completion_tokens
    )
    await pool.judge([k.candidate for k in pool.in_order()])
    return outcome_of(
        pool,
        usage,
        [a.digest for a in stored],
        "replay",
        len({a.round for a in stored}),
        "a replay of stored transcripts",
    )
