"""Resolution: every kernel × arch of a manifest to one winning candidate, and the build's generated files.

The order of sources for one kernel on one arch (its *decision key* names the question):

1. the lock, when its entry answers this key and may be used (a lock entry never names a pending or rejected
   winner, nor one that the cached decision of its key records as rejected): the winner's source from the cache,
   the vendored folder, or the manifest's own files (verified by digest);
2. a decision in the cache for this key (its winner re-checked by :func:`~r1build.selection.decision_winner`);
3. on a miss, real work: a GPU evaluator of this arch judges the baseline, hand-written files and every tunable
   value set, and an LLM endpoint (when configured and not ``--offline``) generates more candidates around them;
4. with no GPU of this arch and no endpoint, the static gate judges the user's own sources and the first that
   passes in preference order wins, ``unvalidated``.

Only a candidate that may win (:mod:`r1build.selection`) is ever a winner: one that a check rejected never is, and a
generated one judged by the gate alone stays ``pending`` in the cached decision until a GPU of its arch judges it.
A kernel × arch where none may win is :class:`~r1build.records.Unresolved`: nothing is locked or emitted for it,
the rest of the manifest still resolves and is locked, and :meth:`Resolution.require_complete` raises
:class:`~r1build.errors.NoWinnerError` for callers that emit. Everything emitted passes the static gate for its
arch (cached, so a warm build compiles nothing twice).
"""

from __future__ import annotations

import contextvars
import datetime as _dt
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple

from .arch_support import require_supported_archs
from .cache import Cache, claim
from .errors import CompileError, EndpointSilentError, LockError, NoWinnerError, ResolveError, UsageError
from .events import Level, Note, Stage, emit
from .extras import CUPY, GENERATE
from .judge import CHECKS_VERSION, Evaluator, Job
from .keys import decision_key, digest_bytes
from .lock import (
    Lock,
    LockEntry,
    find_vendored,
    inputs_of,
    load_lock,
    lock_path,
    require_fresh,
    salvage_lock,
    unlockable,
    write_lock,
)
from .manifest import KernelSpec, Manifest, find_manifest, load_manifest
from .reach import unreachable
from .records import (
    Candidate,
    CandidateRef,
    Decision,
    Found,
    Origin,
    Provenance,
    Result,
    SourceFrom,
    Unresolved,
    Validation,
)
from .selection import decision_winner, rejection, select_winner, unresolved
from .settings import env_settings
from .toolchain import toolchain

if TYPE_CHECKING:
    from .cluster.session import ClusterEvaluator
    from .evaluate import GpuEvaluator
    from .gate.static import StaticGate
    from .perfmodel import PerfModel
    from .profile import Profiler

__all__ = [
    "Resolution",
    "ResolveOptions",
    "Resolved",
    "WinnerSource",
    "lock_refusal",
    "prepare_build",
    "project_source",
    "resolve",
    "stale_checks",
]


@dataclass(frozen=True, kw_only=True)
class ResolveOptions:
    """How to resolve."""

    archs: list[str] | None = None
    """Only these canonical archs (intersected with each kernel's); all targets when None."""
    kernels: list[str] | None = None
    """Only these kernels; all when None."""
    offline: bool | None = None
    """Never call an LLM. None: offline when ``R1BUILD_OFFLINE`` is set in ``environ`` or no endpoint is
    configured."""
    locked: bool = False
    """Fail unless the lock is present and current; use only what it names."""
    refresh: bool = False
    """Ignore cached decisions and the lock, and judge again."""
    frozen: bool = False
    """Use the lock as it is, never check it against the manifest (``--frozen``): every kernel × arch takes its
    entry, stale or not (each entry's fields and winner are still verified), one without an entry is an error,
    and nothing is generated, measured or written to the lock."""
    use_gpu: bool | None = None
    """Measure on local GPUs on a miss. None: when one is visible."""
    write_lock: bool = True
    """Update the lock file when decisions change."""
    recover_lock: bool = False
    """A damaged lock (corrupt, truncated, conflicted, or with entries that do not verify) is rebuilt from the
    entries that still verify, the cache and the manifest, instead of being an error (``r1build lock``)."""
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    """Environment for endpoint and key lookup."""
    build: bool = False
    """Resolving for a build (the PEP 517 backend): an endpoint that never answers is a warning, and the build
    goes on with the user's own sources, instead of an error."""
    cluster: str | None = None
    """Address of a Dask scheduler: GPU jobs run on its workers of each arch, gate compiles on its compile slots
    (:mod:`r1build.cluster`), instead of on local GPUs and cores. None: this machine only."""


@dataclass(frozen=True, kw_only=True)
class Resolved:
    """The winner of one kernel on one arch and how it was found."""

    spec: KernelSpec
    arch: str
    key: str
    candidate: Candidate
    state: Found
    provenance: Provenance
    validation: Validation
    """``validated`` or ``unvalidated`` (a winner is never pending or rejected)."""
    time_us: float | None = None
    gpu: str | None = None
    toolchain: str | None = None
    gate: Result | None = None
    checks: int | None = None
    """Version of the GPU checks that validated it."""


@dataclass
class Resolution:
    """All winners of one resolve run."""

    manifest: Manifest
    entries: list[Resolved]
    lock: Lock
    lock_changed: bool = False
    unresolved: list[Unresolved] = field(default_factory=list)
    """Kernel × archs where no candidate may win: nothing is locked or emitted for them."""

    def require_complete(self) -> None:
        """:class:`~r1build.errors.NoWinnerError` when some kernel × arch has no winner (before emitting)."""
        if self.unresolved:
            raise NoWinnerError(self.unresolved)


@dataclass(frozen=True)
class _Question:
    """One kernel × arch to resolve, and the decision key that names it."""

    spec: KernelSpec
    arch: str
    key: str

    def job(self, manifest: Manifest, candidates: Sequence[Candidate]) -> Job:
        """The job of judging ``candidates`` for this kernel × arch (the baseline among them named)."""
        return Job(manifest, self.spec, self.arch, list(candidates), _baseline_of(candidates))

    def note(self, level: Level, message: str) -> None:
        """Emit a note about this kernel × arch."""
        emit(Note(level, message, self.spec.name, self.arch))


@dataclass(frozen=True)
class _Run:
    """What every question of one resolve run shares."""

    manifest: Manifest
    cache: Cache
    options: ResolveOptions
    judges: _Judges
    lock: Lock | None
    """The verified lock (None: none)."""


def stale_checks(checks: int | None) -> bool:
    """Whether a verdict of the GPU checks of version ``checks`` (None: before versions were recorded) was made
    by older checks than this r1build's."""
    return (checks or 0) < CHECKS_VERSION


def _note_stale_checks(q: _Question, what: str, checks: int | None) -> None:
    emit(
        Note(
            "warning",
            f"the {what} winner was validated by version {checks or 0} of the GPU checks, these are "
            f"version {CHECKS_VERSION}: `r1build resolve --refresh` on a GPU of {q.arch} judges it again",
            q.spec.name,
            q.arch,
        )
    )


def _origin_of(spec: KernelSpec, entry: LockEntry) -> Origin:
    if entry.provenance == "generated":
        return Origin("generated", model=entry.model, round=entry.round, sample=entry.sample)
    kind: Literal["baseline", "file"] = "baseline" if entry.origin == spec.baseline else "file"
    return Origin(kind, path=entry.origin)


def _manifest_file_with_digest(manifest: Manifest, spec: KernelSpec, digest: str) -> str | None:
    for rel in [spec.baseline, *spec.candidates]:
        if rel is None:
            continue
        data = (manifest.root / rel).read_bytes()
        if digest_bytes(data) == digest:
            return data.decode()
    return None


class WinnerSource(NamedTuple):
    """A winner's source text, verified by its digest, and where it was read from."""

    text: str
    where: SourceFrom


def _source_for(manifest: Manifest, spec: KernelSpec, cache: Cache, digest: str) -> WinnerSource | None:
    text = cache.get_text(digest)
    if text is not None:
        return WinnerSource(text, "cache")
    return project_source(manifest, spec, digest)


def project_source(manifest: Manifest, spec: KernelSpec, digest: str) -> WinnerSource | None:
    """The source with ``digest`` from the project alone (the vendored folder, the manifest's own files), verified:
    what a build with no cache, say from an sdist, can find."""
    vendored = find_vendored(manifest.root / manifest.settings.vendor_dir, spec.name, digest)
    if vendored is not None:
        return WinnerSource(vendored, "vendored")
    own = _manifest_file_with_digest(manifest, spec, digest)
    if own is not None:
        return WinnerSource(own, "repo")
    return None


def _lock_entry(manifest: Manifest, r: Resolved, previous: LockEntry | None) -> LockEntry:
    if r.state in ("locked", "vendored") and previous is not None:
        return previous
    c = r.candidate
    return LockEntry(
        name=r.spec.name,
        arch=r.arch,
        key=r.key,
        winner=c.digest,
        source=c.source_digest,
        provenance=r.provenance,
        validation=r.validation,
        inputs=inputs_of(manifest, r.spec),
        origin=c.origin.path,
        defines=dict(c.defines),
        model=c.origin.model,
        round=c.origin.round,
        sample=c.origin.sample,
        time_us=r.time_us,
        gpu=r.gpu,
        checks=r.checks if r.validation == "validated" else None,
        toolchain=r.toolchain,
    )


def _may_generate(manifest: Manifest, options: ResolveOptions, cache: Cache) -> bool:
    """Whether this run may ask the LLM: not ``offline`` (the option, else ``R1BUILD_OFFLINE``), an endpoint
    configured, a cache that can keep what it costs, and the endpoint reachable at all (one TCP connection, so
    an endpoint that is down costs seconds and a warning, never a failed build)."""
    offline = options.offline if options.offline is not None else env_settings(options.environ).offline
    if offline:
        return False
    from .generate import endpoint_configured, resolve_endpoint

    generation = manifest.settings.generation
    if not endpoint_configured(generation, options.environ):
        return False
    if not GENERATE.installed():
        if not options.build:
            raise GENERATE.missing()  # generating is asked for: say which extra installs it (exit 2)
        # a build has the user's own sources to fall back on, as with an endpoint that is down
        emit(
            Note(
                "warning",
                f"the build opted in to generating, but openai is not installed in the build "
                f"environment ({GENERATE.install_hint()}; for an isolated build, `r1build[generate]` in "
                "[build-system] requires): not generating in this build",
            )
        )
        return False
    url = resolve_endpoint(generation, options.environ).display_url
    if cache.degraded is not None:
        emit(
            Note("warning", f"not asking the LLM at {url}: the cache cannot keep what it would cost ({cache.degraded})")
        )
        return False
    why = unreachable(url)
    if why is not None:
        emit(Note("warning", f"the LLM endpoint {url} is unreachable ({why}): not generating in this run"))
        return False
    return True


def _nvidia_driver() -> bool:
    """Whether an NVIDIA kernel driver is loaded (a GPU that cupy could use), without loading CUDA."""
    return Path("/proc/driver/nvidia/version").exists()


class _Judges:
    """The evaluators available in this run, made on first use."""

    def __init__(
        self, cache: Cache, use_gpu: bool | None, cluster: str | None = None, cluster_timeout_s: float = 10.0
    ) -> None:
        self.cache = cache
        self.use_gpu = use_gpu
        self.cluster = cluster
        """The Dask scheduler whose workers judge instead of this machine (None: this machine)."""
        self._cluster_timeout_s = cluster_timeout_s
        self._cluster: ClusterEvaluator | None = None
        self._gate: StaticGate | None = None
        self._gpu: GpuEvaluator | ClusterEvaluator | None = None
        self._gpu_archs: set[str] | None = None
        self._endpoint: bool | None = None
        self._profiler: Profiler | Literal[False] | None = None

    def endpoint(self, manifest: Manifest, options: ResolveOptions) -> bool:
        """Whether an LLM endpoint may be used (decided at the first miss: importing openai is slow)."""
        if self._endpoint is None:
            self._endpoint = _may_generate(manifest, options, self.cache)
        return self._endpoint

    def silence_endpoint(self) -> None:
        """No more requests in this run: the endpoint never answered (a build goes on without it)."""
        self._endpoint = False

    @property
    def gate(self) -> StaticGate:
        if self._gate is None:
            if self.cluster is not None:
                self._gate = self._on_cluster().gate()
            else:
                from .gate.static import StaticGate

                self._gate = StaticGate(self.cache)
        return self._gate

    def _on_cluster(self) -> ClusterEvaluator:
        """The cluster's evaluator, connected on first use (:class:`~r1build.errors.ClusterRefusedError` when it
        cannot be used)."""
        if self._cluster is None:
            from .cluster.session import ClusterEvaluator

            self._cluster = ClusterEvaluator(self.cluster or "", self.cache, timeout_s=self._cluster_timeout_s)
            self._gpu = self._cluster
        return self._cluster

    def gpu_for(self, arch: str) -> Evaluator | None:
        if self.use_gpu is False:
            return None
        if self.cluster is not None:
            cluster = self._on_cluster()
            self._gpu_archs = set(cluster.archs)
            return cluster if arch in self._gpu_archs else None
        if self._gpu_archs is None:
            self._gpu_archs = set()
            if not CUPY.installed():
                if self.use_gpu:  # measuring was asked for (a build's R1BUILD_EVALUATE=1)
                    raise CUPY.missing()
                if _nvidia_driver():
                    emit(
                        Note(
                            "info",
                            f"an NVIDIA driver is present but cupy is not installed, so nothing is "
                            f"measured on a GPU: {CUPY.install_hint()}",
                        )
                    )
                return None
            try:
                from .evaluate import GpuEvaluator, detect_gpus
            except ImportError:
                return None
            if detect_gpus():
                evaluator = GpuEvaluator(self.cache, gate=self.gate)
                self._gpu = evaluator
                self._gpu_archs = set(evaluator.archs)
        return self._gpu if arch in self._gpu_archs else None

    def profiler_for(self, arch: str) -> Profiler | None:
        """The Nsight Compute profiler for a search that the local GPU evaluator measures on ``arch``; None for
        any other judge, or without ncu (then one note says so)."""
        if self._gpu is None or self.gpu_for(arch) is not self._gpu:
            return None
        if self._profiler is None:
            from .profile import Profiler, find_ncu

            ncu = find_ncu()
            self._profiler = Profiler(ncu) if ncu else False
            if not ncu:
                emit(
                    Note(
                        "info",
                        "ncu (Nsight Compute) not found: finalists are not profiled (put ncu on PATH or "
                        "set R1BUILD_NCU)",
                    )
                )
        return self._profiler or None

    def gpu_archs(self) -> set[str]:
        """Archs a local GPU can measure (empty until a GPU was looked for, or without one)."""
        return set(self._gpu_archs or ())

    def unmeasured(self, arch: str) -> str:
        """Why no GPU judges ``arch`` in this run."""
        if self.use_gpu is False:
            return "GPU measuring is off (--no-gpu, or a build without R1BUILD_EVALUATE=1)"
        known = ", ".join(sorted(self.gpu_archs()))
        if self.cluster is not None:
            return (
                f"no worker of the cluster at {self.cluster} has a GPU of {arch} (GPU archs there: {known or 'none'})"
            )
        return f"no local GPU of this arch (GPUs here: {known})" if known else "no local GPU"

    def prepare(self, jobs: Sequence[Job]) -> None:
        """Start the CPU work (gate, library builds) of every GPU job ahead, so the GPU never waits for nvcc; and
        gate the jobs no GPU here can take, each kernel's candidates for all those archs at once (one nvcc per
        candidate for all its archs; the verdicts are cached for the gate-only resolution that follows)."""
        gpu_jobs = [job for job in jobs if self.gpu_for(job.arch) is not None]
        if gpu_jobs and self._gpu is not None:
            self._gpu.prepare(gpu_jobs)
        by_kernel: dict[str, list[Job]] = {}
        for job in jobs:
            if self.gpu_for(job.arch) is None:
                by_kernel.setdefault(job.spec.name, []).append(job)
        if not by_kernel or self.cache.degraded is not None:  # nothing to gate, or nowhere to keep the verdicts
            return
        gate = self.gate

        def judge(kernel_jobs: list[Job]) -> None:
            first = kernel_jobs[0]
            gate.judge(first.manifest, first.spec, [(job.arch, c) for job in kernel_jobs for c in job.candidates])

        from .gate.nvcc import COMPILE_SLOTS

        with ThreadPoolExecutor(max_workers=min(COMPILE_SLOTS, len(by_kernel))) as pool:
            for future in [
                pool.submit(contextvars.copy_context().run, judge, kernel_jobs) for kernel_jobs in by_kernel.values()
            ]:
                future.result()

    def close(self) -> None:
        """Stop GPU workers."""
        if self._gpu is not None:
            self._gpu.close()


def _perf_model(manifest: Manifest, evaluator: Evaluator | None) -> PerfModel | None:
    """The performance model a search on a GPU uses, when ``R1BUILD_PERF_MODEL`` asks for one."""
    settings = env_settings()
    if evaluator is None or settings.perf_model is None:
        return None
    from .perfmodel import PerfModel

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
    from .records import from_json
    from .transcript_doc import LINKS_NAMESPACE

    doc = cache.get_json(LINKS_NAMESPACE, key)
    if not isinstance(doc, dict) or not isinstance(doc.get("candidates"), list):
        return [], []
    refs = []
    for item in doc["candidates"]:
        try:
            refs.append(from_json(CandidateRef, item))
        except (TypeError, ValueError, KeyError):
            return [], []  # a record this version cannot read: generate again rather than guess
    found = []
    for ref in refs:
        source = cache.get_text(ref.source) if ref.origin.kind == "generated" else None
        if source is not None:
            candidate = Candidate(source, ref.origin, dict(ref.defines))
            if candidate.digest == ref.digest:
                found.append(candidate)
    transcripts = [str(t) for t in doc.get("transcripts", []) if isinstance(t, str)]
    return found, transcripts if found else []


def _baseline_of(seeds: Sequence[Candidate]) -> Candidate | None:
    """The untuned baseline among the manifest's own candidates (:func:`expand_variants` puts it first)."""
    return seeds[0] if seeds and seeds[0].origin.kind == "baseline" else None


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


def _decide(run: _Run, q: _Question, seeds: list[Candidate]) -> Decision | None:
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
        from .generate import search

        emit(Stage("generate", q.spec.name, q.arch))
        try:
            outcome = search(
                run.manifest,
                q.spec,
                q.arch,
                evaluator=evaluator or judges.gate,
                cache=cache,
                seeds=seeds,
                profiler=judges.profiler_for(q.arch),
                perf_model=_perf_model(run.manifest, evaluator),
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
    return _record_decision(q, cache, judged)


@dataclass(frozen=True)
class _Judged:
    """What the work on a miss judged: the candidates in preference order, their results, and the transcripts of
    the search that generated some of them."""

    candidates: Sequence[Candidate]
    results: Sequence[Result]
    transcripts: Sequence[str]


def _record_decision(q: _Question, cache: Cache, judged: _Judged) -> Decision:
    """The decision of what was judged, stored in the cache with every candidate's source."""
    candidates, results = judged.candidates, judged.results
    for c in candidates:
        cache.put_text(c.source)
    winner = select_winner(candidates, results)
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
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        checks=CHECKS_VERSION if on_gpu else None,
    )
    cache.put_decision(decision)
    return decision


def _from_decision(run: _Run, q: _Question, decision: Decision, state: Found) -> Resolved | Unresolved | None:
    """The decision's winner; :class:`Unresolved` when none of its candidates may win; None when the winner's
    source is gone from the cache."""
    winner = decision_winner(decision)
    if winner is None:
        return unresolved(q.spec.name, q.arch, decision.candidates, decision.results)
    if decision.winner is not None and winner.digest != decision.winner.digest:
        q.note(
            "warning",
            f"the cached decision's winner {decision.winner.digest[:12]} "
            f"({decision.validation(decision.winner)}) may not win: using {winner.digest[:12]} "
            f"({winner.provenance()}) from the same decision",
        )
    found = _source_for(run.manifest, q.spec, run.cache, winner.source)
    if found is None:
        q.note("warning", f"cached decision names source {winner.source[:12]} which is gone")
        return None
    result = decision.result_of(winner.digest)
    validation = decision.validation(winner)
    if validation == "validated" and state == "cached" and stale_checks(decision.checks):
        _note_stale_checks(q, "cached", decision.checks)
    return Resolved(
        spec=q.spec,
        arch=q.arch,
        key=q.key,
        candidate=Candidate(found.text, winner.origin, dict(winner.defines)),
        state=state,
        provenance=winner.provenance(),
        validation=validation,
        time_us=result.timing.median_us if result and result.timing else None,
        gpu=(result.device or decision.device) if result and result.timing else None,
        toolchain=decision.toolchain or None,
        checks=(decision.checks or 0) if validation == "validated" else None,
    )


def lock_refusal(entry: LockEntry, decision: Decision | None) -> str | None:
    """Why the lock's entry may not be used: its own fields (a pending or rejected winner, a generated one no GPU
    validated), or ``decision`` (the cached decision of its key) recording its winner as rejected; None when it
    may."""
    return unlockable(entry) or (rejection(decision, entry.winner) if decision is not None else None)


def _lookup(run: _Run, q: _Question) -> Resolved | Unresolved | None:
    """The winner from the lock or a cached decision, without any work (:class:`Unresolved` when the cached
    decision has none that may win); None on a miss."""
    manifest, cache, options = run.manifest, run.cache, run.options
    spec, arch = q.spec, q.arch
    entry = run.lock.entry(spec.name, arch) if run.lock else None
    if entry is not None and options.frozen:
        q = replace(q, key=entry.key)  # the lock as it is: its entry answers, whatever the manifest says now
    answers = entry is not None and entry.key == q.key and not options.refresh
    refusal = lock_refusal(entry, cache.get_decision(q.key)) if entry is not None and answers else None
    if entry is not None and refusal is not None:
        message = (
            f"{spec.name}/{arch}: the locked winner {entry.winner[:12]} ({entry.provenance}, "
            f"{entry.validation}) may not be used: {refusal}"
        )
        if options.locked or options.frozen:
            raise LockError(
                f"{message}. Run `r1build resolve` (on a GPU of {arch} for a generated kernel) to "
                "decide again and update the lock"
            )
        q.note("warning", f"{message}; deciding again")
    elif entry is not None and answers:
        found = _source_for(manifest, spec, cache, entry.source)
        if found is not None:
            return _from_lock(run, q, entry, found)
        if options.locked or options.frozen:
            raise ResolveError(
                f"{spec.name}/{arch}: the lock names source {entry.source[:16]}, which is neither in the cache "
                f"({cache.directory}) nor vendored in {manifest.settings.vendor_dir}; import a cache bundle "
                "(`r1build cache import`), commit vendored sources (`r1build vendor`), or resolve without --locked"
            )
    if options.frozen:
        raise LockError(
            f"{spec.name}/{arch}: --frozen and {lock_path(manifest).name} has no entry for it; "
            "run `r1build lock` (or resolve without --frozen)"
        )
    if not options.refresh:
        decision = cache.get_decision(q.key)
        if decision is not None:
            return _from_decision(run, q, decision, "cached")
    return None


def _from_lock(run: _Run, q: _Question, entry: LockEntry, found: WinnerSource) -> Resolved:
    """The lock entry's winner, its source ``found`` (verified by digest) in the cache or the project."""
    tc = toolchain().ident
    if entry.toolchain and entry.toolchain != tc:
        q.note(
            "warning",
            f"locked with nvcc {entry.toolchain}, gating and building with {tc} "
            f"({toolchain().nvcc}); `r1build resolve --refresh` re-evaluates",
        )
    if entry.validation == "validated" and stale_checks(entry.checks):
        _note_stale_checks(q, "locked", entry.checks)
    candidate = Candidate(found.text, _origin_of(q.spec, entry), dict(entry.defines))
    if candidate.digest != entry.winner:  # verified when read; checked again where it is used
        raise LockError(
            f"{lock_path(run.manifest)}: {q.spec.name}/{q.arch}: winner {entry.winner[:16]} is not the "
            f"digest of its source and defines ({candidate.digest[:16]})"
        )
    return Resolved(
        spec=q.spec,
        arch=q.arch,
        key=q.key,
        candidate=candidate,
        state="vendored" if found.where == "vendored" else "locked",
        provenance=entry.provenance,
        validation=entry.validation,
        time_us=entry.time_us,
        gpu=entry.gpu,
        toolchain=entry.toolchain,
        checks=entry.checks,
    )


def _work(run: _Run, q: _Question, seeds: list[Candidate], kept: Resolved | None = None) -> Resolved | Unresolved:
    """A miss (or a refresh): measure and/or generate; else what the lock or cache had (``kept``, for a refresh
    on a machine that cannot judge this arch); else the static gate on the user's own sources.

    One process at a time decides a key (:func:`~r1build.cache.claim.claim`): concurrent resolves of one
    manifest wait for the first and use the decision it stored instead of asking the model again."""
    with claim(run.cache.directory, q.key, what=f"{q.spec.name}/{q.arch}"):
        reused = None if run.options.refresh else run.cache.get_decision(q.key)  # stored while this one waited
        if reused is not None:
            found = _from_decision(run, q, reused, "cached")
            if found is not None:
                return found
        decision = _decide(run, q, seeds)
    if decision is not None:
        how: Found = "generated" if decision.transcripts else ("measured" if decision.measured else "gated")
        resolved = _from_decision(run, q, decision, how)
        if resolved is not None:
            return resolved
    elif kept is not None:
        q.note(
            "info",
            f"nothing here can judge this arch again (no GPU of it, no endpoint): keeping the {kept.state} winner",
        )
        return kept
    return _gated(run, q, seeds)


def _gated(run: _Run, q: _Question, seeds: list[Candidate]) -> Resolved | Unresolved:
    """No GPU of this arch and nothing to generate with: the static gate judges the user's own sources (baseline,
    ``candidates`` files, their tunable values); the first that passes in preference order wins, unvalidated.
    Nothing is cached as a decision (the gate's verdicts are), so a GPU measures on the next miss."""
    results = run.judges.gate.evaluate(q.job(run.manifest, seeds)) if seeds else []
    results = _with_known_rejections(seeds, results, run.cache.get_decision(q.key))
    winner = select_winner(seeds, results)
    if winner is None:
        return unresolved(q.spec.name, q.arch, [CandidateRef.of(c) for c in seeds], results)
    why = run.judges.unmeasured(q.arch)
    name = winner.origin.path or winner.origin.kind
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


def _gate_emitted(manifest: Manifest, judges: _Judges, entries: Sequence[Resolved]) -> list[Resolved]:
    """Every winner through the static gate for its arch, all kernels at once (compiles run in parallel; cached
    verdicts cost nothing). A winner that fails is a :class:`CompileError`: nothing broken is emitted."""
    gate = judges.gate
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(entries):
        groups.setdefault(r.spec.name, []).append(i)
    with ThreadPoolExecutor(max_workers=max(1, len(groups))) as pool:
        futures = {
            name: pool.submit(
                contextvars.copy_context().run,
                gate.judge,
                manifest,
                entries[idx[0]].spec,
                [(entries[i].arch, entries[i].candidate) for i in idx],
            )
            for name, idx in groups.items()
        }
        verdicts = {name: future.result() for name, future in futures.items()}
    out = list(entries)
    for name, idx in groups.items():
        for i, result in zip(idx, verdicts[name], strict=True):
            r = entries[i]
            if not result.ok:
                raise CompileError(
                    f"{r.spec.name}/{r.arch}: the {r.state} winner ({r.provenance}) fails the static gate: "
                    f"{result.status}\n{result.detail}"
                )
            emit(
                Stage(
                    "gate",
                    r.spec.name,
                    r.arch,
                    done=True,
                    detail=f"{result.gate.registers if result.gate else '?'} registers",
                )
            )
            out[i] = replace(r, gate=result)
    return out


def _read_lock(manifest: Manifest, options: ResolveOptions) -> Lock | None:
    """The verified lock; with ``recover_lock`` (and not ``locked``), what can be saved of a damaged one."""
    try:
        return load_lock(manifest)
    except LockError as damage:
        if not options.recover_lock or options.locked:
            raise
        return salvage_lock(manifest, damage).lock


@dataclass(frozen=True)
class _Looked:
    """One question and what the lock or the cache answered without any work (None: a miss)."""

    question: _Question
    hit: Resolved | Unresolved | None


def resolve(manifest: Manifest, cache: Cache, options: ResolveOptions | None = None) -> Resolution:
    """Resolve every kernel × arch; update the lock unless ``locked`` or told not to."""
    options = options or ResolveOptions()
    specs = [s for s in manifest.kernels if options.kernels is None or s.name in options.kernels]
    unknown = sorted(set(options.kernels or []) - {s.name for s in manifest.kernels})
    if unknown:
        raise UsageError(
            f"unknown kernel(s): {', '.join(unknown)} (declared: {', '.join(s.name for s in manifest.kernels)})"
        )
    if options.locked and options.refresh:
        raise UsageError(
            "--locked (or R1BUILD_LOCKED) uses only what the lock names and --refresh judges again: choose one"
        )
    if options.frozen and (options.refresh or options.recover_lock):
        raise UsageError(
            "--frozen (or R1BUILD_FROZEN) uses the lock as it is: it cannot be combined with --refresh or "
            "rebuild the lock"
        )
    require_supported_archs(manifest, toolchain(), options.archs, cache)
    path = lock_path(manifest)
    lock = _read_lock(manifest, options)
    if options.frozen and lock is None:
        raise LockError(f"--frozen uses {path} as it is, and there is none; run `r1build lock` first")
    plan = {s.name: [a for a in manifest.archs_of(s) if options.archs is None or a in options.archs] for s in specs}
    if options.locked:
        lock = require_fresh(manifest, lock, plan if (options.kernels or options.archs) else None)
    judges = _Judges(cache, options.use_gpu, options.cluster, manifest.settings.evaluation.connect_timeout_s)
    run = _Run(manifest, cache, options, judges, lock)
    try:
        looked: list[_Looked] = []
        for spec in specs:
            for arch in plan[spec.name]:
                q = _Question(spec, arch, decision_key(manifest, spec, arch))
                looked.append(_Looked(q, _lookup(run, q)))
        misses = [x.question for x in looked if x.hit is None]
        # the manifest's own candidates of each kernel with a miss, read once for the GPU's head start and the work
        seeds: dict[str, list[Candidate]] = {}
        if not options.locked and not options.frozen and misses:
            from .evaluate.variants import expand_variants

            seeds = {q.spec.name: expand_variants(manifest, q.spec) for q in misses}
            if not judges.endpoint(manifest, options):
                judges.prepare([q.job(manifest, seeds[q.spec.name]) for q in misses])
        outcomes: list[Resolved | Unresolved] = []
        for x in looked:
            if x.hit is not None:
                outcomes.append(x.hit)
                continue
            q = x.question
            if options.locked:  # _lookup answers every current entry or raises; nothing may be judged anew
                raise ResolveError(f"{q.spec.name}/{q.arch}: --locked and the lock has no usable entry for it")
            kept = None
            if options.refresh:  # what a refresh falls back to where nothing can judge this arch again
                old = _lookup(replace(run, options=replace(options, refresh=False)), q)
                kept = old if isinstance(old, Resolved) else None
            outcomes.append(_work(run, q, seeds.get(q.spec.name, []), kept))
        entries = _gate_emitted(manifest, judges, [o for o in outcomes if isinstance(o, Resolved)])
        failed = [o for o in outcomes if isinstance(o, Unresolved)]
    finally:
        judges.close()
    new_entries = {(e.name, e.arch): e for e in (lock.kernel if lock else [])}
    declared = {(s.name, a) for s in manifest.kernels for a in manifest.archs_of(s)}
    # where nothing may win, no entry is kept: the lock never names a rejected or pending winner
    dropped = {(u.kernel, u.arch) for u in failed}
    new_entries = {k: v for k, v in new_entries.items() if k in declared and k not in dropped}
    for r in entries:
        new_entries[(r.spec.name, r.arch)] = _lock_entry(manifest, r, new_entries.get((r.spec.name, r.arch)))
    new_lock = Lock(manifest=manifest.path.name, kernel=sorted(new_entries.values(), key=lambda e: (e.name, e.arch)))
    changed = False
    as_is = options.locked or options.frozen
    if options.write_lock and not as_is and (new_lock.kernel or path.exists()):
        changed = write_lock(path, new_lock)
    return Resolution(manifest, entries, new_lock if not as_is else (lock or new_lock), changed, failed)


def emit_resolution(resolution: Resolution, out_dir: Path) -> Path:
    """Write the generated directory for a resolution; returns the CMake file. :class:`NoWinnerError` when some
    kernel × arch has no winner: nothing is written then."""
    from .emit import Winner, write_generated

    resolution.require_complete()
    winners = [Winner(r.spec, r.arch, r.candidate) for r in resolution.entries]
    emitted = write_generated(out_dir, resolution.manifest, winners)
    return emitted.cmake_file


def prepare_build(
    project_dir: Path,
    *,
    locked: bool = False,
    frozen: bool = False,
    generate: bool = False,
    evaluate: bool = False,
    cache_dir: Path | None = None,
    out_dir: Path | None = None,
    archs: Sequence[str] | None = None,
    remote_cache: str | None = None,
) -> Path:
    """What the build backend calls before CMake: resolve and emit; returns the generated CMake file.

    A build is locked-or-offline unless the person building opts in: it never calls an LLM endpoint unless
    ``generate`` (``R1BUILD_GENERATE=1`` / ``r1build.generate``), never measures on a GPU unless ``evaluate``
    (``R1BUILD_EVALUATE=1``), and never writes the lock. ``locked``: fail unless the lock is current;
    ``frozen``: build what the lock names as it is (:attr:`ResolveOptions.frozen`). On a miss it takes a cached
    decision, else the first of the user's own sources that passes the gate (unvalidated); where none may win it
    raises :class:`~r1build.errors.NoWinnerError` and writes nothing.
    The cache only speeds a build up: a broken, read-only or missing one costs a warning (see
    :func:`~r1build.cache.open_usable`); so does the remote cache behind it (``remote_cache``, else
    ``R1BUILD_REMOTE_CACHE``, else the manifest's ``[cache] url``), which a build only reads unless
    ``R1BUILD_REMOTE_WRITE=1``.
    """
    from .cache import open_usable
    from .cache.remote import attach_remote

    manifest = load_manifest(find_manifest(project_dir), check_references=False)
    with attach_remote(open_usable(cache_dir), manifest, url=remote_cache) as cache:
        resolution = resolve(
            manifest,
            cache,
            ResolveOptions(
                archs=list(archs) if archs else None,
                offline=not generate,
                locked=locked,
                frozen=frozen,
                use_gpu=evaluate,
                write_lock=False,
                build=True,
            ),
        )
        if not generate and (resolution.unresolved or any(r.state == "gated" for r in resolution.entries)):
            from .generate import endpoint_configured

            if endpoint_configured(manifest.settings.generation, os.environ):
                emit(
                    Note(
                        "info",
                        "an LLM endpoint is configured, but a build never calls it unless the person "
                        "building opts in (R1BUILD_GENERATE=1 or --config-settings r1build.generate=1); "
                        "`r1build resolve` and `r1build vendor` make the lock and sources a build uses",
                    )
                )
        return emit_resolution(resolution, out_dir or project_dir / ".r1build" / "generated")
