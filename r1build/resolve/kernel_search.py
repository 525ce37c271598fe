"""One kernel's generation outside resolution: what ``r1build generate`` and ``r1build replay`` do, as library
calls that take a :class:`~r1build.cache.Cache`.

:func:`generate_kernel` asks the LLM for candidates of one kernel, arch by arch, and judges them with the static
gate (no GPU needed); it keeps every candidate's source in the cache, and a :class:`GenerationRecord` of each
search under its decision key in :data:`~r1build.cache.transcript_doc.LINKS_NAMESPACE`, in place of the link the
search
made there itself (the record holds its transcripts too). :func:`replay_kernel` re-extracts
the candidates of stored transcripts and judges them again with no network (on a local GPU of the arch where
there is one), and says how its winner compares with the stored decision's (:data:`ReplayVerdict`). Both yield
one result per arch as it is ready, so the caller can show each at once. Nothing is resolved or locked here.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Literal, NamedTuple

from ..cache import LINKS_NAMESPACE, Cache, read_links
from ..convert import asdict, record
from ..errors import CacheError, ConfigError, UsageError
from ..keys import decision_key
from ..manifest import KernelSpec, Manifest
from ..records import Candidate, CandidateRef, Decision, Result
from ..selection.rules import select_winner
from ..settings import env_settings

if TYPE_CHECKING:
    from ..generate import SearchOutcome, Usage
    from ..generate.budget import StopReason

__all__ = [
    "ArchSearch",
    "GenerationRecord",
    "Replay",
    "ReplayVerdict",
    "generate_kernel",
    "replay_kernel",
    "require_endpoint",
]

ReplayVerdict = Literal["confirmed", "passes the gate", "differs"]
"""How a replay's winner compares with the stored decision's: the same winner (``confirmed``); another, while
the stored one passes the static gate and no GPU judged (``passes the gate``: only a GPU of the arch can tell); or a
winner the stored decision did not choose (``differs``). ``replay --json`` reports these words."""


@record(frozen=True, kw_only=True)
class GenerationRecord:
    """What ``r1build generate`` keeps of one search, in the cache (:data:`LINKS_NAMESPACE`, by decision
    key): enough for ``r1build replay`` to find its transcripts, and for a person to see what it produced."""

    kernel: str
    """Kernel name."""
    arch: str
    """Canonical arch."""
    created: str
    """ISO timestamp."""
    transcripts: list[str]
    """Digests of the transcript blobs, by round and sample."""
    candidates: list[CandidateRef]
    """Every distinct candidate judged, in preference order."""
    results: list[Result]
    """Their results (the static gate's), in the same order."""
    usage: Usage
    """Requests, tokens, money and faults of the search."""
    stop_reason: StopReason
    """Why the search ended."""
    cause: str
    """The stop in words."""


class ArchSearch(NamedTuple):
    """One arch's search by :func:`generate_kernel`."""

    arch: str
    """Canonical arch."""
    outcome: SearchOutcome
    """What it produced."""


@record(frozen=True, kw_only=True)
class Replay:
    """One arch's replay."""

    arch: str
    """Canonical arch."""
    transcripts: list[str]
    """The transcript blobs replayed."""
    outcome: SearchOutcome
    """The candidates re-extracted and their new results."""
    winner: Candidate | None
    """The candidate that wins among them, if any."""
    stored: Decision | None
    """The stored decision whose transcripts were replayed (None with transcripts given by digest, or none)."""
    verdict: ReplayVerdict | None
    """How ``winner`` compares with the stored decision's (None where it has no winner to compare)."""


def require_endpoint(manifest: Manifest) -> None:
    """:class:`~r1build.errors.ConfigError` unless this process may and can call the manifest's LLM endpoint:
    ``R1BUILD_OFFLINE`` unset and an endpoint configured (a URL, or the provider's key in the environment)."""
    from ..generate import endpoint_configured
    from ..generate.providers import BASE_URL_ENV, PROFILES

    generation = manifest.settings.generation
    if env_settings().offline:
        raise ConfigError(
            "R1BUILD_OFFLINE is set: `r1build generate` would call the LLM endpoint; unset it, or use "
            "`r1build replay` to judge stored answers again with no network"
        )
    if not endpoint_configured(generation):
        keys = (generation.api_key_env,) if generation.api_key_env else PROFILES[generation.provider].key_envs
        raise ConfigError(
            f"no LLM endpoint configured for provider {generation.provider!r}: set "
            f"{' or '.join(keys)}, or {BASE_URL_ENV}, or base-url in [generation] of {manifest.path}"
        )


def generate_kernel(manifest: Manifest, spec: KernelSpec, archs: Sequence[str], cache: Cache) -> Iterator[ArchSearch]:
    """Search for candidates of ``spec`` on each of ``archs``, judged by the static gate, seeded with the
    manifest's own candidates; yields each arch's outcome once its sources and :class:`GenerationRecord` are in
    ``cache``. :class:`~r1build.errors.CacheError` first when the cache cannot keep what the requests cost."""
    from ..evaluate.variants import expand_variants
    from ..gate.static import StaticGate
    from ..generate import SearchJob, search

    seeds = expand_variants(manifest, spec)
    if cache.degraded is not None:
        raise CacheError(
            f"not generating: the cache at {cache.directory} cannot keep what the requests would "
            f"cost ({cache.degraded})"
        )
    gate = StaticGate(cache)
    for arch in archs:
        outcome = search(SearchJob(manifest, spec, arch, evaluator=gate, cache=cache, seeds=seeds))
        for candidate in outcome.candidates:
            cache.put_text(candidate.source)
        record = GenerationRecord(
            kernel=spec.name,
            arch=arch,
            created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            transcripts=outcome.transcripts,
            candidates=[CandidateRef.of(c) for c in outcome.candidates],
            results=outcome.results,
            usage=outcome.usage,
            stop_reason=outcome.stop_reason,
            cause=outcome.cause,
        )
        cache.put_json(LINKS_NAMESPACE, decision_key(manifest, spec, arch), asdict(record))
        yield ArchSearch(arch, outcome)


def _stored_transcripts(
    cache: Cache, manifest: Manifest, spec: KernelSpec, arch: str
) -> tuple[list[str], Decision | None]:
    """The transcripts of the cached decision of ``spec`` on ``arch``, else of its :class:`GenerationRecord`."""
    key = decision_key(manifest, spec, arch)
    decision = cache.get_decision(key)
    if decision is not None and decision.transcripts:
        return list(decision.transcripts), decision
    links = read_links(cache, key)
    return (links.transcripts if links is not None else []), decision


def _verdict(outcome: SearchOutcome, winner: Candidate | None, stored: Decision | None) -> ReplayVerdict | None:
    if stored is None or stored.winner is None:
        return None
    if winner is not None and winner.digest == stored.winner.digest:
        return "confirmed"
    replayed = next(
        (r for c, r in zip(outcome.candidates, outcome.results, strict=True) if c.digest == stored.winner.digest), None
    )
    if all(r.stage == "gate" for r in outcome.results) and replayed is not None and replayed.ok:
        return "passes the gate"
    return "differs"


def replay_kernel(
    manifest: Manifest,
    spec: KernelSpec,
    archs: Sequence[str],
    cache: Cache,
    *,
    transcripts: Sequence[str] = (),
    use_gpu: bool = True,
) -> Iterator[Replay]:
    """Replay ``transcripts`` (blob digests), else each arch's stored ones, judged with the manifest's own
    candidates by a local GPU of the arch (unless ``use_gpu`` is false) or the static gate; yields each arch's
    :class:`Replay`. :class:`~r1build.errors.UsageError` for an arch with no transcripts to replay."""
    from ..evaluate.variants import expand_variants
    from ..generate import SearchJob, replay
    from .judges import Judges

    seeds = expand_variants(manifest, spec)
    # the resolver's judges: a local GPU of the arch where one is visible (the same rule and notes as a
    # resolve), else the static gate; their GPU workers end with the replay
    judges = Judges(cache, evaluate=None if use_gpu else False)
    try:
        for arch in archs:
            stored: Decision | None = None
            chosen = list(transcripts)
            if not chosen:
                chosen, stored = _stored_transcripts(cache, manifest, spec, arch)
            chosen = list(dict.fromkeys(chosen))  # a transcript named twice is one sample
            if not chosen:
                raise UsageError(
                    f"no stored transcripts for {spec.name} on {arch} in {cache.directory}: run "
                    f"`r1build generate {spec.name}` or `r1build resolve` first, or pass --transcript"
                )
            evaluator = judges.gpu_for(arch) or judges.gate
            job = SearchJob(manifest, spec, arch, evaluator=evaluator, cache=cache, seeds=seeds)
            outcome = replay(job, chosen)
            winner = select_winner(outcome.candidates, outcome.results)
            yield Replay(
                arch=arch,
                transcripts=chosen,
                outcome=outcome,
                winner=winner,
                stored=stored,
                verdict=_verdict(outcome, winner, stored),
            )
    finally:
        judges.close()
