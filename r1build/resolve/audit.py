"""``r1build audit``: every locked winner judged again on a GPU by this r1build's GPU checks
(:data:`~r1build.judge.CHECKS_VERSION`), through the evaluator resolve uses (:class:`~.judges.Judges`). A winner
the current checks reject is demoted: the lock entry keeps the reason (``demoted``), ``status`` shows it, a
``--locked`` build fails on it, and the cached decision of its key records the rejection, so that ``r1build
resolve`` decides again instead of taking the same winner. A winner that passes has its lock entry's ``checks``
brought to the current version. Never a pass without a GPU: where none can judge, nothing is audited."""

from __future__ import annotations

from typing import Literal

from ..cache import Cache
from ..convert import record, replace
from ..errors import ConfigError, LockError
from ..events import Note, Stage, emit
from ..judge import CHECKS_VERSION, Evaluator, Job
from ..keys import decision_key
from ..lock import Lock, LockEntry, load_lock, lock_path, write_lock
from ..manifest import KernelSpec, Manifest
from ..records import Candidate, Result, note_line
from .judges import Judges
from .lookup import origin_of
from .model import Question
from .sources import source_for

__all__ = ["Audit", "AuditRow", "audit"]

Verdict = Literal["passed", "demoted", "not audited"]


@record(frozen=True, kw_only=True)
class AuditRow:
    """One locked winner and what the audit made of it."""

    kernel: str
    arch: str
    winner: str
    """The winner's digest (12 characters)."""
    checks: int | None
    """The GPU checks version that validated it before the audit (None: no GPU had)."""
    verdict: Verdict
    reason: str = ""
    """Why it was demoted (the current checks' rejection) or not audited; empty when it passed."""
    time_us: float | None = None
    """Its median time measured by the audit, when it passed."""
    gpu: str | None = None
    """The GPU that judged it."""


@record(frozen=True)
class Audit:
    """What ``r1build audit`` found, one row per lock entry of the manifest's kernels × archs."""

    rows: list[AuditRow]
    lock_changed: bool

    @property
    def demoted(self) -> list[AuditRow]:
        """The rows demoted by this audit or an earlier one."""
        return [r for r in self.rows if r.verdict == "demoted"]


def audit(manifest: Manifest, cache: Cache, judges: Judges) -> Audit:
    """Judge every current lock entry again on a GPU of its arch (see the module); :class:`ConfigError` when no
    GPU here judges any of their archs (nothing is audited), :class:`LockError` without a lock."""
    lock = load_lock(manifest)
    if lock is None:
        raise LockError(f"{lock_path(manifest)}: no lock to audit; run `r1build resolve` first")
    rows: dict[tuple[str, str], AuditRow] = {}
    jobs: dict[tuple[str, str], tuple[LockEntry, Evaluator, Job]] = {}
    for entry in lock.kernel:
        row, planned = _plan(manifest, cache, judges, entry)
        if row is not None:
            rows[entry.name, entry.arch] = row
        if planned is not None:
            jobs[entry.name, entry.arch] = (entry, *planned)
    archs = sorted({r.arch for r in rows.values()} | {arch for _, arch in jobs})
    if archs and all(judges.gpu_for(arch) is None for arch in archs):
        raise ConfigError(
            f"r1build audit judges the locked winners again on a GPU, and none here can "
            f"({judges.unmeasured(archs[0])}; archs locked: {', '.join(archs)}): nothing was audited. Run it where "
            "a GPU of those archs is (cupy installed: `pip install r1build[cuda13]`), or on a cluster's GPU workers "
            "(`--cluster`)"
        )
    judges.prepare([job for _, _, job in jobs.values()])
    entries = {(e.name, e.arch): e for e in lock.kernel}
    for where, (entry, evaluator, job) in jobs.items():
        emit(Stage("evaluate", entry.name, entry.arch))
        result = evaluator.evaluate(job)[0]
        rows[where], entries[where] = _judged(cache, entry, result)
    new = Lock(version=lock.version, manifest=lock.manifest, kernel=list(entries.values()))
    changed = new != lock and write_lock(lock_path(manifest), new)
    return Audit([rows[k] for k in sorted(rows)], changed)


def _plan(
    manifest: Manifest, cache: Cache, judges: Judges, entry: LockEntry
) -> tuple[AuditRow | None, tuple[Evaluator, Job] | None]:
    """The row of an entry that is not judged (and why), or the evaluator and job that judge it."""
    spec = next((s for s in manifest.kernels if s.name == entry.name), None)
    if spec is None or entry.arch not in manifest.archs_of(spec):
        return None, None  # not the manifest's: `r1build lock` drops it
    base = AuditRow(
        kernel=entry.name, arch=entry.arch, winner=entry.winner[:12], checks=entry.checks, verdict="not audited"
    )
    key = decision_key(manifest, spec, entry.arch)
    if entry.demoted is not None:
        return replace(base, verdict="demoted", reason=entry.demoted), None
    if entry.key != key:
        return replace(base, reason="the entry is stale (`r1build resolve` decides it again)"), None
    evaluator = judges.gpu_for(entry.arch)
    if evaluator is None:
        return replace(base, reason=judges.unmeasured(entry.arch)), None
    candidate = _candidate(manifest, spec, cache, entry)
    if candidate is None:
        why = f"its source {entry.source[:16]} is neither in the cache nor in the project"
        return replace(base, reason=why), None
    return None, (evaluator, Question(spec, entry.arch, key).job(manifest, [candidate]))


def _candidate(manifest: Manifest, spec: KernelSpec, cache: Cache, entry: LockEntry) -> Candidate | None:
    found = source_for(manifest, spec, cache, entry.source)
    if found is None:
        return None
    candidate = Candidate(found.text, origin_of(spec, entry), dict(entry.defines))
    return candidate if candidate.digest == entry.winner else None


def demotion_reason(result: Result) -> str:
    """One line: the checks version and GPU that rejected the winner, and the judge's first line of why."""
    lines = [line.strip() for line in result.detail.splitlines() if line.strip()]
    why = f"{result.status}: {lines[0]}" if lines else result.status
    text = f"GPU checks v{CHECKS_VERSION} on {result.device or 'the GPU'} rejected it ({why})"
    return note_line(text)


def _judged(cache: Cache, entry: LockEntry, result: Result) -> tuple[AuditRow, LockEntry]:
    """The row and the lock entry after the current checks judged ``entry``'s winner (``result``)."""
    row = AuditRow(kernel=entry.name, arch=entry.arch, winner=entry.winner[:12], checks=entry.checks, verdict="passed")
    if result.ok:
        timing = result.timing
        checks = CHECKS_VERSION if entry.validation == "validated" else entry.checks
        return replace(row, time_us=timing.median_us if timing else None, gpu=result.device), replace(
            entry, checks=checks
        )
    reason = demotion_reason(result)
    emit(Note("warning", f"demoted: {reason}", entry.name, entry.arch))
    decision = cache.get_decision(entry.key, remote=False)
    if decision is not None and decision.result_of(entry.winner) is not None:
        results = [result if r.candidate == entry.winner else r for r in decision.results]
        cache.put_decision(replace(decision, results=results))
    return replace(row, verdict="demoted", reason=reason, gpu=result.device), replace(entry, demoted=reason)
