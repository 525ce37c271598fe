"""One resolve run: every kernel × arch of the manifest looked up, the misses worked out (the GPU's CPU work
started ahead), every winner through the static gate, and the lock updated."""

from __future__ import annotations

import time
from collections.abc import Sequence

from ..cache import Cache
from ..convert import record, replace
from ..errors import CompileError, LockError, ResolveError, UsageError
from ..events import Logger, Stage, emit
from ..keys import decision_key
from ..lock import Lock, LockEntry, load_lock, lock_path, require_fresh, write_lock
from ..manifest import KernelSpec, Manifest
from ..records import Candidate, CandidateRef, ResolveOptions, Unresolved
from ..toolchain.archs import require_supported_archs
from ..toolchain.nvcc import toolchain
from .judges import Judges
from .lookup import lookup
from .model import Question, Resolution, Resolved, Run
from .verdict import library_verdict
from .work import work


def _lock_entry(manifest: Manifest, r: Resolved, previous: LockEntry | None) -> LockEntry:
    if r.state in ("locked", "vendored") and previous is not None:
        return previous
    return LockEntry.of_winner(
        manifest,
        r.spec,
        r.arch,
        r.key,
        CandidateRef.of(r.candidate),
        validation=r.validation,
        toolchain=r.toolchain,
        facts=r.facts,
    )


def _gate_emitted(manifest: Manifest, judges: Judges, entries: Sequence[Resolved]) -> list[Resolved]:
    """Every winner through the static gate for its arch, all kernels at once (compiles run in parallel; cached
    verdicts cost nothing). A winner that fails is a :class:`CompileError`: nothing broken is emitted."""
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(entries):
        groups.setdefault(r.spec.name, []).append(i)
    pairs = {name: [(entries[i].arch, entries[i].candidate) for i in idx] for name, idx in groups.items()}
    verdicts = {  # those the cache holds, read here (no thread, no connection of its own)
        name: found
        for name, idx in groups.items()
        if (found := judges.cached_gate_verdicts(manifest, entries[idx[0]].spec, pairs[name])) is not None
    }
    left = [name for name in groups if name not in verdicts]
    verdicts |= judges.fresh_gate_verdicts(
        manifest, {name: (entries[groups[name][0]].spec, pairs[name]) for name in left}
    )
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
        return load_lock(manifest, frozen=options.frozen)
    except LockError as damage:
        if not options.recover_lock or options.locked:
            raise
        from ..lock import salvage_lock  # here: only a damaged lock needs it

        return salvage_lock(manifest, damage).lock


@record(frozen=True)
class _Looked:
    """One question and what the lock or the cache answered without any work (None: a miss)."""

    question: Question
    hit: Resolved | Unresolved | None


log = Logger("r1build.resolve")


class _Phases:
    """Debug log lines (``-vv``) of how long each phase of a resolve took and when it ended: where the time of a
    resolve goes beside the work itself (issue 11)."""

    def __init__(self) -> None:
        self.start = self.last = time.perf_counter()

    def done(self, what: str) -> None:
        now = time.perf_counter()
        log.debug("resolve: %s in %.3f s (%.3f s in, clock %.3f)", what, now - self.last, now - self.start, time.time())
        self.last = now


def _work_order(looked: Sequence[_Looked], judges: Judges, options: ResolveOptions) -> list[int]:
    """The misses of ``looked`` in the order they are worked: those a GPU judges first, then the gate-only ones,
    each group in manifest order. The gate-only arch's verdicts of a kernel with a GPU job are compiled along with
    that job's (:meth:`Judges.prepare`): asked for after it, they come from the cache, not from an nvcc of their
    own. With ``locked`` or ``frozen`` (where the first miss is an error), manifest order."""
    misses = [i for i, x in enumerate(looked) if x.hit is None]
    if options.locked or options.frozen:
        return misses
    on_gpu = [i for i in misses if judges.gpu_for(looked[i].question.arch) is not None]
    return on_gpu + [i for i in misses if i not in on_gpu]


def resolve(manifest: Manifest, cache: Cache, options: ResolveOptions | None = None) -> Resolution:
    """Resolve every kernel × arch; update the lock unless ``locked`` or told not to."""
    options = options or ResolveOptions()
    phases = _Phases()
    specs = [s for s in manifest.kernels if options.kernels is None or s.name in options.kernels]
    _refuse_options(manifest, options)
    require_supported_archs(manifest, toolchain(), options.archs, cache)
    path = lock_path(manifest)
    lock = _read_lock(manifest, options)
    if options.frozen and lock is None:
        raise LockError(f"{options.mode_words[1]} uses {path} as it is, and there is none; run `r1build lock` first")
    plan = _plan(manifest, specs, options)
    if options.locked:
        lock = require_fresh(
            manifest, lock, plan if (options.kernels or options.archs) else None, said=options.mode_words[0]
        )
    phases.done("toolchain and arch check, lock read")
    judges = Judges(cache, options.evaluate, options.cluster, manifest.settings.evaluation.connect_timeout_s)
    try:
        entries, failed = _judged(Run(manifest, cache, options, judges, lock), specs, plan, phases)
    finally:
        judges.close()
        phases.done("judges closed")
    new_lock = _merged(manifest, lock, entries, failed)
    changed = False
    as_is = options.locked or options.frozen
    if options.write_lock and not as_is and (new_lock.kernel or path.exists()):
        changed = write_lock(path, new_lock)
        phases.done("lock written")
    return Resolution(manifest, entries, new_lock if not as_is else (lock or new_lock), changed, failed)


def _refuse_options(manifest: Manifest, options: ResolveOptions) -> None:
    """A :class:`UsageError` for kernels the manifest does not declare and for modes that exclude each other."""
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


def _plan(manifest: Manifest, specs: list[KernelSpec], options: ResolveOptions) -> dict[str, list[str]]:
    """The archs to resolve for each kernel; a :class:`UsageError` for an ``--arch`` no kernel targets."""
    plan = {s.name: [a for a in manifest.archs_of(s) if options.archs is None or a in options.archs] for s in specs}
    targeted = {a for s in specs for a in manifest.archs_of(s)}
    untargeted = [a for a in options.archs or () if a not in targeted]
    if untargeted:
        which = "no kernel" if options.kernels is None else f"none of {', '.join(sorted(options.kernels))}"
        raise UsageError(
            f"--arch {', '.join(untargeted)}: {which} targets it (targeted: {', '.join(sorted(targeted))}); "
            "add it to the manifest's archs to resolve for it"
        )
    return plan


def _judged(
    run: Run, specs: list[KernelSpec], plan: dict[str, list[str]], phases: _Phases
) -> tuple[list[Resolved], list[Unresolved]]:
    """Each kernel × arch of ``plan`` looked up, the misses worked (judged anew), every winner through the static
    gate: the winners and the kernel × archs without one."""
    manifest, options, judges = run.manifest, run.options, run.judges
    looked: list[_Looked] = []
    for spec in specs:
        for arch in plan[spec.name]:
            q = Question(spec, arch, decision_key(manifest, spec, arch))
            looked.append(_Looked(q, lookup(run, q)))
    misses = [x.question for x in looked if x.hit is None]
    phases.done(f"{len(looked)} looked up, {len(misses)} missed")
    # the manifest's own candidates of each kernel with a miss, read once for the GPU's head start and the work
    seeds: dict[str, list[Candidate]] = {}
    if not options.locked and not options.frozen and misses:
        from ..evaluate.variants import expand_variants

        seeds = {q.spec.name: expand_variants(manifest, q.spec) for q in misses}
        phases.done(f"{sum(len(c) for c in seeds.values())} candidates expanded")
        if not judges.endpoint(manifest, options):
            judges.prepare([q.job(manifest, seeds[q.spec.name]) for q in misses])
            phases.done("prepared (GPUs found, evaluator started, gate-only batches gated)")
    outcomes: list[Resolved | Unresolved | None] = [x.hit for x in looked]
    for i in _work_order(looked, judges, options):
        q = looked[i].question
        if options.locked:  # lookup answers every current entry or raises; nothing may be judged anew
            raise ResolveError(
                f"{q.spec.name}/{q.arch}: {options.mode_words[0]} and the lock has no usable entry for it"
            )
        kept = None
        if options.refresh:  # what a refresh falls back to where nothing can judge this arch again
            old = lookup(replace(run, options=replace(options, refresh=False)), q)
            kept = old if isinstance(old, Resolved) else None
        outcomes[i] = work(run, q, seeds.get(q.spec.name, []), kept)
        phases.done(f"{q.spec.name}/{q.arch} worked")
    outcomes = [(library_verdict(manifest, o) or o) if isinstance(o, Resolved) else o for o in outcomes]
    entries = _gate_emitted(manifest, judges, [o for o in outcomes if isinstance(o, Resolved)])
    phases.done(f"{len(entries)} winners gated")
    return entries, [o for o in outcomes if isinstance(o, Unresolved)]


def _merged(manifest: Manifest, lock: Lock | None, entries: list[Resolved], failed: list[Unresolved]) -> Lock:
    """The lock after this run: its entries for kernel × archs still declared, none where nothing may win (the
    lock never names a rejected or pending winner), each winner of this run in its place."""
    new_entries = {(e.name, e.arch): e for e in (lock.kernel if lock else [])}
    declared = {(s.name, a) for s in manifest.kernels for a in manifest.archs_of(s)}
    dropped = {(u.kernel, u.arch) for u in failed}
    new_entries = {k: v for k, v in new_entries.items() if k in declared and k not in dropped}
    for r in entries:
        new_entries[(r.spec.name, r.arch)] = _lock_entry(manifest, r, new_entries.get((r.spec.name, r.arch)))
    return Lock(manifest=manifest.path.name, kernel=sorted(new_entries.values(), key=lambda e: (e.name, e.arch)))
