"""Generate stage: DeepSeek-R1 through the openai client, an inference-time scaling controller, transcripts.

What other stages call:

- :func:`endpoint_configured` says whether generation may run at all;
- :func:`search` runs the closed loop for one :class:`SearchJob` (one kernel on one arch: generate, judge with
  its :class:`~r1build.judge.Evaluator`, feed back, within the kernel's budget) and returns a
  :class:`SearchOutcome`;
- :func:`replay` re-extracts the candidates of stored transcripts and judges them again, with no network.

Modules: :mod:`.providers` (profiles, endpoint, keys and their redaction), :mod:`.client` (one sample
through the openai client: retries, deadlines, the wire), :mod:`.exchange` (the records of a sample's attempts and
answer), :mod:`.pacing` (the shared pause and circuit breaker), :mod:`.budget` (stop reasons, the token and money
ledger), :mod:`.prompts`, :mod:`.extract` (code out of answers, normalized digests, tunables),
:mod:`.pool` (the distinct candidates of a search, the one path from an answer to candidates, ranking),
:mod:`.job` (what identifies and serves one search), :mod:`.planning` (what each sample of a round asks),
:mod:`.controller` (rounds, stops), :mod:`.continuous` (the search without rounds), :mod:`.judging` (the judge's
queue and counts), :mod:`.links` (a live search's transcripts linked under its key), :mod:`.resumption` (what a
search cut short received, taken back), :mod:`.stored_search` (a search from stored transcripts),
:mod:`.outcome` (what a search produced and spent), :mod:`.transcripts`.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import threading
from collections.abc import Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..manifest.model import Manifest
from .job import SearchJob
from .providers import PROFILES, Endpoint, endpoint_configured, resolve_endpoint

if TYPE_CHECKING:
    from .outcome import SearchOutcome, Usage

__all__ = [
    "PROFILES",
    "Endpoint",
    "SearchJob",
    "SearchOutcome",
    "Usage",
    "endpoint_configured",
    "replay",
    "resolve_endpoint",
    "search",
]

T = TypeVar("T")


def __getattr__(name: str) -> Any:
    # the controller imports the openai client (the ``generate`` extra): only a search or a replay loads it, so
    # endpoint_configured and the providers work where openai is not installed
    if name in ("SearchOutcome", "Usage"):
        from . import controller

        return getattr(controller, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from synchronous code, also when an event loop is already running in this
    thread (then in a helper thread with the caller's context, so event sinks still apply)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}
    context = contextvars.copy_context()

    def target() -> None:
        try:
            box["value"] = context.run(asyncio.run, coro)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, name="r1build-generate")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


R1_TEMPERATURES = (0.5, 0.7)
"""DeepSeek-R1's recommended temperature range (its model card: 0.6; outside it, repetition or incoherence)."""

_TEMPERATURES_WARNED: set[tuple[str, tuple[float, ...]]] = set()
"""The manifests and schedules warned about in this process (one warning a run, not one a kernel)."""


def _warn_temperatures(manifest: Manifest, endpoint: Endpoint) -> None:
    """Warn, once a run, about temperatures outside :data:`R1_TEMPERATURES` that are sent."""
    from ..events import Note, emit

    temperatures = tuple(manifest.settings.generation.temperatures)
    low, high = R1_TEMPERATURES
    outside = [t for t in temperatures if not low <= t <= high]
    key = (str(manifest.path), temperatures)
    if not outside or not endpoint.profile.honours_temperature or key in _TEMPERATURES_WARNED:
        return
    _TEMPERATURES_WARNED.add(key)
    shown = ", ".join(f"{t:g}" for t in outside)
    emit(
        Note(
            "warning",
            f"generation.temperatures in {manifest.path} has {shown}, outside R1's recommended {low:g}-{high:g}: "
            "answers may repeat themselves or lose coherence",
        )
    )


def search(job: SearchJob, environ: Mapping[str, str] = os.environ) -> SearchOutcome:
    """Search for candidates of ``job.spec`` on ``job.arch`` with R1, judged by ``job.evaluator``.

    ``job.seeds`` (baseline, hand-written candidates and their variants) are judged first and come first in the
    outcome. Raises :class:`~r1build.errors.ConfigError` for settings that cannot work (no key, bad URL, a key
    the server rejects) and :class:`~r1build.errors.GenerationError` when the provider ends the run (no credit,
    a request it refuses) or when no request got an answer at all (the message names the faults: ``no answer
    from URL: 20 requests, all HTTP 503 Service Unavailable``); every other fault costs a retry or a sample and
    is reported as a :class:`~r1build.events.Note`. However it ends, the transcripts stored are linked under the
    decision key for ``replay``. With ``job.profiler`` (:class:`r1build.profile.Profiler`, where ncu and a local
    GPU are), each round's finalists are profiled and the findings fed back; with ``job.perf_model``
    (:class:`r1build.perfmodel.PerfModel`), GPU work is ordered (and skipped) by its predictions.
    """
    from .controller import run_search

    endpoint = resolve_endpoint(job.manifest.settings.generation, environ)
    _warn_temperatures(job.manifest, endpoint)
    return _run(run_search(job, endpoint))


def replay(job: SearchJob, transcripts: Sequence[str]) -> SearchOutcome:
    """Re-extract the candidates of stored ``transcripts`` (blob digests) and judge them again with
    ``job.evaluator``; no network. ``job.seeds`` are judged with them and come first (``job.profiler`` and
    ``job.perf_model`` are not used)."""
    from .controller import replay_search

    return _run(replay_search(job, transcripts))
