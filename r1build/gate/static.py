"""The static gate: the judge that needs no GPU.

For every candidate variant and arch it compiles with nvcc (:mod:`.nvcc`) beside the entry point's declaration
as the public header states it (so only a definition of exactly the declared signature compiles), inspects the
host object (:mod:`.symbols`), limits its static memory (:mod:`.device_memory`), links it into the shared library
the GPU side loads (:mod:`.link`, the GPU side's own step) and holds the ptxas report against the kernel's limits.
Verdicts are cached under a gate key (source digest, defines, arch, nvcc flags, toolchain identity, entry point
and allowlist version), so a warm build compiles nothing twice. What is cached is the compile's verdict *before*
the limits are applied: changing ``limits`` in the manifest re-judges from the cached report without compiling
again.
"""

from __future__ import annotations

import contextvars
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from pathlib import Path

from ..cache import Cache
from ..convert import record, replace
from ..errors import format_subprocess_failure
from ..events import Progress, Stage, emit
from ..judge import Job
from ..manifest.archs import arch_info, parse_arch, suffix_of
from ..manifest.cdecl import declaration, signature
from ..manifest.flags import rooted_flags
from ..manifest.model import KernelSpec, Manifest
from ..records import Candidate, GateReport, Result, Status
from ..sandbox import Runner, run_process, sandbox_for
from ..toolchain.nvcc import Toolchain
from ..toolchain.nvcc import toolchain as default_toolchain
from ..toolchain.stopping import stoppable
from .device_memory import STATIC_MEMORY_LIMIT
from .link import check_and_link
from .nvcc import PIC_FLAGS, Compilation, compile_variant
from .verdicts import GATE_SCHEMA, apply_limits, gate_key, limit_violations, refused

__all__ = ["GATE_SCHEMA", "StaticGate", "gate_for_archs", "gate_key", "limit_violations"]

DEFAULT_TIMEOUT_S = 300.0
"""Longest one nvcc compile may take before the candidate counts as a compile error."""


_SIGNATURE_CLASH = re.compile(
    r'has "C" linkage|cannot overload functions distinguished by return type|declaration is incompatible'
    r"|conflicting declaration|declared .extern. and later .static.|incompatible with previous declaration"
)


def _signature_hint(spec: KernelSpec, output: str) -> str:
    """A first sentence for a compile error that comes from the entry point's definition not matching the
    declaration compiled in front of it (nvcc's own words are less direct about it)."""
    lines = output.splitlines()
    for i, line in enumerate(lines):
        near = " ".join(lines[i : i + 2])
        if _SIGNATURE_CLASH.search(line) and re.search(rf"\b{re.escape(spec.name)}\b", near):
            return (
                f'the definition of {spec.name} does not match the declared signature extern "C" '
                f"{signature(spec)}: the parameter types (const included), their order and the return type "
                "must be exactly these\n"
            )
    return ""


_NOT_ON_TARGET = re.compile(r"(?:Instruction|Feature) '(?P<what>[^']+)' not supported on \.target '(?P<arch>sm_\w+)'")
"""ptxas refusing an instruction the target lacks: ``Instruction 'setmaxnreg.inc' not supported on .target 'sm_90'``."""


def _arch_specific_hint(arch: str, output: str) -> str:
    """A first sentence for a compile that failed because the candidate uses an instruction only an ``a`` arch
    (or a family arch) has (wgmma, setmaxnreg, tcgen05, ...) while compiled for ``arch``, which lacks it; ``""``
    for any other failure, and for an ``a`` arch (nothing narrower holds more)."""
    found = next((m for m in _NOT_ON_TARGET.finditer(output) if m["arch"] == arch), None)
    if found is None or suffix_of(arch) == "a":
        return ""
    specific = arch.rstrip("f") + "a"
    family = f" (or perhaps {arch}f)" if not suffix_of(arch) and arch_info(arch).capability[0] >= 10 else ""
    return (
        f"uses {found['what']}, an arch-specific instruction that code for {arch} cannot hold: only {specific}"
        f"{family} runs it, so this candidate is not chosen for {arch}\n"
    )


def _hints(spec: KernelSpec, arch: str, output: str) -> str:
    """The first sentences of a compile error's verdict, where nvcc's own words are less direct."""
    return _signature_hint(spec, output) + _arch_specific_hint(arch, output)


@record(frozen=True)
class _Task:
    arch: str
    candidate: Candidate
    key: str


class StaticGate:
    """Judges candidates by compiling them: implements :class:`~r1build.judge.Evaluator` without a GPU.

    Results have ``stage="gate"`` and status ``passed``, ``compile_error`` or ``rejected``; a bad candidate is a
    result, never an exception. :class:`~r1build.errors.ToolchainError` when nvcc or binutils are missing.
    """

    def __init__(
        self,
        cache: Cache,
        *,
        toolchain: Toolchain | None = None,
        jobs: int | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        keep_objects: Path | None = None,
        static_memory_limit: int = STATIC_MEMORY_LIMIT,
        runner: Runner = run_process,
    ) -> None:
        self.cache = cache
        """Where verdicts are looked up and stored."""
        self.jobs = max(1, jobs if jobs is not None else (os.cpu_count() or 1))
        """Most compiles running at once."""
        self.timeout_s = timeout_s
        """Longest one compile may take."""
        self.compiles = 0
        """nvcc runs this gate made (cache hits make none)."""
        self.cache_hits = 0
        """Verdicts this gate took from the cache."""
        self.keep_objects = keep_objects
        """Where the objects of passing compiles and the shared libraries the gate linked from them are kept, so a
        GPU evaluator loads the gate's own library instead of compiling and linking the variant again; None: not
        kept."""
        self.static_memory_limit = static_memory_limit
        """Most bytes of static memory a variant may reserve (:data:`.device_memory.STATIC_MEMORY_LIMIT`)."""
        self.runner = runner
        """What runs nvcc and the link (:mod:`r1build.toolchain.runner`; a test hands in one that records)."""
        self._toolchain = toolchain
        self._lock = threading.Lock()
        self._objects: dict[tuple[str, str], Path] = {}
        self._libraries: dict[tuple[str, str], Path] = {}
        self._along: dict[tuple[str, str], tuple[str, ...]] = {}

    @property
    def toolchain(self) -> Toolchain:
        """The nvcc in use, found on first use."""
        if self._toolchain is None:
            self._toolchain = default_toolchain()
        return self._toolchain

    def compile_along(self, kernel: str, candidates: Sequence[Candidate], archs: Sequence[str]) -> None:
        """Whenever this gate next compiles one of ``candidates`` of ``kernel`` (for whatever arch it is asked),
        the same nvcc compiles it for ``archs`` too, and those verdicts go into the cache: a resolve on a GPU
        machine gets the gate-only arch's verdicts (sm_80 beside an H200) from the GPU arch's compiles instead of
        an nvcc of their own. The caller asks for them later (:meth:`judge`), from the cache."""
        with self._lock:
            for c in candidates:
                known = self._along.get((kernel, c.digest), ())
                self._along[kernel, c.digest] = tuple(dict.fromkeys([*known, *map(parse_arch, archs)]))

    def known(self, job: Job) -> int:
        """How many of ``job``'s first candidates have a verdict without compiling (in the cache, or refused for
        the arch): what :meth:`evaluate` of them would take without a compile."""
        arch, tc = job.arch, self.toolchain  # canonical (a Job's arch is)
        for n, c in enumerate(job.candidates):
            if (
                refused(arch, c, tc) is None
                and self.cache.get_gate(gate_key(job.manifest, job.spec, arch, c, tc)) is None
            ):
                return n
        return len(job.candidates)

    def evaluate(self, job: Job) -> list[Result]:
        """One result per candidate of ``job``, in order."""
        return self.judge(job.manifest, job.spec, [(job.arch, c) for c in job.candidates], arch=job.arch)

    def judge(
        self, manifest: Manifest, spec: KernelSpec, pairs: Sequence[tuple[str, Candidate]], *, arch: str | None = None
    ) -> list[Result]:
        """One result per ``(arch, candidate)`` pair, in order; compiles run in parallel, each distinct compile
        once. ``arch`` only labels the events (None when the pairs span several archs)."""
        tc = self.toolchain
        tasks = [_Task(parse_arch(a), c, "") for a, c in pairs]
        tasks = [replace(t, key=gate_key(manifest, spec, t.arch, t.candidate, tc)) for t in tasks]
        emit(Stage("gate", spec.name, arch, detail=f"{len(tasks)} to judge"))

        verdicts: dict[str, Result] = {}
        pending: dict[str, _Task] = {}
        for task in tasks:
            if task.key in verdicts or task.key in pending:
                continue
            refusal = refused(task.arch, task.candidate, tc)
            if refusal is not None:
                verdicts[task.key] = refusal
                continue
            cached = self.cache.get_gate(task.key)
            if cached is not None:
                verdicts[task.key] = cached
            else:
                pending[task.key] = task
        with self._lock:
            self.cache_hits += len(verdicts)
        along = self._along_tasks(manifest, spec, list(pending.values()), tc)

        total = len(verdicts) + len(pending)
        progress = f"gate {spec.name}" + (f" {arch}" if arch else "")
        emit(Progress(progress, len(verdicts), total, {"cached": len(verdicts)}))
        for key, result in self._compile_all(manifest, spec, [*pending.values(), *along]):
            if key not in pending:  # a verdict compiled along (cached, not asked for here)
                continue
            verdicts[key] = result
            emit(Progress(progress, len(verdicts), total, {"cached": total - len(pending)}))

        results = [self._apply_limits(verdicts[t.key], spec, t.arch) for t in tasks]
        counts = {s: sum(r.status == s for r in results) for s in ("passed", "rejected", "compile_error")}
        detail = ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in counts.items() if n)
        detail += f"; {len(pending)} compiled, {total - len(pending)} from cache"
        emit(Stage("gate", spec.name, arch, done=True, detail=detail, passed=counts["passed"]))
        return results

    def object_for(self, digest: str, arch: str) -> Path | None:
        """The kept object of a variant that passed this gate in this process with machine code for ``arch``
        (with :attr:`keep_objects` only; a verdict from the cache has none)."""
        with self._lock:
            path = self._objects.get((digest, parse_arch(arch)))
        return path if path is not None and path.is_file() else None

    def library_for(self, digest: str, arch: str) -> Path | None:
        """The shared library this gate linked, in this process, from the kept object of :meth:`object_for`: the
        very step the GPU side would run again (with :attr:`keep_objects` only)."""
        with self._lock:
            path = self._libraries.get((digest, parse_arch(arch)))
        return path if path is not None and path.is_file() else None

    def compile_verdict(
        self, manifest: Manifest, spec: KernelSpec, arch: str, candidate: Candidate
    ) -> tuple[Result, bool]:
        """The verdict of one compile before the limits, and whether it may be cached (:meth:`compile_verdicts`
        of one arch)."""
        return self.compile_verdicts(manifest, spec, [arch], candidate)[0]

    def compile_verdicts(
        self, manifest: Manifest, spec: KernelSpec, archs: Sequence[str], candidate: Candidate
    ) -> list[tuple[Result, bool]]:
        """The verdicts of ``candidate`` on each of ``archs`` before the limits, in order, each with whether it may
        be cached: one nvcc for all of them, as :meth:`judge` compiles a variant (one per arch where that compile
        fails). What a cluster worker computes for the resolving machine's gate (:mod:`r1build.cluster`), which
        applies the limits and caches under the same keys as this gate."""
        canonical = list(dict.fromkeys(parse_arch(a) for a in archs))
        refusals = {a: refused(a, candidate, self.toolchain) for a in canonical}
        group = [_Task(a, candidate, "") for a in canonical if refusals[a] is None]
        compiled = dict(zip([t.arch for t in group], self._compile_group(manifest, spec, group), strict=True))
        return [(r, False) if (r := refusals[a]) is not None else compiled[a] for a in (parse_arch(a) for a in archs)]

    # -- internals ---------------------------------------------------------------------------------------
    def _along_tasks(self, manifest: Manifest, spec: KernelSpec, pending: list[_Task], tc: Toolchain) -> list[_Task]:
        """The compiles :meth:`compile_along` asked for, of the candidates about to be compiled: those archs
        not among the pending ones, may be compiled and not in the cache already."""
        with self._lock:
            wanted = {t.candidate.digest: self._along.get((spec.name, t.candidate.digest), ()) for t in pending}
        asked = {(t.candidate.digest, t.arch) for t in pending}
        out: dict[str, _Task] = {}
        for task in pending:
            for extra in wanted[task.candidate.digest]:
                if (task.candidate.digest, extra) in asked or refused(extra, task.candidate, tc) is not None:
                    continue
                key = gate_key(manifest, spec, extra, task.candidate, tc)
                if key not in out and self.cache.get_gate(key) is None:
                    out[key] = _Task(extra, task.candidate, key)
        return list(out.values())

    def _compile_all(self, manifest: Manifest, spec: KernelSpec, tasks: list[_Task]) -> list[tuple[str, Result]]:
        """Compile every task: one nvcc per candidate variant for all its archs (the ptxas report split per arch);
        how many run at once is bounded by the process's compile slots (:data:`.nvcc.COMPILE_SLOTS`)."""
        groups: dict[str, list[_Task]] = {}
        for task in tasks:
            groups.setdefault(task.candidate.digest, []).append(task)

        def one(group: list[_Task]) -> list[tuple[str, Result]]:
            out = []
            for task, (result, cacheable) in zip(group, self._compile_group(manifest, spec, group), strict=True):
                if cacheable:
                    self.cache.put_gate(task.key, result)
                out.append((task.key, result))
            return out

        if len(groups) <= 1 or self.jobs == 1:
            return [pair for group in groups.values() for pair in one(group)]
        done: list[tuple[str, Result]] = []
        workers = min(self.jobs, len(groups))
        with stoppable() as scope, ThreadPoolExecutor(max_workers=workers, thread_name_prefix="r1build-gate") as pool:
            # each task runs in a copy of the caller's context, so its events reach the caller's sink (and an
            # interrupt stops its compile: the scope is in that context)
            futures: list[Future[list[tuple[str, Result]]]] = [
                pool.submit(contextvars.copy_context().run, one, group) for group in groups.values()
            ]
            try:
                for future in as_completed(futures):
                    done.extend(future.result())
            except BaseException as exc:  # an interrupt: the queued compiles never start, the running ones stop
                pool.shutdown(wait=False, cancel_futures=True)
                if not isinstance(exc, Exception):
                    scope.stop()
                raise
        return done

    def _compile_group(self, manifest: Manifest, spec: KernelSpec, group: list[_Task]) -> list[tuple[Result, bool]]:
        """The verdicts of one candidate variant on each task's arch: one compile for all of them, or one per arch
        when that compile fails (so each arch's error is its own) or its report cannot be split."""
        if len(group) > 1:
            together = self._compile_one(manifest, spec, group)
            if together is not None:
                return together
        out: list[tuple[Result, bool]] = []
        for task in group:
            alone = self._compile_one(manifest, spec, [task])
            assert alone is not None  # one arch: always a verdict
            out += alone
        return out

    def _compile_one(
        self, manifest: Manifest, spec: KernelSpec, tasks: list[_Task]
    ) -> list[tuple[Result, bool]] | None:
        """The verdict of one compile of one variant for the tasks' archs, before limits, each with whether it
        may be cached (timeouts are not: a loaded machine is the likelier cause than the candidate); None when a
        compile for several archs did not succeed or its report could not be split per arch."""
        tc = self.toolchain
        archs = [t.arch for t in tasks]
        candidate = tasks[0].candidate

        def verdict(arch: str, status: Status, detail: str = "", report: GateReport | None = None) -> Result:
            return Result(
                candidate=candidate.digest,
                arch=arch,
                status=status,
                stage="gate",
                detail=detail,
                gate=report,
                toolchain=tc.ident,
            )

        with tempfile.TemporaryDirectory(prefix="r1build-gate-") as scratch:
            compiled: Compilation = compile_variant(
                candidate.source,
                candidate.defines,
                archs if len(archs) > 1 else archs[0],
                name=spec.name,
                flags=[*rooted_flags(manifest.settings.nvcc_flags, manifest.root), *PIC_FLAGS],
                toolchain=tc,
                workdir=Path(scratch),
                timeout_s=self.timeout_s,
                declaration=declaration(spec),
                sandbox=sandbox_for(candidate.origin.kind),
                runner=self.runner,
            )
            with self._lock:
                self.compiles += 1
            if len(archs) > 1 and (not compiled.ok or compiled.reports is None):
                return None
            if compiled.timed_out:
                detail = f"nvcc did not finish within {self.timeout_s:g} s\n" + format_subprocess_failure(
                    compiled.command, -1, compiled.output
                )
                return [(verdict(archs[0], "compile_error", detail), False)]
            if not compiled.ok or compiled.object_path is None:
                detail = format_subprocess_failure(compiled.command, compiled.returncode or 1, compiled.output)
                return [(verdict(archs[0], "compile_error", _hints(spec, archs[0], compiled.output) + detail), True)]
            linked = check_and_link(
                compiled.object_path,
                spec.name,
                toolchain=tc,
                sandbox=sandbox_for(candidate.origin.kind),
                timeout_s=self.timeout_s,
                limit=self.static_memory_limit,
                runner=self.runner,
            )
            if linked.status == "passed" and linked.library is not None and self.keep_objects is not None:
                self._keep(compiled.object_path, linked.library, candidate.digest, archs)
        reports = compiled.reports or {archs[0]: compiled.report}
        return [(verdict(a, linked.status, linked.detail, reports[a]), linked.cacheable) for a in archs]

    def _keep(self, obj: Path, library: Path, digest: str, archs: list[str]) -> None:
        assert self.keep_objects is not None
        self.keep_objects.mkdir(parents=True, exist_ok=True)
        kept = self.keep_objects / f"{digest[:32]}-{'-'.join(archs)}.o"
        shutil.copyfile(obj, kept)
        kept_library = kept.with_suffix(".so")
        shutil.copyfile(library, kept_library)
        with self._lock:
            for arch in archs:
                self._objects[digest, arch] = kept
                self._libraries[digest, arch] = kept_library

    @staticmethod
    def _apply_limits(result: Result, spec: KernelSpec, arch: str) -> Result:
        return apply_limits(result, spec, arch)


def gate_for_archs(
    gate: StaticGate, manifest: Manifest, spec: KernelSpec, candidate: Candidate, archs: Sequence[str]
) -> dict[str, Result]:
    """The gate's verdict on one candidate for each of ``archs`` (compiled in parallel), keyed by canonical
    arch; used by the resolver to check every emitted winner for every target."""
    canonical = [parse_arch(a) for a in archs]
    results = gate.judge(manifest, spec, [(a, candidate) for a in canonical])
    return dict(zip(canonical, results, strict=True))
