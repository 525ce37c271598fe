"""Records that flow between stages and into the cache: candidates, results, decisions.

They are plain frozen dataclasses that round-trip through JSON (:func:`to_json` / :func:`from_json`), so a
result computed on one machine is a cache entry on another. Failures are results too, and are cached.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

from .convert import ConversionProblem, asdict, convert, field, record
from .keys import canonical_json, digest_bytes, variant_digest

__all__ = [
    "BUILD_MODE_WORDS",
    "NOTE_LIMIT",
    "Candidate",
    "CandidateOutcome",
    "CandidateRef",
    "Decision",
    "Found",
    "GateReport",
    "JudgeStage",
    "KernelProfile",
    "Origin",
    "Profile",
    "Provenance",
    "ResolveOptions",
    "Result",
    "SourceFrom",
    "Standing",
    "Status",
    "Timing",
    "Unresolved",
    "Validation",
    "WinnerFacts",
    "from_json",
    "note_line",
    "provenance_of",
    "to_json",
    "validation_of",
]

Status = Literal["passed", "compile_error", "rejected", "crashed", "timed_out", "incorrect"]
"""Outcome of judging one candidate on one arch. ``passed`` without timing means the static gate passed and no
GPU measured it."""

JudgeStage = Literal["gate", "evaluate"]
"""The judge that produced a result: the static ``gate`` (nvcc, no GPU) or the GPU evaluator (``evaluate``)."""

OriginKind = Literal["baseline", "file", "generated"]
"""Where a candidate's source came from."""

Provenance = Literal["baseline", "file", "tuned", "generated"]
"""One word for a winner in the lock, ``status`` and tables: the ``baseline``, a hand-written ``file``, one of
their ``tuned`` value sets, or ``generated`` by a model."""

Validation = Literal["validated", "unvalidated", "pending", "rejected"]
"""How far a candidate was checked on one arch, from its result:

- ``validated``: passed every check of the GPU evaluator on a GPU of that arch;
- ``unvalidated``: passed the static gate, and no GPU of that arch judged it; only a source the user wrote
  (baseline, ``candidates`` files and their tunable values) may win like that;
- ``pending``: a generated candidate that passed the static gate and waits for a GPU of that arch; never a winner;
- ``rejected``: some check (gate or GPU) failed; never a winner.
"""

# -- where a winner stands: the words the resolver, ``status`` and the CLI share -------------------------------
Found = Literal["locked", "vendored", "cached", "measured", "generated", "gated"]
"""How a run found a kernel × arch's winner (``state`` in ``r1build resolve``): the lock's, its source from the
cache or the project's own files (``locked``) or the vendored folder (``vendored``); a ``cached`` decision's; or
work in this run: ``measured`` on a GPU, a search that ``generated`` candidates, or the static gate alone judging
the user's own sources (``gated``)."""

SourceFrom = Literal["cache", "vendored", "repo", "missing"]
"""Where a winner's source is read from: the ``cache``, the ``vendored`` folder, the project's own files
(``repo``: the baseline or a ``candidates`` file), or nowhere (``missing``)."""

Standing = Literal[
    "locked", "locked, source missing", "locked, refused", "cached", "no winner", "baseline only", "unresolved"
]
"""Where a kernel × arch stands before any work (``state`` in ``r1build status``): a lock entry of its current key
(whose source is found, or ``missing``, or which may not be used: ``refused``), else a ``cached`` decision with a
winner, one with ``no winner``, or nothing yet (``baseline only`` to fall back on, or ``unresolved``)."""

T = TypeVar("T")


NOTE_LIMIT = 600
"""The most characters of a note a winner's facts carry into the lock (``library-note``, ``torch-note``,
``regime-note``, ``demoted``): the lock's verification refuses longer ones."""


def note_line(text: str, limit: int = NOTE_LIMIT) -> str:
    """``text`` as a note the lock holds: one line of printable ASCII without backslashes (others become ``?``,
    runs of white space one space), at most ``limit`` characters (cut with ``...``). A note quotes errors, paths
    and a judge's reasons, any of which may hold what the lock's verification refuses."""
    line = "".join(ch if " " <= ch <= "~" and ch != "\\" else "?" for ch in " ".join(text.split()))
    return line if len(line) <= limit else line[: limit - 3] + "..."


def provenance_of(origin: Origin, defines: dict[str, int | str]) -> Provenance:
    """The provenance word of a candidate with ``origin`` and tunable values ``defines``."""
    if origin.kind == "generated":
        return "generated"
    return "tuned" if defines else origin.kind


def validation_of(kind: OriginKind, result: Result | None) -> Validation:
    """How far a candidate of origin ``kind`` is checked, given its result (None: not judged, so pending)."""
    if result is None:
        return "pending"
    if not result.ok:
        return "rejected"
    if result.stage == "evaluate":
        return "validated"
    return "pending" if kind == "generated" else "unvalidated"


BUILD_MODE_WORDS = ("r1build.locked (R1BUILD_LOCKED)", "r1build.frozen (R1BUILD_FROZEN)")
"""How a build's user asks for ``locked`` and ``frozen`` (:attr:`ResolveOptions.mode_words`)."""


@record(frozen=True, kw_only=True)
class ResolveOptions:
    """How to resolve: the one record of options that the build hook (:func:`r1build.build.options.split_settings`)
    and the command line both build and the resolver (:func:`r1build.resolve.resolve`) takes; each option has one
    name from the config setting or flag to where it is used."""

    archs: list[str] | None = None
    """Only these canonical archs (intersected with each kernel's); all targets when None."""
    kernels: list[str] | None = None
    """Only these kernels; all when None."""
    generate: bool | None = None
    """Ask the configured LLM endpoint for candidates on a miss (``r1build.generate``, ``R1BUILD_GENERATE``);
    False never does (``--offline``, ``r1build.offline``). None: when an endpoint is configured and
    ``R1BUILD_OFFLINE`` is not set in ``environ``. A build is False unless the person building opts in."""
    evaluate: bool | None = None
    """Measure on local GPUs on a miss (``r1build.evaluate``, ``R1BUILD_EVALUATE``); False never does
    (``--no-gpu``). None: when one is visible. A build is False unless asked."""
    locked: bool = False
    """Fail unless the lock is present and current; use only what it names (``--locked``, ``r1build.locked``)."""
    frozen: bool = False
    """Use the lock as it is, without requiring it to be current (``--frozen``, ``r1build.frozen``): every
    kernel × arch takes its entry, stale or not, each still verified against the manifest as a locked read
    verifies it (declared tunables and values, origin file and its digest, winner digest, a key naming no other
    kernel × arch's decision; :func:`~r1build.lock.load_lock`); one without an entry is an error, and nothing is
    generated, measured or written to the lock."""
    refresh: bool = False
    """Ignore cached decisions and the lock, and judge again."""
    mode_words: tuple[str, str] = ("--locked", "--frozen")
    """How the caller's user asks for ``locked`` and ``frozen``, for messages: the command line's flags, or a
    build's config settings and variables (:data:`BUILD_MODE_WORDS`)."""
    cache_dir: Path | None = None
    """The cache directory (``--cache-dir``, ``r1build.cache-dir``); None leaves it to the cache
    (``R1BUILD_CACHE_DIR`` or the platform default)."""
    remote_cache: str | None = None
    """The remote cache URL (``r1build.remote-cache``); None leaves it to ``R1BUILD_REMOTE_CACHE`` and the
    manifest."""
    write_lock: bool = True
    """Update the lock file when decisions change."""
    recover_lock: bool = False
    """A damaged lock (corrupt, truncated, conflicted, or with entries that do not verify) is rebuilt from the
    entries that still verify, the cache and the manifest, instead of being an error (``r1build lock``)."""
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ), repr=False, compare=False)
    """Environment for endpoint and key lookup (neither shown nor compared: it holds keys)."""
    build: bool = False
    """Resolving for a build (the PEP 517 backend): an endpoint that never answers is a warning, and the build
    goes on with the user's own sources, instead of an error."""
    cluster: str | None = None
    """Address of a Dask scheduler: GPU jobs run on its workers of each arch, gate compiles on its compile slots
    (:mod:`r1build.cluster`), instead of on local GPUs and cores. None: this machine only."""


@record(frozen=True)
class Origin:
    """Where a candidate came from."""

    kind: OriginKind
    """``baseline``, a hand-written ``file``, or ``generated`` by a model."""
    path: str | None = None
    """Manifest-relative path for ``baseline`` and ``file``."""
    model: str | None = None
    """Model name for ``generated``."""
    round: int | None = None
    """Generation round (0-based)."""
    sample: int | None = None
    """Sample index within the round."""
    transcript: str | None = None
    """Digest of the transcript blob the candidate was extracted from."""


@record(frozen=True)
class Candidate:
    """One translation unit under the candidate contract, with one value set of its tunable parameters."""

    source: str
    """CUDA C++ source text."""
    origin: Origin
    """Where it came from."""
    defines: dict[str, int | str] = field(default_factory=dict)
    """Tunable parameter values, passed as ``-DNAME=value``."""

    @property
    def source_digest(self) -> str:
        """sha256 of the source bytes."""
        return digest_bytes(self.source.encode())

    @property
    def digest(self) -> str:
        """Identity of this variant (source + defines)."""
        return variant_digest(self.source_digest, self.defines)

    def provenance(self) -> Provenance:
        """One word for the lock and status tables: baseline, file, tuned or generated."""
        return provenance_of(self.origin, self.defines)


@record(frozen=True)
class GateReport:
    """What ptxas reports for one compile (the largest kernel of the translation unit)."""

    registers: int = 0
    """Registers per thread."""
    spill_stores: int = 0
    """Bytes of spill stores."""
    spill_loads: int = 0
    """Bytes of spill loads."""
    stack_frame: int = 0
    """Bytes of stack frame."""
    shared_bytes: int = 0
    """Static shared memory in bytes."""
    compile_s: float = 0.0
    """Wall seconds the compile took."""
    device_bytes: int = 0
    """Bytes of device code this arch adds to a binary (its fatbin entries: machine code, as the gate compiles
    it; :func:`r1build.gate.fatbin.device_code_bytes`); 0 where unknown (a verdict cached before it was read)."""


@record(frozen=True, kw_only=True)
class Timing:
    """Timing of one candidate on the first (ranking) benchmark shape."""

    median_us: float
    """Median time of one call, in microseconds."""
    spread: float
    """Relative spread of the samples ((p90 - p10) / median)."""
    samples: int
    """Number of timed launches."""
    floor_us: float | None = None
    """The hardware floor for this shape on this GPU, in microseconds."""
    share_of_floor: float | None = None
    """floor / time (1.0 is at the floor)."""
    speedup_vs_baseline: float | None = None
    """Baseline time / this time."""
    speedup_vs_reference: float | None = None
    """Time of the library (the kernel's ``gpu-reference``, else the numpy reference run on cupy arrays) / this
    time: above 1 the winner is faster than what the user would call otherwise."""
    library_note: str | None = None
    """Why there is no ``speedup_vs_reference``: the library's timing failed (the reference does not run on cupy,
    and the error it raised there), so the figure is missing for a reason, not silently."""
    speedup_vs_torch: float | None = None
    """The torch bar's time (the faster of eager and ``torch.compile`` of the kernel's ``torch-reference``) / this
    time, where the kernel names a torch reference and torch ran in the GPU worker."""
    torch_mode: str | None = None
    """Which torch run set the bar: ``eager`` or ``compile``."""
    torch_note: str | None = None
    """Why a kernel naming a ``torch-reference`` has no ``speedup_vs_torch`` (torch missing in the GPU worker's
    environment, or the error the torch reference raised)."""
    shapes: dict[str, float] = field(default_factory=dict)
    """Median microseconds per benchmark shape, keyed by the shape written as ``n=1024,m=7``."""
    regimes: dict[str, float] = field(default_factory=dict)
    """Median microseconds of one call on the first benchmark shape per timing regime (``back-to-back``,
    ``idle-gaps``: :data:`~r1build.manifest.model.TimingRegime`), both for a search's finalists (empty for the
    others); ``median_us`` is the back-to-back time every candidate has."""
    regime_note: str | None = None
    """On a winner that wins in the ranking regime only: which candidate the other regime ranks first, and the
    two times (:mod:`r1build.selection.regimes`)."""


@record(frozen=True, kw_only=True)
class KernelProfile:
    """What Nsight Compute measured for one kernel launch of a candidate's call (:mod:`r1build.profile`)."""

    kernel: str
    """The ``__global__`` function's name."""
    duration_us: float | None = None
    """``gpu__time_duration.sum`` in microseconds."""
    achieved_occupancy_pct: float | None = None
    """Active warps as a share of the SM's maximum, in percent."""
    dram_pct: float | None = None
    """DRAM throughput as a share of its peak, in percent."""
    l2_pct: float | None = None
    """L2 throughput as a share of its peak, in percent."""
    sm_pct: float | None = None
    """SM (compute) throughput as a share of its peak, in percent."""
    shared_bank_conflicts: int | None = None
    """Shared-memory bank conflicts of loads and stores together."""
    stalls: dict[str, float] = field(default_factory=dict)
    """Warp stall reasons (``long_scoreboard``, ``barrier`` ...) in cycles per issued instruction."""


@record(frozen=True, kw_only=True)
class Profile:
    """Nsight Compute's findings for one call of a candidate at its first benchmark shape."""

    tool: str
    """The ncu version that measured it."""
    kernels: list[KernelProfile] = field(default_factory=list)
    """Every kernel the call launched, in launch order."""


@record(frozen=True, kw_only=True)
class Result:
    """The typed outcome of judging one candidate variant on one arch."""

    candidate: str
    """Variant digest of the candidate."""
    arch: str
    """Arch it was judged for."""
    status: Status
    """Outcome."""
    stage: JudgeStage = "gate"
    """The judge that produced it: the static gate (no GPU) or the GPU evaluator."""
    detail: str = ""
    """Why it failed (compiler errors, mismatch summary, sanitizer findings), trimmed."""
    gate: GateReport | None = None
    """ptxas report when it compiled."""
    timing: Timing | None = None
    """Timing when the GPU evaluator measured it."""
    device: str | None = None
    """GPU name when judged on a GPU."""
    toolchain: str = ""
    """nvcc identity that compiled it."""
    host: str | None = None
    """Host name of the cluster worker whose GPU judged it (``r1build resolve --cluster``); None when judged by
    this machine."""
    profile: Profile | None = None
    """Nsight Compute's findings, for a finalist profiled on a GPU with ncu (:mod:`r1build.profile`)."""

    @property
    def ok(self) -> bool:
        """Whether the candidate passed every check of its stage."""
        return self.status == "passed"


@record(frozen=True)
class CandidateRef:
    """A candidate as recorded in a decision: its identity and where its source blob is."""

    digest: str
    """Variant digest."""
    source: str
    """Digest of the source blob in the cache."""
    origin: Origin
    """Where it came from."""
    defines: dict[str, int | str] = field(default_factory=dict)
    """Tunable parameter values."""

    @classmethod
    def of(cls, candidate: Candidate) -> CandidateRef:
        return cls(candidate.digest, candidate.source_digest, candidate.origin, dict(candidate.defines))

    def provenance(self) -> Provenance:
        """One word for the lock and status tables: baseline, file, tuned or generated."""
        return provenance_of(self.origin, self.defines)


@record(frozen=True, kw_only=True)
class Decision:
    """What was decided for one decision key: the winner and everything that led to it."""

    key: str
    """Decision key."""
    kernel: str
    """Kernel name."""
    arch: str
    """Arch."""
    winner: CandidateRef | None
    """The chosen variant, or None when nothing passed."""
    candidates: list[CandidateRef] = field(default_factory=list)
    """Every candidate judged."""
    results: list[Result] = field(default_factory=list)
    """Every result, failures included."""
    transcripts: list[str] = field(default_factory=list)
    """Digests of transcript blobs from generation."""
    measured: bool = False
    """Whether the winner was chosen on GPU timings (else by the static gate and preference order)."""
    device: str | None = None
    """GPU the results were measured on."""
    toolchain: str = ""
    """nvcc identity."""
    created: str = ""
    """ISO timestamp."""
    checks: int | None = None
    """Version of the GPU evaluator's checks (:data:`r1build.judge.CHECKS_VERSION`) that produced the results
    judged on a GPU; None when no GPU judged any (a decision recorded before versions were kept counts as 0)."""

    @property
    def on_gpu(self) -> bool:
        """Whether a GPU judged any of its candidates (a GPU that rejected them all included)."""
        return any(r.stage == "evaluate" for r in self.results)

    def result_of(self, digest: str) -> Result | None:
        """The result of the candidate with variant digest ``digest``, if judged."""
        return next((r for r in self.results if r.candidate == digest), None)

    def winner_result(self) -> Result | None:
        """The winner's result, if any."""
        return None if self.winner is None else self.result_of(self.winner.digest)

    def validation(self, ref: CandidateRef) -> Validation:
        """How far candidate ``ref`` was checked in this decision."""
        return validation_of(ref.origin.kind, self.result_of(ref.digest))

    def blobs(self) -> list[str]:
        """Digests of the blobs this decision names (candidate sources and transcripts), sorted, each once."""
        refs = list(self.candidates)
        if self.winner is not None:
            refs.append(self.winner)
        digests = [ref.source for ref in refs]
        digests += [ref.origin.transcript for ref in refs if ref.origin.transcript]
        digests += self.transcripts
        return sorted(set(digests))


@record(frozen=True, kw_only=True)
class WinnerFacts:
    """What is known of a winner beyond its source: where and how fast it was measured, and against what. The
    resolver's :class:`~r1build.resolve.Resolved`, the lock's entries and ``r1build status``'s rows carry this one
    record (a lock entry keeps its fields flat in the file: :attr:`~r1build.lock.LockEntry.facts`)."""

    time_us: float | None = None
    """Measured median time on the first benchmark shape, when measured."""
    gpu: str | None = None
    """GPU it was measured on."""
    checks: int | None = None
    """Version of the GPU evaluator's checks that validated it (:data:`r1build.judge.CHECKS_VERSION`); None
    unless validated."""
    speedup_vs_library: float | None = None
    """The library's time over the winner's on the first benchmark shape (the kernel's ``gpu-reference``, else
    the numpy reference run on cupy arrays): above 1 the winner is faster than the library; when measured."""
    share_of_floor: float | None = None
    """The hardware floor's time over the winner's (1.0 is at the floor), when measured."""
    library_note: str | None = None
    """Why a measured winner has no ``speedup_vs_library``: the library could not be timed on cupy, and why."""
    speedup_vs_torch: float | None = None
    """The torch bar's time over the winner's (the faster of eager and ``torch.compile`` of the kernel's
    ``torch-reference``), where it names one and torch was timed."""
    torch_note: str | None = None
    """Why a measured winner of a kernel naming a ``torch-reference`` has no ``speedup_vs_torch``."""
    idle_gaps_us: float | None = None
    """Its median in the ``idle-gaps`` timing regime, where it was a finalist timed in both regimes."""
    regime_note: str | None = None
    """Why its win holds in the ranking timing regime only: which candidate the other regime ranks first."""

    @classmethod
    def of(cls, decision: Decision, winner: CandidateRef) -> WinnerFacts:
        """The facts of ``winner`` as ``decision`` records them (its result's timing and device, the decision's
        checks where the winner is validated)."""
        result = decision.result_of(winner.digest)
        timing = result.timing if result is not None else None
        checks = (decision.checks or 0) if decision.validation(winner) == "validated" else None
        if timing is None:
            return cls(checks=checks)
        return cls(
            time_us=timing.median_us,
            gpu=(result.device if result is not None else None) or decision.device,
            checks=checks,
            speedup_vs_library=timing.speedup_vs_reference,
            share_of_floor=timing.share_of_floor,
            library_note=timing.library_note,
            speedup_vs_torch=timing.speedup_vs_torch,
            torch_note=timing.torch_note,
            idle_gaps_us=timing.regimes.get("idle-gaps"),
            regime_note=timing.regime_note,
        )

    def measured(self) -> WinnerFacts:
        """These facts with the library, torch, floor and regime figures only where there is a time to compare."""
        if self.time_us is not None:
            return self
        return WinnerFacts(gpu=self.gpu, checks=self.checks)


@record(frozen=True)
class CandidateOutcome:
    """One candidate's standing in a kernel × arch that found no winner: a row of the table the CLI shows."""

    candidate: str
    """Variant digest."""
    provenance: Provenance
    """Where it came from."""
    origin: str
    """The manifest path, or the model, round and sample, of a generated candidate."""
    validation: Validation
    """``rejected`` or ``pending`` (a candidate that may win is never in this table)."""
    stage: JudgeStage | None
    """The judge that rejected it or let it through to wait (None: never judged)."""
    status: Status | None
    """Its result's status (None: never judged)."""
    reason: str
    """Why, in one line: the first error of the compiler, the check that failed, or what it waits for."""


@record(frozen=True)
class Unresolved:
    """A kernel × arch where no candidate may win: nothing is emitted or locked for it."""

    kernel: str
    """Kernel name."""
    arch: str
    """Canonical arch."""
    outcomes: list[CandidateOutcome]
    """Every candidate judged, in preference order."""
    fix: str
    """What the user can do about it."""


def to_json(record: Any) -> bytes:
    """Canonical JSON bytes of a record."""
    return canonical_json(asdict(record))


def from_json(cls: type[T], data: bytes | str | dict[str, Any]) -> T:
    """A record of type ``cls`` from JSON; :class:`ValueError` when it does not fit (JSON nested too deeply for
    the parser included: such bytes come from remotes, bundles and cache folders, and must be a bad record, not a
    :class:`RecursionError` that ends the run)."""
    try:
        obj = json.loads(data) if isinstance(data, (bytes, str)) else data
        return convert(cls, obj, kebab=False)  # type: ignore[no-any-return]
    except ConversionProblem as problem:
        where = ".".join(str(p) for p in problem.path)
        raise ValueError(f"{cls.__name__} record does not fit at {where or 'top'}: {problem.message}") from None
    except RecursionError:
        raise ValueError(f"{cls.__name__} record is nested too deeply") from None
