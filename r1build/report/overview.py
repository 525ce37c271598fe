"""What a project's records say, read once for every view of them.

``r1build status`` (its table and ``--json``), ``r1build report`` and ``r1build export-dataset`` all read the
lock, the cache's decisions and the searches' links and transcripts through :func:`project_records`: one
:class:`KernelRecords` per kernel × arch of the manifest. Nothing here writes, judges or asks a model.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..cache import Cache, parse_transcript, read_links, token_count
from ..convert import asdict, field, fields, record
from ..judge import CHECKS_VERSION
from ..keys import decision_key
from ..lock import LockEntry, find_vendored, load_lock
from ..manifest import KernelSpec, Manifest
from ..records import CandidateRef, Decision, Provenance, Result, SourceFrom, Standing, Validation, WinnerFacts
from ..resolve import decision_refusal, lock_refusal, stale_checks
from ..resolve.verdict import verdict_words
from ..selection.rules import decision_winner

if TYPE_CHECKING:
    from ..toolchain.nvcc import Toolchain

__all__ = ["KernelRecords", "SampleRecord", "SearchRecord", "StatusRow", "project_records"]


@record(frozen=True, kw_only=True)
class StatusRow:
    """One line of ``r1build status``."""

    kernel: str
    arch: str
    state: Standing
    """Where the kernel × arch stands (:data:`~r1build.records.Standing`)."""
    provenance: Provenance | None
    validation: Validation | None
    """``validated`` or ``unvalidated`` for a winner; None where there is none."""
    pending: int
    """Generated candidates of this kernel x arch's cached decision that wait for a GPU of the arch."""
    winner: str | None
    source: SourceFrom | None
    """Where the winner's source is read from (:data:`~r1build.records.SourceFrom`)."""
    note: str
    facts: WinnerFacts = field(default_factory=WinnerFacts)
    """The winner's time, GPU, checks (older than this r1build's: a note says so), library, torch, floor and
    timing-regime figures."""
    demoted: str | None = None
    """Why ``r1build audit`` demoted the locked winner (later GPU checks rejected it); the row is then ``locked,
    refused``."""
    device_bytes: int | None = None
    """Bytes of device code the winner adds for its arch (its cached gate report's), where known."""

    def as_json(self) -> dict[str, Any]:
        """The row as ``r1build status --json`` writes it: the facts among the other fields, flat."""
        row = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "facts"}
        return {**row, **asdict(self.facts)}


@record(frozen=True, kw_only=True)
class SampleRecord:
    """One sample of a search, from its transcript."""

    digest: str
    """The transcript blob's digest."""
    round: int
    """Round of the sample."""
    sample: int
    """Index of the sample in its round."""
    model: str
    """Model that was asked."""
    requests: int
    """HTTP attempts, retries included."""
    prompt_tokens: int
    """Prompt tokens of every attempt."""
    completion_tokens: int
    """Completion tokens of every attempt (reasoning included)."""
    reasoning_tokens: int
    """Reasoning tokens of the answer, where reported."""
    started: str
    """ISO time the sample started."""
    elapsed_s: float
    """Seconds the sample took."""
    finish_reason: str | None
    """The answer's finish reason; None when no answer arrived."""
    messages: list[dict[str, str]] = field(default_factory=list)
    """The messages sent (the prompt; reasoning is never among them)."""
    reasoning: str = ""
    """The answer's reasoning."""
    content: str | None = None
    """The answer's content, when one arrived."""


@record(frozen=True, kw_only=True)
class SearchRecord:
    """A search's link under its decision key and its samples."""

    stop_reason: str
    """Why the search ended (a :data:`~r1build.generate.budget.StopReason`, ``fatal`` or ``interrupted``)."""
    cause: str
    """The stop in words."""
    created: str
    """ISO time the link was written (the search's end)."""
    samples: list[SampleRecord]
    """Samples whose transcripts could be read, by round and sample."""
    missing: int = 0
    """Transcripts linked but missing or unreadable in the cache."""


@record(frozen=True, kw_only=True)
class KernelRecords:
    """Everything recorded for one kernel × arch of the manifest."""

    spec: KernelSpec
    """The kernel."""
    arch: str
    """Canonical arch."""
    key: str
    """The decision key the manifest asks now."""
    entry: LockEntry | None
    """The lock's entry for this kernel × arch (maybe answering an older key: :attr:`current`)."""
    decision: Decision | None
    """The cached decision of :attr:`key`."""
    search: SearchRecord | None
    """The search linked under :attr:`key`, when asked for and recorded."""
    status: StatusRow
    """The ``r1build status`` row."""

    @property
    def current(self) -> bool:
        """Whether the lock's entry answers the manifest's current question."""
        return self.entry is not None and self.entry.key == self.key

    def ref_of(self, digest: str) -> CandidateRef | None:
        """The decision's candidate with variant digest ``digest``."""
        return next((c for c in self.decision.candidates if c.digest == digest), None) if self.decision else None

    def baseline_result(self) -> Result | None:
        """The untuned baseline's result in the decision, if judged."""
        if self.decision is None:
            return None
        ref = next((c for c in self.decision.candidates if c.origin.kind == "baseline" and not c.defines), None)
        return self.decision.result_of(ref.digest) if ref else None

    def winner_result(self) -> Result | None:
        """The result of the winner (the lock's when current, else the decision's), if the decision holds it."""
        if self.decision is None:
            return None
        if self.current and self.entry is not None:
            return self.decision.result_of(self.entry.winner)
        winner = decision_winner(self.decision)
        return self.decision.result_of(winner.digest) if winner else None


def _notes(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def _pending_note(decision: Decision | None, arch: str) -> tuple[int, str]:
    pending = [c for c in decision.candidates if decision.validation(c) == "pending"] if decision else []
    if not pending:
        return 0, ""
    return len(pending), f"{len(pending)} generated pending a GPU of {arch} (`r1build resolve --refresh` there)"


def _checks_note(validation: Validation | None, checks: int | None) -> str:
    if validation != "validated" or not stale_checks(checks):
        return ""
    return f"judged by GPU checks v{checks or 0}, now v{CHECKS_VERSION}: `r1build resolve --refresh` re-judges"


def _status_row(
    manifest: Manifest,
    spec: KernelSpec,
    arch: str,
    key: str,
    cache: Cache,
    entry: LockEntry | None,
    decision: Decision | None,
    toolchain: Callable[[], Toolchain | None],
) -> StatusRow:
    pending, pending_note = _pending_note(decision, arch)
    if entry is not None and entry.key == key:
        return _locked_row(manifest, spec, arch, cache, entry, decision, pending, pending_note, toolchain)
    stale = "lock stale" if entry is not None else "not locked"
    refused = decision_refusal(manifest, spec, arch, key, decision) if decision is not None else None
    if refused is not None:  # as resolve sees it: no cached decision
        stale = _notes(stale, f"cached decision refused: {refused}")
        decision = None
    winner = decision_winner(decision) if decision is not None else None
    if decision is not None and winner is not None:
        return _cached_row(manifest, spec, arch, decision, winner, stale, pending, pending_note)
    if decision is not None:
        rejected = sum(decision.validation(c) == "rejected" for c in decision.candidates)
        note = _notes(stale, f"{rejected} rejected", pending_note)
        return _unmeasured_row(spec, arch, "no winner", stale=note, pending=pending)
    if spec.baseline is not None:
        return _unmeasured_row(spec, arch, "baseline only", stale=stale, provenance="baseline", source="repo")
    return _unmeasured_row(spec, arch, "unresolved", stale=stale)


def _locked_source(manifest: Manifest, spec: KernelSpec, cache: Cache, entry: LockEntry) -> SourceFrom:
    """Where a locked winner's source is read from: the cache, the vendor folder, the repo, or nowhere."""
    vendor_dir = manifest.root / manifest.settings.vendor_dir
    if cache.get_blob(entry.source) is not None:
        return "cache"
    if find_vendored(vendor_dir, spec.name, entry.source) is not None:
        return "vendored"
    return "repo" if entry.provenance in ("baseline", "file", "tuned") else "missing"


def _locked_row(
    manifest: Manifest,
    spec: KernelSpec,
    arch: str,
    cache: Cache,
    entry: LockEntry,
    decision: Decision | None,
    pending: int,
    pending_note: str,
    toolchain: Callable[[], Toolchain | None],
) -> StatusRow:
    """The row of a kernel x arch whose lock entry matches its key (``toolchain``: the nvcc found here, asked only
    for a winner the gate alone chose)."""
    where = _locked_source(manifest, spec, cache, entry)
    refused = lock_refusal(entry, decision)
    state: Standing = "locked" if where != "missing" else "locked, source missing"
    if refused:
        state = "locked, refused"
    facts = entry.facts
    return StatusRow(
        kernel=spec.name,
        arch=arch,
        state=state,
        provenance=entry.provenance,
        validation=entry.validation,
        pending=pending,
        winner=entry.winner[:12],
        source=where,
        note=_notes(
            refused or "",
            _checks_note(entry.validation, entry.checks),
            pending_note,
            *_facts_notes(manifest, spec, facts),
        ),
        facts=facts,
        demoted=entry.demoted,
        device_bytes=_device_bytes(decision, entry.winner)
        or (_gated_bytes(manifest, spec, cache, entry, toolchain()) if entry.validation != "validated" else None),
    )


def _cached_row(
    manifest: Manifest,
    spec: KernelSpec,
    arch: str,
    decision: Decision,
    winner: CandidateRef,
    stale: str,
    pending: int,
    pending_note: str,
) -> StatusRow:
    """The row of a kernel x arch not locked (or locked stale) whose cached decision has a winner."""
    facts = WinnerFacts.of(decision, winner)
    validation = decision.validation(winner)
    return StatusRow(
        kernel=spec.name,
        arch=arch,
        state="cached",
        provenance=winner.provenance(),
        validation=validation,
        pending=pending,
        winner=winner.digest[:12],
        source="cache",
        note=_notes(stale, _checks_note(validation, facts.checks), pending_note, *_facts_notes(manifest, spec, facts)),
        facts=facts,
        device_bytes=_device_bytes(decision, winner.digest),
    )


def _device_bytes(decision: Decision | None, winner: str) -> int | None:
    """The device code the winner adds for its arch, as its cached verdict's gate report says; None unknown."""
    result = decision.result_of(winner) if decision is not None else None
    report = result.gate if result is not None else None
    return report.device_bytes if report is not None and report.device_bytes else None


def _toolchain_here() -> Toolchain | None:
    """The toolchain of the nvcc found here; None without one."""
    from ..errors import ToolchainError  # here: only a lock entry with no decision asks for the toolchain
    from ..toolchain.nvcc import toolchain

    try:
        return toolchain()
    except ToolchainError:
        return None


def _gated_bytes(
    manifest: Manifest, spec: KernelSpec, cache: Cache, entry: LockEntry, tc: Toolchain | None
) -> int | None:
    """The device code a locked winner the gate alone chose (no decision records it: not ``validated``) adds for
    its arch, as its cached verdict under the toolchain ``tc`` says; None unknown (no nvcc here, no verdict
    cached)."""
    from ..gate import gate_key_of

    if tc is None:
        return None
    result = cache.get_gate(gate_key_of(manifest, spec, entry.arch, entry.source, dict(entry.defines), tc))
    report = result.gate if result is not None else None
    return report.device_bytes if report is not None and report.device_bytes else None


def _facts_notes(manifest: Manifest, spec: KernelSpec, facts: WinnerFacts) -> tuple[str, str, str]:
    """What ``status`` says of a winner's facts: against the library, against torch (where the kernel names a
    ``torch-reference``), and of its timing regime."""
    if facts.time_us is None:
        return "", "", facts.regime_note or ""
    library = _bar_note(manifest, spec, "library", facts.speedup_vs_library, facts.library_note)
    torch = (
        ""
        if spec.torch_reference is None
        else _bar_note(manifest, spec, "torch", facts.speedup_vs_torch, facts.torch_note)
    )
    return library, torch, facts.regime_note or ""


def _unmeasured_row(
    spec: KernelSpec,
    arch: str,
    state: Standing,
    *,
    stale: str,
    provenance: Provenance | None = None,
    source: SourceFrom | None = None,
    pending: int = 0,
) -> StatusRow:
    """The row of a kernel x arch with no winner to show: no winner among its candidates, baseline only, or
    unresolved (``stale`` is its whole note)."""
    return StatusRow(
        kernel=spec.name,
        arch=arch,
        state=state,
        provenance=provenance,
        validation=None,
        pending=pending,
        winner=None,
        source=source,
        note=stale,
    )


def _bar_note(manifest: Manifest, spec: KernelSpec, bar: str, speedup: float | None, why: str | None) -> str:
    """What ``status`` says of a measured winner against ``bar`` (``library`` or ``torch``): slower than it, short
    of the manifest's ``must-beat`` margin (resolve fails it), or why the bar has no time; nothing for a winner that
    beats it."""
    must = manifest.must_beat_library(spec) if bar == "library" else manifest.must_beat_torch(spec)
    if must and (speedup is None or speedup < 1.0 + manifest.margin_of(spec)):
        return f"fails must-beat {bar} (margin {manifest.margin_of(spec):g}): {verdict_words(speedup, why, bar)}"
    if speedup is None:
        return verdict_words(None, why, bar) if why else ""
    name = "the library" if bar == "library" else bar
    return f"slower than {name} ({speedup:.2f}x)" if speedup < 1.0 else ""


def _int(value: Any) -> int:
    return token_count(value) or 0


def _sample(digest: str, text: str | None, *, full: bool) -> SampleRecord | None:
    """A sample from a transcript's text; None when it is missing or not a transcript."""
    parsed = parse_transcript(text)
    if parsed is None:
        return None
    doc, answer = parsed
    attempts = [a for a in doc.get("attempts") or [] if isinstance(a, dict)]
    request: dict[str, Any] = doc["request"] if isinstance(doc.get("request"), dict) else {}
    messages = (
        [
            {"role": str(m.get("role")), "content": str(m.get("content"))}
            for m in request.get("messages") or []
            if isinstance(m, dict)
        ]
        if full
        else []
    )
    try:
        return SampleRecord(
            digest=digest,
            round=int(doc["round"]),
            sample=int(doc["sample"]),
            model=str(doc.get("model") or ""),
            requests=len(attempts),
            prompt_tokens=sum(_int(a.get("prompt_tokens")) for a in attempts),
            completion_tokens=sum(_int(a.get("completion_tokens")) for a in attempts),
            reasoning_tokens=_int(answer.get("reasoning_tokens")) if answer else 0,
            started=str(doc.get("started") or ""),
            elapsed_s=float(doc.get("elapsed_s") or 0.0),
            finish_reason=str(answer["finish_reason"]) if answer and answer.get("finish_reason") else None,
            messages=messages,
            reasoning=str(answer.get("reasoning") or "") if answer and full else "",
            content=str(answer["content"]) if answer and full and answer.get("content") is not None else None,
        )
    except (KeyError, TypeError, ValueError, OverflowError):  # OverflowError: a round of 1e400
        return None


def _search(cache: Cache, key: str, decision: Decision | None, *, full: bool) -> SearchRecord | None:
    link = read_links(cache, key)
    digests = (link.transcripts if link is not None else []) or (decision.transcripts if decision else [])
    if link is None and not digests:
        return None
    samples = []
    missing = 0
    for digest in digests:
        sample = _sample(digest, cache.get_text(digest), full=full)
        if sample is None:
            missing += 1
        else:
            samples.append(sample)
    samples.sort(key=lambda s: (s.round, s.sample))
    return SearchRecord(
        stop_reason=(link.stop_reason if link is not None else None) or "unknown",
        cause=link.cause if link is not None else "",
        created=(link.created if link is not None else "") or (decision.created if decision else ""),
        samples=samples,
        missing=missing,
    )


def project_records(
    manifest: Manifest, cache: Cache, *, searches: bool = False, transcripts: bool = False
) -> list[KernelRecords]:
    """Every kernel × arch of ``manifest`` with what the lock and ``cache`` record of it, in manifest order.

    ``searches``: also read each search's link and its transcripts' spend; ``transcripts``: also keep each
    sample's messages, reasoning and answer (for a dataset).
    """
    lock = load_lock(manifest)
    toolchain = functools.cache(_toolchain_here)  # looked up once a run, and only where a row needs it
    out = []
    for spec in manifest.kernels:
        for arch in manifest.archs_of(spec):
            key = decision_key(manifest, spec, arch)
            entry = lock.entry(spec.name, arch) if lock else None
            decision = cache.get_decision(key)
            out.append(
                KernelRecords(
                    spec=spec,
                    arch=arch,
                    key=key,
                    entry=entry,
                    decision=decision,
                    search=_search(cache, key, decision, full=transcripts) if searches or transcripts else None,
                    status=_status_row(manifest, spec, arch, key, cache, entry, decision, toolchain),
                )
            )
    return out
