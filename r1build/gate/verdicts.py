"""The static gate's verdicts as the cache keeps them, read without the gate's compile machinery.

A warm run (``resolve --locked``, a build whose winners the gate judged before) asks the gate only for verdicts
the cache holds: :func:`cached_verdicts` answers them from the gate keys alone, so such a run imports none of
:mod:`.static`, :mod:`.nvcc`, :mod:`.symbols` or the sandbox. :class:`~.static.StaticGate` keys, refuses and
applies the limits with the same functions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..cache import Cache
from ..convert import replace
from ..events import Progress, Stage, emit
from ..keys import digest_json
from ..manifest.archs import arch_info, parse_arch
from ..manifest.cdecl import declaration
from ..manifest.flags import include_digest
from ..manifest.model import KernelSpec, Limits, Manifest
from ..records import Candidate, GateReport, Result
from ..toolchain.defines import define_problem
from ..toolchain.nvcc import Toolchain

__all__ = [
    "ALLOWLIST_VERSION",
    "GATE_SCHEMA",
    "apply_limits",
    "cached_verdicts",
    "gate_key",
    "gate_key_of",
    "limit_violations",
    "refused",
]

GATE_SCHEMA = 4
"""Bumped whenever what goes into a gate key, or what a cached gate result means, changes (2: candidates are
compiled beside the declared signature, which is part of the key; 3: a passed variant is within the static memory
limit and links into a shared library; 4: a confined compile sees the manifest's include search folders, so a
generated candidate that includes the project's own header is no longer a compile error)."""

ALLOWLIST_VERSION = 5
"""Part of the gate's cache key: bump it whenever a rule of :mod:`.symbols` changes, so old verdicts stop
matching (3: the raw bytes of x86-64 executable sections are searched for system-call encodings; 4: no host code
runs at load or unload; _GLOBAL_OFFSET_TABLE_ allowed, which -fPIC compiles of ordinary code reference; 5: ifunc
resolvers count as load-time code)."""


def gate_key(manifest: Manifest, spec: KernelSpec, arch: str, candidate: Candidate, toolchain: Toolchain) -> str:
    """The cache key of one compile: everything that can change its verdict, and nothing else (with the headers
    in the manifest's relative include folders, where it has any)."""
    return gate_key_of(manifest, spec, arch, candidate.source_digest, candidate.defines, toolchain)


def gate_key_of(
    manifest: Manifest,
    spec: KernelSpec,
    arch: str,
    source_digest: str,
    defines: Mapping[str, int | str],
    toolchain: Toolchain,
) -> str:
    """:func:`gate_key` of the variant of the source ``source_digest`` with ``defines`` (what a lock entry names),
    without its text."""
    includes = include_digest(manifest.settings.nvcc_flags, manifest.root)
    return digest_json(
        {
            **({"includes": includes} if includes is not None else {}),
            "schema": GATE_SCHEMA,
            "allowlist": ALLOWLIST_VERSION,
            "source": source_digest,
            "defines": {name: defines[name] for name in sorted(defines)},
            "arch": arch,
            "flags": list(manifest.settings.nvcc_flags),
            "toolchain": toolchain.ident,
            "entry": spec.name,
            "declaration": declaration(spec),
        }
    )


def limit_violations(report: GateReport, limits: Limits, arch: str) -> list[str]:
    """Each way the ptxas report exceeds the kernel's limits, as a sentence a model can act on."""
    info = arch_info(arch)
    out = []
    registers = limits.registers if limits.registers is not None else info.regs_per_thread
    if report.registers > registers:
        out.append(
            f"ptxas reports {report.registers} registers per thread on {arch}, over the limit of {registers} "
            "(limits.registers); keep fewer values live per thread (smaller per-thread tiles, fewer unrolled "
            "accumulators) or bound it with __launch_bounds__."
        )
    spill = report.spill_stores + report.spill_loads
    if limits.spill_bytes is not None and spill > limits.spill_bytes:
        out.append(
            f"ptxas reports {spill} bytes of register spills on {arch} ({report.spill_stores} stored, "
            f"{report.spill_loads} loaded), over the limit of {limits.spill_bytes} (limits.spill-bytes); reduce "
            "register pressure or avoid dynamically indexed local arrays so nothing goes to local memory."
        )
    shared = limits.shared_bytes if limits.shared_bytes is not None else info.smem_per_block
    if report.shared_bytes > shared:
        out.append(
            f"ptxas reports {report.shared_bytes} bytes of static shared memory per block on {arch}, over the "
            f"limit of {shared} (limits.shared-bytes); use smaller tiles."
        )
    return out


def refused(arch: str, candidate: Candidate, tc: Toolchain) -> Result | None:
    """The verdict on a candidate that may not be compiled at all: a define that is no plain value (which
    :func:`~.nvcc.nvcc_command` refuses to write), or a generated candidate whose text reads files while
    compiling (:mod:`.source`). Rejected before any compile and before the cache, so a verdict cached before a
    check existed cannot pass it; None for every other candidate."""
    problems = [f"-D{p}" for p in map(define_problem, candidate.defines, candidate.defines.values()) if p]
    if candidate.origin.kind == "generated":
        from .source import source_problems  # here: its patterns cost milliseconds, and few candidates need them

        problems += source_problems(candidate.source)
    if not problems:
        return None
    detail = "not compiled: " + "; ".join(problems) + "."
    return Result(
        candidate=candidate.digest, arch=arch, status="rejected", stage="gate", detail=detail, toolchain=tc.ident
    )


def apply_limits(result: Result, spec: KernelSpec, arch: str) -> Result:
    """A passed compile's verdict held against the kernel's limits (rejected where it exceeds one)."""
    if result.status != "passed" or result.gate is None:
        return result
    violations = limit_violations(result.gate, spec.limits, arch)
    if not violations:
        return result
    return replace(result, status="rejected", detail=" ".join(violations))


def cached_verdicts(
    cache: Cache, manifest: Manifest, spec: KernelSpec, pairs: Sequence[tuple[str, Candidate]], tc: Toolchain
) -> list[Result] | None:
    """What :meth:`~.static.StaticGate.judge` answers for ``pairs`` when it needs no compile (each refused or
    cached), with the same events; None when any needs a compile (ask the gate)."""
    keyed = [(parse_arch(a), c) for a, c in pairs]
    keys = [gate_key(manifest, spec, a, c, tc) for a, c in keyed]
    verdicts: dict[str, Result] = {}
    for (arch, candidate), key in zip(keyed, keys, strict=True):
        if key not in verdicts:
            found = refused(arch, candidate, tc) or cache.get_gate(key)
            if found is None:
                return None
            verdicts[key] = found
    emit(Stage("gate", spec.name, None, detail=f"{len(keys)} to judge"))
    emit(Progress(f"gate {spec.name}", len(verdicts), len(verdicts), {"cached": len(verdicts)}))
    results = [apply_limits(verdicts[k], spec, a) for (a, _), k in zip(keyed, keys, strict=True)]
    counts = {s: sum(r.status == s for r in results) for s in ("passed", "rejected", "compile_error")}
    detail = ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in counts.items() if n)
    emit(Stage("gate", spec.name, None, done=True, detail=f"{detail}; 0 compiled, {len(verdicts)} from cache"))
    return results
