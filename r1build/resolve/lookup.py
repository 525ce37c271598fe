"""Answers without work: a kernel × arch's winner from the lock (when its entry answers the current decision key
and may be used) or from a cached decision; None on a miss."""

from __future__ import annotations

import contextlib
from typing import Literal

from ..convert import replace
from ..errors import LockError, ResolveError
from ..events import Note, emit
from ..judge import CHECKS_VERSION
from ..lock import LockEntry, entry_problem, lock_path, manifest_problem, unlockable
from ..manifest import KernelSpec, Manifest
from ..records import Candidate, Decision, Found, Origin, Unresolved, WinnerFacts
from ..selection.rules import decision_problem, decision_winner, rejection, unresolved
from .model import Question, Resolved, Run
from .sources import WinnerSource, project_source, source_for, vendored_mismatch


def stale_checks(checks: int | None) -> bool:
    """Whether a verdict of the GPU checks of version ``checks`` (None: before versions were recorded) was made
    by older checks than this r1build's."""
    return (checks or 0) < CHECKS_VERSION


def _note_stale_checks(q: Question, what: str, checks: int | None) -> None:
    emit(
        Note(
            "warning",
            f"the {what} winner was validated by version {checks or 0} of the GPU checks, these are "
            f"version {CHECKS_VERSION}: `r1build resolve --refresh` on a GPU of {q.arch} judges it again",
            q.spec.name,
            q.arch,
        )
    )


def origin_of(spec: KernelSpec, entry: LockEntry) -> Origin:
    """Where a lock entry's winner comes from, as a candidate's :class:`~r1build.records.Origin`."""
    if entry.provenance == "generated":
        return Origin("generated", model=entry.model, round=entry.round, sample=entry.sample)
    kind: Literal["baseline", "file"] = "baseline" if entry.origin == spec.baseline else "file"
    return Origin(kind, path=entry.origin)


def decision_refusal(manifest: Manifest, spec: KernelSpec, arch: str, key: str, decision: Decision) -> str | None:
    """Why the winner of ``decision`` (the cached decision of ``key``, for ``spec`` on ``arch``) may not be used,
    or None. A cache, a bundle or a remote (signed by a trusted key or not) is trusted for what was decided, never
    for a decision that contradicts itself or the manifest: one of another kernel or arch, a winner whose digest
    is not that of its source and defines, one claiming to be validated on a GPU with no time or GPU recorded,
    or one that the lock written from it would refuse (a hand-written winner that is not the manifest's file of
    that name, defines the kernel does not declare, free text that is not one line). r1build never records such
    a decision itself; using it would put a lock in place that every later command refuses."""
    winner = decision_winner(decision)
    if winner is None:
        return None
    if decision.kernel != spec.name or decision.arch != arch:
        return f"it is a decision for {decision.kernel!r} on {decision.arch!r}, not {spec.name} on {arch}"
    problem = decision_problem(decision)
    if problem is not None:
        return problem
    entry = LockEntry.of_winner(
        manifest,
        spec,
        arch,
        key,
        winner,
        validation=decision.validation(winner),
        toolchain=decision.toolchain or None,
        facts=WinnerFacts.of(decision, winner),
    )
    field_problem = entry_problem(entry) or manifest_problem(manifest, spec, entry)
    if field_problem is not None:
        field, why = field_problem
        return f"its winner {winner.digest[:12]} does not verify ({field}: {why})"
    return None


def from_decision(run: Run, q: Question, decision: Decision, state: Found) -> Resolved | Unresolved | None:
    """The decision's winner; :class:`Unresolved` when none of its candidates may win; None when the winner's
    source is gone from the cache, or the decision may not be used (:func:`decision_refusal`, with a warning)."""
    winner = decision_winner(decision)
    if winner is None:
        return unresolved(q.spec.name, q.arch, decision.candidates, decision.results)
    refused = decision_refusal(run.manifest, q.spec, q.arch, q.key, decision)
    if refused is not None:
        what = "cached decision" if state == "cached" else "decision just made"
        message = f"the {what} {q.key[:16]} (cache {run.cache.directory}) is refused: {refused}; not using it"
        if message not in run.refused:  # the claimed retry of a miss reads it again
            run.refused.add(message)
            q.note("warning", message)
        return None
    if decision.winner is not None and winner.digest != decision.winner.digest:
        q.note(
            "warning",
            f"the cached decision's winner {decision.winner.digest[:12]} "
            f"({decision.validation(decision.winner)}) may not win: using {winner.digest[:12]} "
            f"({winner.provenance()}) from the same decision",
        )
    found = source_for(run.manifest, q.spec, run.cache, winner.source)
    if found is None:
        q.note("warning", f"cached decision names source {winner.source[:12]} which is gone")
        return None
    validation = decision.validation(winner)
    if validation == "validated" and state == "cached" and stale_checks(decision.checks):
        _note_stale_checks(q, "cached", decision.checks)
    facts = WinnerFacts.of(decision, winner)
    if facts.regime_note:  # never a plain win where one timing regime alone gives it
        q.note("warning", f"the {state} winner {facts.regime_note}")
    resolved = Resolved(
        spec=q.spec,
        arch=q.arch,
        key=q.key,
        candidate=Candidate(found.text, winner.origin, dict(winner.defines)),
        state=state,
        provenance=winner.provenance(),
        validation=validation,
        facts=facts,
        toolchain=decision.toolchain or None,
    )
    if validation == "unvalidated":
        _note_unvalidated(run, q, resolved, decision)
    return resolved


def _note_unvalidated(run: Run, q: Question, resolved: Resolved, decision: Decision) -> None:
    """The warning every path that chooses on the gate alone gives: why no GPU measured, what won, and the
    candidates a GPU has still to judge (generated ones that passed the gate stay pending, never chosen)."""
    name = resolved.candidate.origin.path or resolved.candidate.origin.kind
    why = run.judges.unmeasured(q.arch)
    message = f"{why}: the {resolved.provenance} {name} is chosen by the static gate alone, unvalidated"
    pending = sum(decision.validation(c) == "pending" for c in decision.candidates)
    if pending:
        message += (
            f"; {pending} generated candidate(s) that passed the gate stay pending until a GPU of {q.arch} judges them"
        )
    q.note("warning", message)


def lock_refusal(entry: LockEntry, decision: Decision | None) -> str | None:
    """Why the lock's entry may not be used: its own fields (a pending or rejected winner, a generated one no GPU
    validated), or ``decision`` (the cached decision of its key) recording its winner as rejected; None when it
    may."""
    return unlockable(entry) or (rejection(decision, entry.winner) if decision is not None else None)


def _entry_decision(run: Run, q: Question, *, remote: bool, wait: bool = True) -> Decision | None:
    """The cached decision of ``q.key`` when it is one of ``q``'s kernel × arch; None otherwise (``remote``: the
    remote cache asked on a local miss: for a validated entry, whose decision a GPU run recorded somewhere; an
    entry the gate alone chose has none, so a run the lock and the local cache settle asks the remote nothing;
    ``wait=False``: not held up by a remote not yet known to be up).
    It is what vouches for a lock entry of that key (its winner rejected, or validated for the remote), and a
    decision of
    another kernel × arch never does: with ``frozen`` the key is the lock's own, and one naming such a decision
    is refused (:class:`LockError`); a current key is the manifest's, so such a decision is the cache's fault,
    passed over here (:func:`decision_refusal` says so where it would be used)."""
    decision = run.cache.get_decision(q.key, remote=remote, wait=wait)
    if decision is None or (decision.kernel, decision.arch) == (q.spec.name, q.arch):
        return decision
    if run.options.frozen:
        raise LockError(
            f"{lock_path(run.manifest)}: {q.spec.name}/{q.arch}: key {q.key[:16]} names the cached decision of "
            f"{decision.kernel}/{decision.arch}, not of this entry; the entry cannot be used as it is, "
            "run `r1build lock`"
        )
    return None


def lookup(run: Run, q: Question) -> Resolved | Unresolved | None:
    """The winner from the lock or a cached decision, without any work (:class:`Unresolved` when the cached
    decision has none that may win); None on a miss."""
    manifest, cache, options = run.manifest, run.cache, run.options
    spec, arch = q.spec, q.arch
    entry = run.lock.entry(spec.name, arch) if run.lock else None
    if entry is not None and options.frozen:
        q = replace(q, key=entry.key)  # the lock as it is: its entry answers, whatever the manifest says now
    answers = entry is not None and entry.key == q.key and not options.refresh
    refusal = None
    if entry is not None and answers:  # an entry the gate alone chose has no decision: the remote is not asked
        vouching = _entry_decision(run, q, remote=entry.validation == "validated", wait=False)
        refusal = lock_refusal(entry, vouching)
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
        found = _lock_source(run, q, entry)
        if found is not None:
            return _from_lock(run, q, entry, found)
        missing = (
            f"the lock names source {entry.source[:16]}, which is neither in the cache ({cache.directory}) "
            f"nor vendored in {manifest.settings.vendor_dir}" + vendored_mismatch(manifest, spec, entry.source)
        )
        if options.locked or options.frozen:
            raise ResolveError(
                f"{spec.name}/{arch}: {missing}; import a cache bundle (`r1build cache import`), commit vendored "
                "sources (`r1build vendor`), or resolve without " + options.mode_words[1 if options.frozen else 0]
            )
        # the lock's winner is passed over: never silently (a build would ship another kernel than the locked one)
        q.note(
            "warning", f"{missing}: its {entry.provenance} winner {entry.winner[:12]} is passed over, deciding again"
        )
    if options.frozen:
        raise LockError(
            f"{spec.name}/{arch}: {options.mode_words[1]} and {lock_path(manifest).name} has no entry for it; "
            f"run `r1build lock` (or resolve without {options.mode_words[1]})"
        )
    if not options.refresh:
        decision = cache.get_decision(q.key)
        if decision is not None:
            return from_decision(run, q, decision, "cached")
    return None


def _lock_source(run: Run, q: Question, entry: LockEntry) -> WinnerSource | None:
    """The lock entry's winner source, verified: from the local cache or the project (vendored, the manifest's
    files); from the remote cache only when a trusted decision of its key (local, or signed on the remote)
    records that winner as validated. A lock (say from a pull request) names a digest, and anyone who may write
    to the remote can put bytes under it: the two together must not bring code that no trusted key vouched for."""
    cache = run.cache
    local = cache.peek(f"blob/{entry.source}")
    if local is not None:
        with contextlib.suppress(UnicodeDecodeError):
            return WinnerSource(local.decode(), "cache")
    own = project_source(run.manifest, q.spec, entry.source)
    if own is not None or cache.remote is None:
        return own
    decision = _entry_decision(run, q, remote=True)
    ref = next((c for c in decision.candidates if c.digest == entry.winner), None) if decision else None
    if decision is None or ref is None or decision.validation(ref) != "validated":
        q.note(
            "warning",
            f"the remote cache is not asked for the locked source {entry.source[:16]}: no trusted decision of "
            f"key {q.key[:16]} records winner {entry.winner[:12]} as validated (a lock alone cannot bring code "
            "from a remote)",
        )
        return None
    return source_for(run.manifest, q.spec, cache, entry.source)


def _from_lock(run: Run, q: Question, entry: LockEntry, found: WinnerSource) -> Resolved:
    """The lock entry's winner, its source ``found`` (verified by digest) in the cache or the project."""
    tc = run.judges.toolchain.ident
    if entry.toolchain and entry.toolchain != tc:
        q.note(
            "warning",
            f"locked with nvcc {entry.toolchain}, gating and building with {tc} "
            f"({run.judges.toolchain.nvcc}); `r1build resolve --refresh` re-evaluates",
        )
    if entry.validation == "validated" and stale_checks(entry.checks):
        _note_stale_checks(q, "locked", entry.checks)
    candidate = Candidate(found.text, origin_of(q.spec, entry), dict(entry.defines))
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
        facts=entry.facts,
        toolchain=entry.toolchain,
    )
